"""Where ``daemon reset --to`` starts each input partition: earliest, latest, or a time.

- ``earliest``: the partition's first offset still in the log (its log start, as Fetch
  responses give it; some brokers' ListOffsets put it past the first records, see
  :func:`daemon.kafka.clients.log_starts`).
- ``latest``: its end, as a ``read_committed`` reader finds it: the high watermark of a Fetch
  response, read by fetching from where ListOffsets puts the end (some brokers' ListOffsets
  under-report it; see ``daemon.source.planning``).
- a time (epoch milliseconds, or ISO 8601 such as ``2026-11-20T09:00:00Z``; UTC when it names
  no zone): the first record whose Kafka timestamp is at or after it, as Kafka's
  offsets-for-times lookup and Kafka Streams' reset tool define it; the end when no record
  is that late. The broker's lookup is asked first and its answer checked against the
  records on both sides of it; where it does not hold (a broker whose lookup is unreliable),
  the partition is read from its start to find the record.

Positions are resolved once, when the reset runs, and printed: a later start does not move
them (a ``latest`` reset does not skip records that arrive after it).
"""

from __future__ import annotations

import datetime
from typing import Any, Literal

from confluent_kafka import TopicPartition

from daemon.errors import ConfigError
from daemon.kafka import connect
from daemon.kafka.clients import log_starts, read_partition
from daemon.model.wire import partition_name

Target = Literal["earliest", "latest"] | int
"""Where to start: the earliest offsets, the latest, or the first record at or after a time
(epoch milliseconds)."""

_READER = {
    "enable.auto.commit": False,
    "isolation.level": "read_committed",
}


def parse_target(text: str) -> Target:
    """``earliest``, ``latest``, epoch milliseconds or an ISO 8601 time.

    Raises:
        ConfigError: none of these.
    """
    word = text.strip().lower()
    if word in ("earliest", "latest"):
        return "earliest" if word == "earliest" else "latest"
    if word.isdigit():
        return int(word)
    try:
        moment = datetime.datetime.fromisoformat(text.strip())
    except ValueError:
        raise ConfigError(
            f"--to {text!r}: give earliest, latest, epoch milliseconds or an ISO 8601 time "
            "such as 2026-11-20T09:00:00Z"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.UTC)
    return int(moment.timestamp() * 1000)


def positions(
    client_conf: dict[str, str], topics: list[str], target: Target, group: str
) -> dict[str, int]:
    """Where each partition of ``topics`` starts for ``target``: ``"topic/partition"`` -> offset.

    ``group``: the group id the reader names, never joined or committed to
    (:func:`daemon.kafka.names.reader_group`).
    """
    consumer = connect.consumer(client_conf, {**_READER, "group.id": group})
    found: dict[str, int] = {}
    try:
        metadata = consumer.list_topics(timeout=10)
        partitions: list[tuple[str, int]] = []
        for topic in topics:
            described = metadata.topics.get(topic)
            if described is None or described.error is not None:
                raise ConfigError(f"topic {topic!r} does not exist; create it or fix `topic`")
            partitions.extend((topic, partition) for partition in sorted(described.partitions))
        starts = log_starts({**client_conf, **_READER, "group.id": group}, partitions)
        for topic, partition in partitions:
            name = partition_name(topic, partition)
            tp = TopicPartition(topic, partition)
            found[name] = _position(consumer, tp, target, starts[name])
    finally:
        consumer.close()
    return found


def _position(consumer: Any, tp: Any, target: Target, low: int) -> int:
    """Where ``tp`` starts for ``target``; ``low`` is where its log starts."""
    if target == "earliest":
        return low
    end = _end(consumer, tp)
    if target == "latest":
        return end
    answer = _broker_lookup(consumer, tp, target, end)
    if answer is not None and _holds(consumer, tp, target, answer, low, end):
        return answer
    return _scan(consumer, tp, target, low, end)


def _end(consumer: Any, tp: Any) -> int:
    """The partition's end, past its last committed record (see the module docstring)."""
    _, listed = consumer.get_watermark_offsets(tp, timeout=10)
    start = TopicPartition(tp.topic, tp.partition, max(listed - 1, 0))
    position = start.offset
    for records in read_partition(consumer, start):
        position = (records[-1].offset() or 0) + 1
    reached = consumer.position([TopicPartition(tp.topic, tp.partition)])[0].offset
    return max(position, reached, listed, 0)


def _broker_lookup(consumer: Any, tp: Any, at: int, end: int) -> int | None:

    (answer,) = consumer.offsets_for_times([TopicPartition(tp.topic, tp.partition, at)], 10)
    if answer.error is not None:
        return None
    return end if answer.offset < 0 else answer.offset


def _first_from(consumer: Any, tp: Any, offset: int, end: int) -> Any:
    """The first record delivered at or after ``offset`` (None: none before ``end``)."""
    for records in read_partition(consumer, TopicPartition(tp.topic, tp.partition, offset), end):
        return records[0]
    return None


def _holds(consumer: Any, tp: Any, at: int, answer: int, low: int, end: int) -> bool:
    """Whether ``answer`` is the first record at or after ``at``, by the records around it."""
    if answer < end:
        first = _first_from(consumer, tp, answer, end)
        if first is None or first.timestamp()[1] < at:
            return False
    if answer > low:
        before = _first_from(consumer, tp, answer - 1, end)
        if before is not None and (before.offset() or 0) < answer and before.timestamp()[1] >= at:
            return False
    return True


def _scan(consumer: Any, tp: Any, at: int, low: int, end: int) -> int:

    for records in read_partition(consumer, TopicPartition(tp.topic, tp.partition, low), end):
        for record in records:
            if record.timestamp()[1] >= at:
                return int(record.offset() or 0)
    return end
