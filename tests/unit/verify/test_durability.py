"""The cluster settings exactly-once output rests on, judged as warnings with their fix."""

from __future__ import annotations

from daemon.kafka.topic_settings import ClusterSettings, TopicSettings
from daemon.verify.durability import warnings

TIMEOUT_MS = 900_000
SAFE_TOPIC = TopicSettings(
    min_insync_replicas=2, unclean_leader_election=False, replication_factor=3
)
SAFE_BROKER = {"transaction_max_timeout_ms": 900_000, "offsets_retention_minutes": 10080}


def test_a_cluster_set_up_for_durability_gets_no_warning() -> None:
    settings = ClusterSettings(topics={"out": SAFE_TOPIC, "dlq": SAFE_TOPIC}, **SAFE_BROKER)
    assert warnings(settings, ["out", "dlq"], TIMEOUT_MS) == []


def test_a_topic_without_its_own_setting_takes_the_brokers() -> None:
    bare = TopicSettings(replication_factor=3)
    settings = ClusterSettings(
        topics={"out": bare}, min_insync_replicas=2, unclean_leader_election=False, **SAFE_BROKER
    )
    assert warnings(settings, ["out"], TIMEOUT_MS) == []
    settings = ClusterSettings(
        topics={"out": bare}, min_insync_replicas=1, unclean_leader_election=True, **SAFE_BROKER
    )
    assert warnings(settings, ["out"], TIMEOUT_MS) == [
        "min.insync.replicas is 1 on topic out: a lost broker can lose committed output; "
        "set min.insync.replicas to 2 with replication factor 3",
        "unclean leader election is enabled on topic out: an out-of-date replica can become "
        "leader and drop committed output; set unclean.leader.election.enable=false",
    ]


def test_one_replica_and_an_insync_count_that_stops_writes() -> None:
    lone = TopicSettings(min_insync_replicas=1, unclean_leader_election=False, replication_factor=1)
    tight = TopicSettings(
        min_insync_replicas=3, unclean_leader_election=False, replication_factor=3
    )
    settings = ClusterSettings(topics={"a": lone, "b": lone, "c": tight}, **SAFE_BROKER)
    assert warnings(settings, ["a", "b", "c"], TIMEOUT_MS) == [
        # Topics that share a finding share its line; a single replica is not also told
        # that min.insync.replicas of 1 is too low (the replication factor is the fix).
        "topics a, b: replication factor 1, so a lost broker loses committed output; "
        "recreate with replication factor 3 and min.insync.replicas 2",
        "min.insync.replicas is 3 on topic c of replication factor 3: one broker down stops "
        "every transaction; set min.insync.replicas to 2 with replication factor 3",
    ]


def test_what_the_cluster_does_not_report_is_said_so_never_guessed() -> None:
    settings = ClusterSettings(topics={"out": TopicSettings(replication_factor=1)})
    lines = warnings(settings, ["out"], TIMEOUT_MS)
    assert lines == [
        "topic out: replication factor 1, so a lost broker loses committed output; "
        "recreate with replication factor 3 and min.insync.replicas 2",
        "min.insync.replicas is not reported for topic out: set min.insync.replicas to 2 "
        "with replication factor 3",
        "unclean.leader.election.enable is not reported for topic out: make sure it is false "
        "(an out-of-date replica that becomes leader drops committed output)",
        "transaction.max.timeout.ms is not reported by the brokers: a start cannot check "
        "[kafka] transaction_timeout (900000 ms) against it; make sure the brokers allow at "
        "least that",
        "offsets.retention.minutes is not reported by the brokers: a pipeline that crashed "
        "and stays down longer than it loses its batch markers and stops at start; make sure "
        "it is at least 10080 (7 days) and longer than an outage may last",
    ]
    unlisted = warnings(ClusterSettings(**SAFE_BROKER), ["gone"], TIMEOUT_MS)
    assert unlisted[0] == (
        "the replication factor of topic gone is not reported: make sure it is at least 3"
    )


def test_a_transaction_cap_below_the_timeout_and_a_short_offsets_retention() -> None:
    settings = ClusterSettings(
        topics={"out": SAFE_TOPIC},
        transaction_max_timeout_ms=60_000,
        offsets_retention_minutes=1440,
    )
    assert warnings(settings, ["out"], TIMEOUT_MS) == [
        "transaction.max.timeout.ms is 60000 ms, below [kafka] transaction_timeout "
        "(900000 ms): every pipeline start is refused; raise it on the brokers or lower "
        "transaction_timeout",
        "offsets.retention.minutes is 1440: a pipeline that crashed and stays down longer "
        "than 1440 minutes loses its batch markers and stops at start; raise it to at least "
        "10080 (7 days) and longer than an outage may last",
    ]
