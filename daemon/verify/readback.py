"""Reading back what a pipeline wrote: as a ``read_committed`` consumer, and as raw batches.

The consumer is the one every reader of enrichd's output would use, with the file's client
settings. The raw batches come from each partition's leader (:mod:`daemon.verify.protocol`),
read uncommitted, markers included, and say what became of every offset
(:mod:`daemon.verify.batches`). The two are joined by offset.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from daemon.formats.avro.codec import AvroCodec
from daemon.kafka import connect
from daemon.kafka.clients import read_partition
from daemon.verify.batches import PartitionLog, parse_batches
from daemon.verify.check import Received
from daemon.verify.protocol import BrokerConnection, ProtocolError, connection_settings, fetch

_READER = {
    "group.id": "enrichd-verify",  # required by the client; never joined or committed
    "enable.auto.commit": False,
    "isolation.level": "read_committed",
    "fetch.wait.max.ms": 10,
}
UNDECODABLE_OUTPUT = "undecodable output"
"""The key of the value that stands for output bytes the output's schema does not decode."""
_RAW_FETCH_BYTES = 4 << 20
_STALL_S = 30.0
"""How long a ``read_committed`` read may stand still short of the end: an open transaction
holds it at the last stable offset until the transaction ends (or times out, 60 s by
default), which is then reported rather than waited out."""


@dataclass
class TopicRead:
    """A topic as read back: its records, where reading stopped short, and its raw logs."""

    records: list[Received] = field(default_factory=list)
    held: list[str] = field(default_factory=list)
    """Partitions where the ``read_committed`` read stopped short of the end, and why."""
    logs: dict[int, PartitionLog] = field(default_factory=dict)


def read_committed(conf: dict[str, str], topic: str, codec: AvroCodec | None) -> TopicRead:
    """Every record a ``read_committed`` reader gets from ``topic``, partition by partition.

    Values are decoded with ``codec`` (None: kept as bytes, as for dead letters).
    """
    # Late: confluent_kafka loads with the first client (daemon.model.constants says why).
    from confluent_kafka import TopicPartition

    read = TopicRead()
    consumer = connect.consumer(conf, _READER)
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        for partition in sorted(partitions):
            try:
                for chunk in read_partition(
                    consumer, TopicPartition(topic, partition, 0), stall_s=_STALL_S
                ):
                    read.records.extend(_received(message, codec) for message in chunk)
            except TimeoutError as exc:
                read.held.append(str(exc))
    finally:
        consumer.close()
    return read


def decoded(codec: AvroCodec | None, value: bytes | None) -> Any:
    """A value as the check compares it: decoded by ``codec`` (None: as bytes).

    Bytes the codec cannot decode are no record enrichd wrote: they become a value no answer
    holds, so the check counts them as unexpected rather than verify stopping on them.
    """
    if codec is None or value is None:
        return value
    try:
        return codec.decode(value)
    except Exception as exc:  # any failure: reported as an unexpected record
        return {UNDECODABLE_OUTPUT: f"{type(exc).__name__}: {exc}"}


def _received(message: Any, codec: AvroCodec | None) -> Received:
    key, value = message.key(), decoded(codec, message.value())
    return Received(
        topic=message.topic(),
        partition=message.partition(),
        offset=message.offset(),
        key=None if key is None else key.decode("utf-8", "replace"),
        value=value,
        timestamp=message.timestamp()[1],
        headers={
            name: (raw or b"").decode("utf-8", "replace") for name, raw in message.headers() or []
        },
    )


class RawLogs:
    """Reads partitions' raw batches from their leaders, one connection per broker."""

    def __init__(self, conf: dict[str, str]) -> None:
        self.conf = conf
        self.settings = connection_settings(conf)
        self._connections: dict[int, BrokerConnection] = {}

    @property
    def unavailable(self) -> str | None:
        """Why raw batches cannot be read with these settings, or None."""
        return self.settings if isinstance(self.settings, str) else None

    def read(self, topic: str) -> dict[int, PartitionLog]:
        """Each partition's log, read from offset 0 to its high watermark.

        Raises:
            ProtocolError: a broker refused or answered what this reader does not know.
            OSError: a broker could not be reached.
        """
        consumer = connect.consumer(self.conf, _READER)
        try:
            metadata = consumer.list_topics(topic, timeout=10)
        finally:
            consumer.close()
        logs = {}
        for number, partition in sorted(metadata.topics[topic].partitions.items()):
            broker = metadata.brokers[partition.leader]
            connection = self._connection(partition.leader, broker.host, broker.port)
            logs[number] = PartitionLog.of(self._batches(connection, topic, number))
        return logs

    def _connection(self, broker_id: int, host: str, port: int) -> BrokerConnection:
        connection = self._connections.get(broker_id)
        if connection is None:
            if isinstance(self.settings, str):
                raise ProtocolError(self.settings)
            connection = self._connections[broker_id] = BrokerConnection(host, port, self.settings)
        return connection

    @staticmethod
    def _batches(connection: BrokerConnection, topic: str, partition: int) -> list[Any]:
        batches: list[Any] = []
        offset = 0
        while True:
            answer = fetch(connection, topic, partition, offset, _RAW_FETCH_BYTES)
            if answer.error:
                raise ProtocolError(f"Fetch of {topic}/{partition} answered error {answer.error}")
            found = parse_batches(answer.records)
            if not found:
                if offset >= answer.high_watermark:
                    return batches
                raise ProtocolError(
                    f"{topic}/{partition}: no whole record batch at offset {offset} "
                    f"(high watermark {answer.high_watermark})"
                )
            batches.extend(batch for batch in found if batch.last_offset >= offset)
            offset = found[-1].last_offset + 1
            if offset >= answer.high_watermark:
                return batches

    def close(self) -> None:
        """Close every connection."""
        for connection in self._connections.values():
            connection.close()
        self._connections.clear()


def with_status(read: TopicRead) -> list[Received]:
    """The records of ``read`` with what their partition's raw log says of each."""
    if not read.logs:
        return read.records
    return [
        replace(record, status=read.logs[record.partition].status(record.offset))
        if record.partition in read.logs
        else record
        for record in read.records
    ]
