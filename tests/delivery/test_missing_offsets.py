"""Offsets the broker no longer has, lost under a stopped pipeline: records removed below the
offset it is to read next, and its topics deleted and created again with fewer records than
it had read.

Records removed (retention, DeleteRecords): the test broker, Tansu 0.6, removes none (it
answers DeleteRecords by closing the connection, and its partitions always start at 0), so a
proxy in front of the session's broker answers as a Kafka broker that removed them would
(tests/removed_records_proxy.py): a Fetch below the partition's new log start is out of
range, and every answer says the log starts there. ``on_missing_offsets = "fail"`` stops
the pipeline with one line naming the partition, the offset it needed and the earliest one
there; ``"earliest"`` reads on from that one, and reports what it skipped to the daemon, which
logs the WARN line and counts it per partition (checked here by the daemon's own code).

Topics created again: ``"earliest"`` reads them from their first record. A topic created
again with more records than the pipeline had read is told by its topic id (Tansu gives topic
ids; the proxy, which caps the Metadata answers at a version without them, stands for a
broker that gives none, where only the offsets tell), and a partition gone with it is named.
What ``daemon run`` shows of that case (``"fail"``'s line in the log and on ``/readyz``, the
WARN line, the counters, ``"latest"``) is tested in ``tests/service/test_nothing_lost.py``.

A start seeded by ``daemon reset`` (or ``daemon rescale``, or a reset keeping the state: the
seed's offsets go through the same check) below the log start is handled by the same policy.
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from daemon.broker import EmbeddedBroker
from daemon.errors import failure_reason, stops_the_pipeline
from daemon.model.config import PipelineFile
from daemon.model.reports import MissingOffsetsResumed, Report, Resumed, decode
from daemon.service.observability import Metrics
from tests.committed_read import committed
from tests.kafka_helpers import (
    VIEWS,
    In,
    TweetViews,
    client_conf,
    create_topic,
    produce,
    read_topic,
    recreate_topic,
    run_pipeline,
    tweet,
    user,
)
from tests.removed_records_proxy import removing
from tests.state_helpers import daemon


def tweets(ids: range) -> list[In]:
    """Tweets by users 1 (even ids) and 2 (odd ids)."""
    return [tweet(i, 1 + i % 2, f"tweet {i}") for i in ids]


def test_topics_recreated_under_a_stopped_pipeline_are_read_from_their_earliest(
    spark: Any, tweet_views: Callable[..., TweetViews]
) -> None:
    setup = tweet_views("missing")
    conf, users, tweet_topic, output = setup.conf, setup.users, setup.tweets, setup.output
    file = setup.file(on_missing_offsets="earliest")
    produce(conf, users, [user(1, "ada", 1_000), user(2, "grace", 1_001)])
    produce(conf, tweet_topic, tweets(range(10)))
    run_pipeline(spark, file)  # it has read users 0-1 and tweets 0-9: it needs 2 and 10 next

    # Stopped, it loses what it had not read yet: both topics are deleted and created again,
    # with fewer records than it read from them (it needs offsets 2 and 10 next).
    for topic in (users, tweet_topic):
        recreate_topic(conf, topic)
    produce(conf, users, [user(1, "ada again", 30_000)])
    produce(conf, tweet_topic, tweets(range(20, 23)))

    run_pipeline(spark, file)
    names: dict[int, str] = {}
    for record in read_topic(conf, output):
        view = VIEWS.decode(record.value or b"")
        names[view["id"]] = view["author"]["name"]  # the latest view of each tweet
    # Both new topics were read from their first record: the new tweets joined, and ada's
    # new name reached every tweet of hers.
    kept = [*range(10), *range(20, 23)]
    assert names == {i: "ada again" if i % 2 == 0 else "grace" for i in kept}


def removed_then_run(
    spark: Any,
    proxy: Any,
    pipeline: Callable[[str], PipelineFile],
    tweet_topic: str,
    needed: int,
    tmp_path: Path,
) -> tuple[str, list[Report]]:
    """Tweets 10-19 arrive and the partition loses those before 15; then the pipeline, which
    is to read offset ``needed`` next, runs with "fail", which stops it with one line, and with
    "earliest". Returns the facts of the line and what the daemon's end of the metrics socket
    was sent."""
    conf = client_conf(proxy.bootstrap_servers)
    # Tweets 15-19 are one batch of their own, so Tansu's ListOffsets(LATEST), its last
    # batch's base offset + 1, is past 15 too.
    assert produce(conf, tweet_topic, tweets(range(10, 15))) == {0: 15}
    assert produce(conf, tweet_topic, tweets(range(15, 20))) == {0: 20}
    proxy.removed[(tweet_topic, 0)] = 15

    with pytest.raises(Exception) as failed:  # noqa: PT011 - Spark's, checked below
        run_pipeline(spark, pipeline("fail"))
    facts = (
        f"pipeline '{pipeline('fail').pipeline[0].name}': input topic '{tweet_topic}' partition "
        f"0 no longer has offset {needed}: the earliest it has is 15 (retention or DeleteRecords "
        "removed the records before it)"
    )
    assert stops_the_pipeline(str(failed.value))
    assert failure_reason(str(failed.value)) == (
        f'{facts}; set on_missing_offsets = "earliest" or "latest" to read on from there, '
        "or move its start with `daemon reset`"
    )

    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as daemon_end:
        daemon_end.bind(str(tmp_path / "metrics.sock"))
        run_pipeline(spark, pipeline("earliest"), metrics_address=str(tmp_path / "metrics.sock"))
        daemon_end.settimeout(10)  # sent as the batch was planned, long before
        messages = [decode(daemon_end.recv(65536))]
        daemon_end.setblocking(False)
        while True:
            try:
                messages.append(decode(daemon_end.recv(65536)))
            except BlockingIOError:
                return facts, messages


def test_records_removed_under_a_stopped_pipeline_stop_it_or_are_skipped_to_the_earliest(
    broker: EmbeddedBroker, spark: Any, tweet_views: Callable[..., TweetViews], tmp_path: Path
) -> None:
    setup = tweet_views("removed")
    conf, name, users, tweet_topic = setup.conf, setup.name, setup.users, setup.tweets
    output = setup.output
    produce(conf, users, [user(1, "ada", 1_000), user(2, "grace", 1_001)])
    produce(conf, tweet_topic, tweets(range(10)))
    with removing(broker) as proxy:

        def pipeline(policy: str) -> Any:
            return setup.file(servers=proxy.bootstrap_servers, on_missing_offsets=policy)

        run_pipeline(spark, pipeline("fail"))  # it has read tweets 0-9: it needs 10 next

        # Stopped, it loses records it had not read yet: tweets 10-14 are removed.
        facts, messages = removed_then_run(spark, proxy, pipeline, tweet_topic, 10, tmp_path)

    # The first run's views, then those of the tweets from 15 on: none of 10-14, none twice.
    views = committed(conf, output, VIEWS)
    assert sorted(view.value["id"] for view in views) == [*range(10), *range(15, 20)]
    assert {view.value["id"]: view.value["author"]["name"] for view in views} == {
        i: "ada" if i % 2 == 0 else "grace" for i in [*range(10), *range(15, 20)]
    }

    # Reported once, as the daemon takes it: the WARN line, and 5 offsets skipped.
    (message,) = messages
    assert isinstance(message, MissingOffsetsResumed)
    assert message.pipeline == name
    (resumed,) = message.resumed
    assert resumed.warning(name) == (
        f"{facts}; on_missing_offsets = 'earliest': reading on from offset 15, 5 offsets skipped"
    )
    metrics = Metrics()
    metrics.read_on(name, resumed)
    partition = {"pipeline": name, "topic": tweet_topic, "partition": "0"}
    assert metrics.registry.get_sample_value("enrichd_input_offsets_skipped_total", partition) == 5
    assert metrics.registry.get_sample_value("enrichd_input_offset_resets_total", partition) == 1


def resumed_in(reports: list[Report]) -> list[Resumed]:
    """Every partition the source went on in, of the reports the daemon's end was sent."""
    return [
        item
        for report in reports
        if isinstance(report, MissingOffsetsResumed)
        for item in report.resumed
    ]


