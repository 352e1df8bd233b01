"""The cluster settings exactly-once output rests on, judged: one warning line each, with the fix.

A transaction commits once the partition leaders have its records on ``min.insync.replicas``
replicas. With one replica in sync (a replication factor of 1, or ``min.insync.replicas``
of 1), a lost broker loses output the pipeline already committed, and an unclean leader
election lets an out-of-date replica lead and drop it: the batch markers say it was written,
so no replay writes it again. ``transaction.max.timeout.ms`` caps the pipelines'
``[kafka] transaction_timeout``, and ``offsets.retention.minutes`` is how long the pointers to
the batch markers outlive a stopped pipeline (docs/operations.md, "Markers that expired").

These are warnings, never a failed verify: the run itself proves what it can on the cluster
as it is, and a staging twin may rightly have fewer brokers than production. A setting the
cluster does not report is said to be not reported, never guessed.
"""

from __future__ import annotations

from daemon.kafka.topic_settings import ClusterSettings, TopicSettings

SAFE_REPLICATION = 3
"""The replication factor the fixes name: one broker may be down while writes go on."""
SAFE_MIN_INSYNC = 2
"""The ``min.insync.replicas`` the fixes name: a committed write is on two brokers."""
SAFE_RETENTION_MINUTES = 7 * 24 * 60
"""Apache Kafka's default ``offsets.retention.minutes`` (7 days): shorter is warned of."""


def warnings(
    settings: ClusterSettings, topics: list[str], transaction_timeout_ms: int
) -> list[str]:
    """A line per risky or unreported setting of ``topics`` and the brokers, each with its fix.

    Topics that share a finding are named in one line.
    """
    found: dict[str, list[str]] = {}
    for topic in topics:
        for line in _topic_findings(settings, settings.topics.get(topic, TopicSettings())):
            found.setdefault(line, []).append(topic)
    lines = [line.format(topics=_named(names)) for line, names in found.items()]
    return lines + _broker_findings(settings, transaction_timeout_ms)


def _named(topics: list[str]) -> str:
    return f"topic {topics[0]}" if len(topics) == 1 else f"topics {', '.join(topics)}"


def _topic_findings(cluster: ClusterSettings, topic: TopicSettings) -> list[str]:
    """The topic's findings, each with ``{topics}`` where the topics' names go."""
    lines = []
    replicas = topic.replication_factor
    insync = topic.min_insync_replicas
    if insync is None:
        insync = cluster.min_insync_replicas  # a topic without its own takes the brokers'
    fix = f"set min.insync.replicas to {SAFE_MIN_INSYNC} with replication factor {SAFE_REPLICATION}"
    if replicas is None:
        lines.append(
            f"the replication factor of {{topics}} is not reported: make sure it is "
            f"at least {SAFE_REPLICATION}"
        )
    elif replicas < SAFE_MIN_INSYNC:
        lines.append(
            f"{{topics}}: replication factor {replicas}, so a lost broker loses committed "
            f"output; recreate with replication factor {SAFE_REPLICATION} and "
            f"min.insync.replicas {SAFE_MIN_INSYNC}"
        )
    if insync is None:
        lines.append(f"min.insync.replicas is not reported for {{topics}}: {fix}")
    elif insync < SAFE_MIN_INSYNC and (replicas is None or replicas >= SAFE_MIN_INSYNC):
        lines.append(
            f"min.insync.replicas is {insync} on {{topics}}: a lost broker can lose committed "
            f"output; {fix}"
        )
    elif replicas is not None and replicas >= SAFE_MIN_INSYNC and insync >= replicas:
        lines.append(
            f"min.insync.replicas is {insync} on {{topics}} of replication factor {replicas}: "
            f"one broker down stops every transaction; {fix}"
        )
    unclean = topic.unclean_leader_election
    if unclean is None:
        unclean = cluster.unclean_leader_election
    if unclean is None:
        lines.append(
            "unclean.leader.election.enable is not reported for {topics}: make sure it is "
            "false (an out-of-date replica that becomes leader drops committed output)"
        )
    elif unclean:
        lines.append(
            "unclean leader election is enabled on {topics}: an out-of-date replica can "
            "become leader and drop committed output; set unclean.leader.election.enable=false"
        )
    return lines


def _broker_findings(settings: ClusterSettings, transaction_timeout_ms: int) -> list[str]:
    lines = []
    most = settings.transaction_max_timeout_ms
    if most is None:
        lines.append(
            f"transaction.max.timeout.ms is not reported by the brokers: a start cannot check "
            f"[kafka] transaction_timeout ({transaction_timeout_ms} ms) against it; make sure "
            f"the brokers allow at least that"
        )
    elif most < transaction_timeout_ms:
        lines.append(
            f"transaction.max.timeout.ms is {most} ms, below [kafka] transaction_timeout "
            f"({transaction_timeout_ms} ms): every pipeline start is refused; raise it on the "
            f"brokers or lower transaction_timeout"
        )
    retention = settings.offsets_retention_minutes
    if retention is None:
        lines.append(
            f"offsets.retention.minutes is not reported by the brokers: a pipeline that "
            f"crashed and stays down longer than it loses its batch markers and stops at "
            f"start; make sure it is at least {SAFE_RETENTION_MINUTES} (7 days) and longer "
            f"than an outage may last"
        )
    elif retention < SAFE_RETENTION_MINUTES:
        lines.append(
            f"offsets.retention.minutes is {retention}: a pipeline that crashed and stays "
            f"down longer than {retention} minutes loses its batch markers and stops at "
            f"start; raise it to at least {SAFE_RETENTION_MINUTES} (7 days) and longer than "
            f"an outage may last"
        )
    return lines
