"""Pieces every Kafka client of enrichd shares: producing, delivery reports, reading to the end.

And where a partition's log starts (:func:`log_starts`).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from typing import Any

from daemon.errors import KafkaReadError
from daemon.kafka import connect
from daemon.model.wire import partition_name

RANGE_FETCH = {
    "fetch.wait.max.ms": 10,
    "queued.max.messages.kbytes": 4096,
    "fetch.queue.backoff.ms": 10,
}
"""Fetch settings of consumers that read a known range. A fetch may wait on the broker for
``fetch.wait.max.ms`` (librdkafka: 500 ms), and after an ``assign()`` the first records came
only after that wait; and the default prefetch of up to 64 MB past the range is broker work
for nothing. But a fetcher whose queue reached that bound (or 100,000 messages) waits
``fetch.queue.backoff.ms`` (1 s by default) before it fetches again, however soon the queue
is drained, so reading a large range took mostly waiting; a 10 ms back-off ends that."""


class OffsetNotAvailableError(Exception):
    """A read's partition no longer has the offset it needs.

    A consumer with ``auto.offset.reset = error`` hears so from the broker instead of jumping
    to another offset.
    """

    def __init__(self, topic: str, partition: int, offset: int, reason: str) -> None:
        super().__init__(f"{topic}/{partition}: offset {offset} is not available: {reason}")
        self.topic = topic
        self.partition = partition
        self.offset = offset


class Deliveries:
    """A producer's ``on_delivery`` callback that keeps each partition's end and the failures.

    ``ends`` maps ``"topic/partition"`` (the source's offset names) to the last delivered
    offset + 1.
    """

    def __init__(self) -> None:
        self.ends: dict[str, int] = {}
        self.failures: list[str] = []

    def __call__(self, err: Any, msg: Any) -> None:
        """Record one delivery report."""
        if err is not None:
            self.failures.append(str(err))
            return
        name = partition_name(msg.topic(), msg.partition())
        self.ends[name] = max(self.ends.get(name, 0), (msg.offset() or 0) + 1)


PARTITION_UNASSIGNED = -1
"""librdkafka's partition for "let the partitioner choose" (the client's default)."""


def produce(
    producer: Any,
    topic: str,
    value: bytes | None = None,
    key: bytes | None = None,
    *,
    headers: Any = None,
    on_delivery: Any = None,
    timestamp: int = 0,
    partition: int = PARTITION_UNASSIGNED,
) -> None:
    """Produce one record, waiting for deliveries while the client's local queue is full.

    ``partition``: where it goes (by default, where the key's hash puts it).

    The arguments are named, not passed on as ``**record``: the task output calls this once
    per output record, and packing and unpacking a dict of them cost more than the call.
    """
    while True:
        try:
            producer.produce(
                topic,
                value=value,
                key=key,
                headers=headers,
                on_delivery=on_delivery,
                timestamp=timestamp,
                partition=partition,
            )
            return
        except BufferError:
            producer.poll(0.05)


_CONSUME_WAIT_S = 0.02
"""How long one ``consume()`` of :func:`read_partition` may wait for the records it asks for.
A range that ends in a transaction marker (a transactional upstream's commit) never gets all
of them, so each read of such a range waits this long at its end, per partition and
micro-batch: keep it short."""


def read_partition(
    consumer: Any,
    tp: Any,
    stop: int | None = None,
    *,
    chunk: int = 10_000,
    stall_s: float = 15.0,
) -> Iterator[list[Any]]:
    """Yield one partition's records in chunks, from ``tp.offset`` up to ``stop`` (exclusive).

    With ``stop`` None it reads to the log end, taken from the high watermark of the latest
    Fetch response: ListOffsets under-reports it on some brokers. Transaction markers take
    offsets but are never delivered, so progress is the consumer's position, not the last
    record seen.

    The client's errors on the way are sorted (:func:`_is_transient`): one that waiting
    mends (a broker restarting, a leader moving, a connection lost) is waited out, as Kafka's
    clients do, up to ``stall_s``; any other (the principal may not read the topic, a record
    batch whose CRC fails, a client failed for good) ends the read at once with one line,
    where it stalled for ``stall_s`` before. None is passed over. (Measured with librdkafka
    2.16: a batch corrupted on its way gives ``_BAD_MSG``, again at each fetch, with the
    position left at the batch; an authorization error in a Fetch answer gives
    ``TOPIC_AUTHORIZATION_FAILED`` once, then nothing.)

    Raises:
        TimeoutError: the position did not move for ``stall_s`` seconds short of the end.
        OffsetNotAvailableError: the broker no longer has the offset to read, and the
            consumer's ``auto.offset.reset`` is ``error``.
        KafkaReadError: an error that waiting does not mend.
    """
    consumer.assign([tp])
    position = max(tp.offset, 0)
    moved_at = time.monotonic()
    last_error = None  # what the client reported last, for a stall's message
    while True:
        end = stop if stop is not None else consumer.get_watermark_offsets(tp, cached=True)[1]
        if 0 <= end <= position:
            return
        # Ask for no more than the range holds: consume() waits out its timeout for the rest.
        wanted = chunk if stop is None else max(min(chunk, stop - position), 1)
        messages = consumer.consume(num_messages=wanted, timeout=_CONSUME_WAIT_S)
        records = [
            m for m in messages if m.error() is None and (stop is None or (m.offset() or 0) < stop)
        ]
        if len(records) < len(messages):  # looked for only then: the source reads through here
            for error in (m.error() for m in messages if m.error() is not None):
                last_error = error
                raise_unless_transient(error, tp, position)
        reached = max(
            [position, consumer.position([tp])[0].offset]
            + [(m.offset() or 0) + 1 for m in records[-1:]]
        )
        if reached > position:
            position, moved_at = reached, time.monotonic()
        elif time.monotonic() - moved_at > stall_s:
            # The end and the client's last error say whether an open transaction (a
            # read_committed reader waits at its last stable offset) or the client stalled.
            raise TimeoutError(
                f"{tp.topic}/{tp.partition}: no progress past offset {position} in {stall_s:g} "
                f"s, short of offset {end}; last client error: "
                f"{'none' if last_error is None else last_error.str()}"
            )
        if records:
            yield records


def log_starts(
    conf: dict[str, Any], partitions: Iterable[tuple[str, int]], wait_s: float = 10.0
) -> dict[str, int]:
    """Where each partition's log starts (``"topic/partition"`` -> offset), by Fetch responses.

    Every Fetch response carries the partition's log start offset, and that is right on every
    broker. ListOffsets(EARLIEST) is not: Tansu 0.6, the test broker, answers it with the
    base offset of the record batch it *stored* first. It gives each batch its offsets
    before it stores the batch, so when two producers write a partition at once (the two
    tasks of a micro-batch writing its output), the batch at offset 0 can be stored after a
    later one, and ListOffsets then says the log starts at that later batch: a reader that
    started there skipped the records before it (docs/contributing.md).

    A consumer of its own (``conf``: the caller's consumer settings) fetches each partition
    from offset 0: any Fetch response tells the log start. Where the log starts later, the
    broker answers that 0 is out of range and the client resets the position, after which
    a Fetch answers all the same. (Not from the client's logical beginning: it looks that up
    with ListOffsets first, which took the client half a second here.) A partition that no
    Fetch answered within ``wait_s`` is asked by ListOffsets after all.
    """
    # Late: confluent_kafka loads with the first client (daemon.model.constants says why).
    from confluent_kafka import TopicPartition

    wanted = [TopicPartition(topic, partition, 0) for topic, partition in partitions]
    starts: dict[str, int] = {}
    if not wanted:
        return starts
    consumer = connect.consumer(conf, {**RANGE_FETCH, "auto.offset.reset": "earliest"})
    try:
        consumer.assign(wanted)
        deadline = time.monotonic() + wait_s
        while True:
            for tp in wanted:
                low, _ = consumer.get_watermark_offsets(tp, cached=True)
                if low >= 0:
                    starts.setdefault(partition_name(tp.topic, tp.partition), low)
            if len(starts) == len(wanted) or time.monotonic() > deadline:
                break
            consumer.consume(num_messages=1, timeout=_CONSUME_WAIT_S)  # serves the fetches
        for tp in wanted:
            name = partition_name(tp.topic, tp.partition)
            if name not in starts:
                low, _ = consumer.get_watermark_offsets(tp, timeout=10)
                starts[name] = max(low, 0)
    finally:
        consumer.close()
    return {name: starts[name] for name in (partition_name(t.topic, t.partition) for t in wanted)}


def raise_unless_transient(error: Any, tp: Any, position: int) -> None:
    """Raise what a consumer's error on ``tp`` at ``position`` means, unless waiting mends it.

    Raises:
        OffsetNotAvailableError: the broker no longer has the offset, and the consumer's
            ``auto.offset.reset`` is ``error``.
        KafkaReadError: an error that waiting does not mend (:func:`read_partition`).
    """
    if _is_offset_reset(error):
        raise OffsetNotAvailableError(tp.topic, tp.partition, position, error.str())
    if not _is_transient(error):
        raise KafkaReadError(_read_failure(tp, position, error))


def _is_offset_reset(error: Any) -> bool:
    """Whether a consumer's error says its position is not on the broker, with no reset to do."""
    # Late: confluent_kafka loads with the first client (daemon.model.constants says why).
    from confluent_kafka import KafkaError

    code = getattr(error, "code", None)
    return callable(code) and code() in (
        KafkaError._AUTO_OFFSET_RESET,
        KafkaError.OFFSET_OUT_OF_RANGE,
    )


def _is_transient(error: Any) -> bool:
    """Whether a consumer's error is one that waiting mends (see :func:`read_partition`).

    Kafka's own retriable errors, and the client's reports of connections and brokers; also
    an unknown topic or partition, which Kafka's clients retry (a topic just created may be
    unknown to a broker for a moment; one deleted stalls the read, which then says so).
    """
    # Late: confluent_kafka loads with the first client (daemon.model.constants says why).
    from confluent_kafka import KafkaError

    if error.fatal():
        return False
    code = error.code()
    transient = {
        KafkaError._TRANSPORT,
        KafkaError._ALL_BROKERS_DOWN,
        KafkaError._RESOLVE,
        KafkaError._TIMED_OUT,
        KafkaError._WAIT_COORD,
        KafkaError._NODE_UPDATE,
        KafkaError._PARTITION_EOF,
        KafkaError._UNKNOWN_PARTITION,
        KafkaError._UNKNOWN_TOPIC,
        KafkaError.UNKNOWN_TOPIC_OR_PART,
        KafkaError.LEADER_NOT_AVAILABLE,
        KafkaError.NOT_LEADER_FOR_PARTITION,
        KafkaError.REQUEST_TIMED_OUT,
        KafkaError.BROKER_NOT_AVAILABLE,
        KafkaError.REPLICA_NOT_AVAILABLE,
        KafkaError.NETWORK_EXCEPTION,
        KafkaError.KAFKA_STORAGE_ERROR,
        KafkaError.FENCED_LEADER_EPOCH,
        KafkaError.UNKNOWN_LEADER_EPOCH,
        KafkaError.OFFSET_NOT_AVAILABLE,
    }
    return code in transient or bool(error.retriable())


_AUTHORIZATION = ("TOPIC_AUTHORIZATION_FAILED", "CLUSTER_AUTHORIZATION_FAILED", "_AUTHENTICATION")
_CORRUPT = ("_BAD_MSG", "CORRUPT_MESSAGE", "_BAD_COMPRESSION", "UNSUPPORTED_COMPRESSION_TYPE")


def _read_failure(tp: Any, position: int, error: Any) -> str:
    """The one line of a read that an error ended: the partition, the offset, what to do."""
    where = f"cannot read topic {tp.topic!r} partition {tp.partition} at offset {position}"
    said = f"{error.name()}: {error.str()}"
    name = error.name()
    if name in _AUTHORIZATION or name.endswith("AUTHORIZATION_FAILED"):
        fix = (
            "allow the principal Read and Describe on the topic (docs/connecting.md, what a "
            "pipeline may do on the cluster)"
        )
    elif name in _CORRUPT:
        fix = (
            "its record batch is corrupt, on the broker or on the way; if it fails again, look "
            "at the partition's log (kafka-dump-log) and move the pipeline past it with "
            "`daemon reset --to`"
        )
    else:
        fix = "the Kafka client cannot go on; see its error"
    return f"{where} ({said}); {fix}"