def reports(sock: socket.socket) -> list[Resumed]:
    """The :class:`Resumed` items sent to the daemon's end ``sock`` so far."""
    sock.setblocking(False)
    found = []
    while True:
        try:
            found.append(decode(sock.recv(65536)))
        except BlockingIOError:
            return resumed_in(found)


def test_a_start_seeded_below_the_log_start_stops_it_or_reads_on_with_a_warning(
    broker: EmbeddedBroker,
    spark: Any,
    tweet_views: Callable[..., TweetViews],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`daemon reset --to TIME` seeds the checkpoint at the first record of each partition;
    before the pipeline starts, tweets 0-14 are removed. The seed's start is not moved up
    without a word: "fail" stops it, "earliest" reads on from 15 with the WARN line."""
    setup = tweet_views("seeded")
    conf, name, tweet_topic = setup.conf, setup.name, setup.tweets
    produce(conf, setup.users, [user(1, "ada", 1_000), user(2, "grace", 1_001)])
    produce(conf, tweet_topic, tweets(range(10)))
    with removing(broker) as proxy:

        def pipeline(policy: str) -> PipelineFile:
            return setup.file(servers=proxy.bootstrap_servers, on_missing_offsets=policy)

        pipeline("fail")  # written for the reset
        done = daemon(capsys, "reset", str(setup.path), "--to", "0", "--yes")
        assert done.code == 0, done.err
        assert f"{tweet_topic}/0: - -> 0" in done.out  # every record, from offset 0

        facts, messages = removed_then_run(spark, proxy, pipeline, tweet_topic, 0, tmp_path)

    (resumed,) = resumed_in(messages)
    assert resumed.warning(name) == (
        f"{facts}; on_missing_offsets = 'earliest': reading on from offset 15, 15 offsets skipped"
    )
    views = committed(conf, setup.output, VIEWS)
    assert sorted(view.value["id"] for view in views) == list(range(15, 20))


def test_a_topic_created_again_is_told_by_its_id_and_a_partition_gone_is_named(
    broker: EmbeddedBroker, spark: Any, tweet_views: Callable[..., TweetViews], tmp_path: Path
) -> None:
    """Stopped after reading tweets 0-5 from two partitions (offsets 3 and 3 next), the
    pipeline's tweets topic is deleted and created again with one partition and 20 tweets:
    partition 0 has offset 3 again, so by offsets alone it would read on from there without a
    word, skipping the new tweets 20-22, and partition 1 would drop out of the plan."""
    setup = tweet_views("again", create=False)
    conf, name, tweet_topic = setup.conf, setup.name, setup.tweets
    create_topic(conf, setup.users, 1)
    create_topic(conf, tweet_topic, 2)
    produce(conf, setup.users, [user(1, "ada", 1_000), user(2, "grace", 1_001)])
    for partition in (0, 1):
        ids = range(3 * partition, 3 * partition + 3)
        produce(conf, tweet_topic, [replace(t, partition=partition) for t in tweets(ids)])

    def pipeline(servers: str, policy: str) -> PipelineFile:
        return setup.file(servers=servers, on_missing_offsets=policy)

    run_pipeline(spark, pipeline(broker.bootstrap_servers, "fail"))
    recreate_topic(conf, tweet_topic, 1)
    produce(conf, tweet_topic, tweets(range(20, 40)))

    # Through a broker that gives no topic ids (the proxy), the offsets cannot tell partition
    # 0's new records from the old ones; the partition that is gone is named all the same.
    with removing(broker) as proxy, pytest.raises(Exception) as failed:  # noqa: PT011
        run_pipeline(spark, pipeline(proxy.bootstrap_servers, "fail"))
    assert failure_reason(str(failed.value)) == (
        f"pipeline '{name}': input topic '{tweet_topic}' partition 1 no longer exists (offset 3 "
        "was to be read next): the topic was deleted and created again with fewer partitions; "
        'set on_missing_offsets = "earliest" or "latest" to read on without it, or move its '
        "start with `daemon reset`"
    )
    # The broker's topic ids tell the new partition 0 from the old.
    with pytest.raises(Exception) as failed:  # noqa: PT011 - Spark's, checked below
        run_pipeline(spark, pipeline(broker.bootstrap_servers, "fail"))
    recreated = (
        f"pipeline '{name}': input topic '{tweet_topic}' partition 0 no longer has offset 3: "
        "the topic was deleted and created again (its topic id changed), and the new one's "
        "earliest offset is 0 and its log ends at 20"
    )
    assert stops_the_pipeline(str(failed.value))
    assert failure_reason(str(failed.value)).startswith(f"{recreated}; set on_missing_offsets")

    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as daemon_end:
        daemon_end.bind(str(tmp_path / "metrics.sock"))
        file = pipeline(broker.bootstrap_servers, "earliest")
        run_pipeline(spark, file, metrics_address=str(tmp_path / "metrics.sock"))
        resumed = reports(daemon_end)
    assert [item.warning(name) for item in resumed] == [
        f"{recreated}; on_missing_offsets = 'earliest': reading on from offset 0, 0 offsets "
        "skipped",
        f"pipeline '{name}': input topic '{tweet_topic}' partition 1 no longer exists (offset 3 "
        "was to be read next): the topic was deleted and created again with fewer partitions; "
        "on_missing_offsets = 'earliest': reading on without it",
    ]
    # The new topic was read from its first record: every new tweet joined.
    views = committed(conf, setup.output, VIEWS)
    assert sorted(view.value["id"] for view in views) == [*range(6), *range(20, 40)]
