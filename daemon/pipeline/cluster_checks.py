"""What a start refuses of the cluster's settings, and the markers topics it makes.

Asked once when a pipeline is planned (:mod:`daemon.kafka.topic_settings`): a setting that
would make every micro-batch fail, or let a batch be written twice, stops the start with one
line naming the setting and its fix. A setting the cluster does not answer for is not checked.
"""

from __future__ import annotations

from typing import Any

from daemon.errors import ConfigError
from daemon.kafka.admin import create_topics
from daemon.kafka.topic_settings import ClusterSettings, TopicSettings

MARKERS_RETENTION_MS = 14 * 86_400_000
"""The least ``retention.ms`` of a markers topic enrichd creates: twice the brokers' default
``offsets.retention.minutes``, so that a marker record outlives the group offset that points
at it (:mod:`daemon.sink.markers`)."""
DEFAULT_OFFSETS_RETENTION_MINUTES = 7 * 24 * 60
"""Kafka's ``offsets.retention.minutes`` (since 2.0), for a cluster that does not say its own."""
_MARKERS_TOPIC = (
    "a markers topic needs one partition, cleanup.policy=delete and a retention.ms longer "
    'than the brokers\' offsets.retention.minutes (docs/operations.md, "The markers topic")'
)


def check_cluster(file: Any, pipe: Any, settings: ClusterSettings) -> None:
    """Refuse what the cluster's settings would make fail at every micro-batch.

    Raises:
        ConfigError: the transaction timeout is above the brokers' most, or the dead-letter
            topic is compacted (a dead letter without a key would be refused).
    """
    most = settings.transaction_max_timeout_ms
    wanted = file.kafka.transaction_timeout
    if pipe.delivery == "exactly_once" and most is not None and wanted > most:
        raise ConfigError(
            f"pipeline {pipe.name!r}: [kafka] transaction_timeout is {wanted} ms, above the "
            f"brokers' transaction.max.timeout.ms of {most} ms, so the brokers would refuse "
            "every task's producer; lower transaction_timeout, or raise "
            "transaction.max.timeout.ms on the brokers"
        )
    dead_letters = settings.topics.get(pipe.dead_letters)
    if dead_letters is not None and dead_letters.compacted:
        raise ConfigError(
            f"pipeline {pipe.name!r}: the dead-letter topic {pipe.dead_letters!r} is compacted "
            "(cleanup.policy=compact), which refuses every dead letter without a key (an "
            "undecodable record without one, say); set its cleanup.policy to delete, or name "
            "another dead_letter_topic"
        )


def create_markers_topics(
    file: Any, conf: dict[str, str], topics: list[str], settings: ClusterSettings
) -> None:
    """Check the markers topics that exist (``settings`` lists them) and create the others.

    One partition, deleted by time, never compacted (:mod:`daemon.sink.markers`), kept at
    least twice as long as the brokers keep group offsets; replicated as the outputs are
    (``[kafka] replication_factor``).

    Raises:
        ConfigError: a markers topic that exists is not as :func:`markers_topic_problem`
            wants it, or one is missing and enrichd may not create it.
    """
    offsets_kept_ms = 60_000 * (
        settings.offsets_retention_minutes or DEFAULT_OFFSETS_RETENTION_MINUTES
    )
    for topic in topics:
        found = settings.topics.get(topic)
        if found is None or found.partitions is None:
            continue  # not there yet: made below, as it must be
        problem = markers_topic_problem(found.partitions, found, offsets_kept_ms)
        if problem is not None:
            raise ConfigError(f"the markers topic {topic!r} {problem}; {_MARKERS_TOPIC}")
    retention = max(MARKERS_RETENTION_MS, 2 * offsets_kept_ms)
    config = {"cleanup.policy": "delete", "retention.ms": str(retention)}
    replication, configs = file.kafka.replication_factor, dict.fromkeys(topics, config)
    try:
        create_topics(conf, dict.fromkeys(topics, 1), replication, configs=configs)
    except ConfigError as missing:
        raise ConfigError(f"{missing}; {_MARKERS_TOPIC}") from None


def markers_topic_problem(
    partitions: int | None, settings: TopicSettings | None, offsets_kept_ms: int
) -> str | None:
    """What makes a markers topic unsafe, in words; None: nothing known.

    More than one partition: markers are written to and read from partition 0 only, and a
    topic made with more may hold the markers of an earlier layout elsewhere. Compacted, or
    kept no longer than group offsets: a group's offset could outlive the marker record it
    points at, and the task's last batch could not be told.

    Example:
        >>> markers_topic_problem(3, None, 60_000)
        'has 3 partitions'
        >>> markers_topic_problem(1, TopicSettings(retention_ms=60_000), 60_000)
        'keeps records 60000 ms, no longer than the brokers keep group offsets (60000 ms)'
    """
    if partitions is not None and partitions != 1:
        return f"has {partitions} partitions"
    if settings is None:
        return None
    if settings.compacted:
        return "is compacted (cleanup.policy=compact)"
    kept = settings.retention_ms
    if kept is not None and 0 <= kept <= offsets_kept_ms:
        return (
            f"keeps records {kept} ms, no longer than the brokers keep group offsets "
            f"({offsets_kept_ms} ms)"
        )
    return None
