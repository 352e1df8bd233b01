"""A Spark streaming sink that writes each micro-batch to Kafka exactly once.

How it works: every write task (one per Spark partition of the joiner's output) owns the
transactional id ``enrichd.<pipeline>.<partition>``. It writes its share of micro-batch N in
one Kafka transaction, and inside that same transaction commits the "offset" N + 1 for the
consumer group ``enrichd.<pipeline>.sink.<query id>.<partition>``, where the query id is the one
Spark keeps in the checkpoint (a new checkpoint, a new id: its batches start again at 0 and
must not be taken for the old ones). The data and that marker become visible
together or not at all. When Spark runs micro-batch N again after a crash, the task first
initialises its transactional id, which aborts any transaction a dead predecessor left open
and fences it off, then reads the marker: if N was already committed it writes nothing. Spark
replays a micro-batch with the same offsets and the same state, so the skipped write is the
one that had landed. A reused Python worker keeps its producer for the next batch of the same
id rather than initialising a new one; if another producer initialised the id meanwhile, the
kept one learns it is fenced when it adds the marker, before it writes anything, and the task
starts over as above. ``delivery = "at_least_once"`` uses the idempotent producer instead:
no transactions, and a replayed micro-batch may be written twice.
"""

from __future__ import annotations

import base64
import json
import pickle  # noqa: S403 - only our own driver-made spec travels through it
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceStreamArrowWriter,
    DataSourceStreamWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

from daemon.config import Delivery
from daemon.kafka.clients import Deliveries, produce
from daemon.kafka.records import SINK_COLUMNS
from daemon.metrics_relay import JOINER_COUNTS_TOPIC, send_batch_counts
from daemon.worker_gc import freeze_loaded

_PRODUCERS: dict[str, Any] = {}  # idempotent producers, kept by a reused Python worker
_TRANSACTIONAL: dict[str, Any] = {}
"""Transactional producers by transactional id, kept by a reused Python worker between the
batches it writes (see ``KafkaStreamWriter._begin``): initialising one costs 50-500 ms."""
_MARKER_READERS: dict[str, Any] = {}  # consumers that read a sink group's batch marker
_GROUPS: dict[str, Any] = {}  # consumer-group metadata of the batch markers
_DELIVERY_REPORTS = {"delivery.report.only.error": True}
"""The sink only needs to hear of failed deliveries; a report per record is a Python
callback per record."""


@dataclass(frozen=True)
class SinkSpec:
    """Where and how to write; pickled into the data source's options."""

    pipeline: str
    client_conf: dict[str, str]
    delivery: Delivery
    marker_topic: str
    """The topic whose partition 0 carries the committed-batch markers (the output topic)."""
    metrics_address: str | None = None
    """The daemon's metrics socket (``daemon.metrics_relay``), or None: counts go nowhere."""

    def encode(self) -> str:
        """The spec as an option string."""
        return base64.b64encode(pickle.dumps(self)).decode("ascii")

    @staticmethod
    def decode(text: str) -> SinkSpec:
        """The spec back from :meth:`encode`."""
        return pickle.loads(base64.b64decode(text))  # type: ignore[no-any-return]  # noqa: S301


@dataclass
class Written(WriterCommitMessage):
    """What one task wrote: records per topic, and whether it skipped a committed replay."""

    partition: int
    batch_id: int
    records: dict[str, int]
    skipped: bool = False
    dead_letters: dict[str, int] = field(default_factory=dict)
    """Dead letters written, by reason (their ``enrichd.error.class`` header)."""
    joiner_counts: dict[str, int] = field(default_factory=dict)
    """What the joiner counted with ``ctx.count`` (matched, unmatched, revisions, ...)."""


class KafkaSink(DataSource):
    """``df.writeStream.format("enrichd-kafka-sink").option("spec", SinkSpec(...).encode())``."""

    @classmethod
    def name(cls) -> str:
        """The format name."""
        return "enrichd-kafka-sink"

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        """The writer of every micro-batch."""
        return KafkaStreamWriter(SinkSpec.decode(self.options["spec"]))


class KafkaStreamWriter(DataSourceStreamArrowWriter):
    """Writes a task's rows in one transaction (see the module docstring)."""

    def __init__(self, spec: SinkSpec) -> None:
        self.spec = spec

    def write(self, iterator: Iterator[pa.RecordBatch]) -> Written:
        """Write one task's share of a micro-batch."""
        from pyspark import TaskContext

        freeze_loaded()

        context = TaskContext.get()
        partition = context.partitionId() if context else 0
        batch_id = int((context.getLocalProperty("streaming.sql.batchId") if context else 0) or 0)
        # Stable across restarts from one checkpoint; a new checkpoint gets a new one.
        query_id = (context.getLocalProperty("sql.streaming.queryId") if context else None) or ""
        if self.spec.delivery == "at_least_once":
            producer = self._idempotent_producer()
            kinds: dict[str, int] = {}
            joiner: dict[str, int] = {}
            counts = _produce(producer, iterator, kinds, joiner)
            producer.flush()
            return Written(partition, batch_id, counts, dead_letters=kinds, joiner_counts=joiner)
        return self._write_transaction(partition, batch_id, query_id, iterator)

    def _write_transaction(
        self, partition: int, batch_id: int, query_id: str, iterator: Iterator[pa.RecordBatch]
    ) -> Written:
        from confluent_kafka import KafkaException, TopicPartition

        txn_id = f"enrichd.{self.spec.pipeline}.{partition}"
        group = f"enrichd.{self.spec.pipeline}.sink.{query_id}.{partition}"
        marker = TopicPartition(self.spec.marker_topic, 0)
        producer = self._begin(txn_id, group, marker, batch_id)
        if producer is None:
            for _ in iterator:
                pass
            return Written(partition, batch_id, {}, skipped=True)
        try:
            kinds: dict[str, int] = {}
            joiner: dict[str, int] = {}
            counts = _produce(producer, iterator, kinds, joiner)
            producer.commit_transaction()
        except BaseException:
            try:
                producer.abort_transaction(10)
            except KafkaException:
                pass  # nothing open, or already fenced: the next init aborts it anyway
            raise
        _TRANSACTIONAL[txn_id] = producer
        return Written(partition, batch_id, counts, dead_letters=kinds, joiner_counts=joiner)

    def _begin(self, txn_id: str, group: str, marker: Any, batch_id: int) -> Any:
        """A producer in a transaction that holds batch ``batch_id``'s marker; None if committed.

        A producer this worker kept from an earlier batch still owns ``txn_id`` unless another
        producer initialised the id since; sending the marker is its first call to the broker
        in the transaction and fails if so (fenced). Otherwise, and in a worker without one, a
        new producer initialises the id, which fences every other producer of it and aborts
        any transaction one left open, and only then is the marker read: a task attempt still
        running elsewhere can no longer commit the batch behind it.
        """
        from confluent_kafka import KafkaException

        kept = _TRANSACTIONAL.pop(txn_id, None)
        if kept is not None:
            if self._last_committed(group, marker) >= batch_id:
                _TRANSACTIONAL[txn_id] = kept
                return None
            try:
                return self._open(kept, group, marker, batch_id)
            except KafkaException:
                pass  # fenced (it is dropped): start over as a new producer
        producer = self._transactional_producer(txn_id)
        if self._last_committed(group, marker) >= batch_id:
            _TRANSACTIONAL[txn_id] = producer
            return None
        return self._open(producer, group, marker, batch_id)

    def _open(self, producer: Any, group: str, marker: Any, batch_id: int) -> Any:
        producer.begin_transaction()
        marker.offset = batch_id + 1
        producer.send_offsets_to_transaction([marker], self._group_metadata(group))
        return producer

    def _transactional_producer(self, txn_id: str) -> Any:
        from confluent_kafka import Producer

        producer = Producer(
            {
                **self.spec.client_conf,
                "transactional.id": txn_id,
                "enable.idempotence": True,
                "linger.ms": 5,
                "partitioner": "murmur2_random",  # the Java client's, so keys land alike
                **_DELIVERY_REPORTS,
            }
        )
        producer.init_transactions(30)
        return producer

    def _idempotent_producer(self) -> Any:
        from confluent_kafka import Producer

        key = f"idempotent.{self.spec.pipeline}"
        producer = _PRODUCERS.get(key)
        if producer is None:
            producer = Producer(
                {
                    **self.spec.client_conf,
                    "enable.idempotence": True,
                    "linger.ms": 5,
                    "partitioner": "murmur2_random",
                    **_DELIVERY_REPORTS,
                }
            )
            _PRODUCERS[key] = producer
        return producer

    def _last_committed(self, group: str, marker: Any) -> int:
        """The last batch whose transaction committed, by the marker; -1 for none.

        Read uncommitted: a read-committed offset fetch waits for a transaction that holds
        the group's offsets, which for a kept producer may be one a dead task left open.
        """
        reader = _MARKER_READERS.get(group)
        if reader is None:
            from confluent_kafka import Consumer

            reader = _MARKER_READERS[group] = Consumer(
                {**self.spec.client_conf, "group.id": group, "isolation.level": "read_uncommitted"}
            )
        committed = reader.committed([marker], timeout=30)[0].offset
        return committed - 1 if committed >= 0 else -1

    def _group_metadata(self, group: str) -> Any:
        metadata = _GROUPS.get(group)
        if metadata is None:
            from confluent_kafka import Consumer

            consumer = Consumer({**self.spec.client_conf, "group.id": group})
            try:
                metadata = _GROUPS[group] = consumer.consumer_group_metadata()
            finally:
                consumer.close()
        return metadata

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        """Report what the batch wrote to the daemon's metrics (the tasks committed already).

        Spark calls this once per micro-batch after every task succeeded, on the driver host,
        so the counts are of committed output only (a skipped replay adds nothing).
        """
        if self.spec.metrics_address is None:
            return
        try:
            records: dict[str, int] = {}
            dead_letters: dict[str, int] = {}
            joiner: dict[str, int] = {}
            for message in messages:
                if isinstance(message, Written):
                    _add(records, message.records)
                    _add(dead_letters, message.dead_letters)
                    _add(joiner, getattr(message, "joiner_counts", {}))
            send_batch_counts(
                self.spec.metrics_address,
                self.spec.pipeline,
                batchId,
                records,
                dead_letters,
                joiner,
            )
        except Exception:  # noqa: S110 - metrics must never fail a committed batch
            pass

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        """Nothing to do: an uncommitted transaction is aborted when its id is next used."""


def _produce(
    producer: Any,
    batches: Iterator[pa.RecordBatch],
    kinds: dict[str, int] | None = None,
    joiner_counts: dict[str, int] | None = None,
) -> dict[str, int]:
    """Produce every row; return records per topic; count dead letters by reason in ``kinds``.

    A row addressed to :data:`JOINER_COUNTS_TOPIC` is not a record: it carries the joiner's
    ``ctx.count`` totals (JSON) and is added to ``joiner_counts`` instead of produced.
    """
    counts: dict[str, int] = {}
    deliveries = Deliveries()  # hears of failures only: see _DELIVERY_REPORTS
    for batch in batches:
        # A whole column at a time: converting row by row costs several times more.
        rows = zip(*(batch.column(name).to_pylist() for name in SINK_COLUMNS), strict=True)
        for (
            topic,
            key,
            value,
            timestamp,
            source_topic,
            source_partition,
            source_offset,
            error_class,
            error_message,
        ) in rows:
            if topic == JOINER_COUNTS_TOPIC:
                if joiner_counts is not None and value:
                    _add(joiner_counts, json.loads(value))
                continue
            produce(
                producer,
                topic,
                value=value,
                key=key,
                headers=headers_of(
                    source_topic, source_partition, source_offset, error_class, error_message
                ),
                on_delivery=deliveries,
                # librdkafka reads 0 as "now": a missing timestamp is the write time.
                timestamp=timestamp or 0,
            )
            counts[topic] = counts.get(topic, 0) + 1
            if kinds is not None and error_class is not None:
                kinds[error_class] = kinds.get(error_class, 0) + 1
        producer.poll(0)
    producer.flush()
    if deliveries.failures:
        failures = deliveries.failures
        raise RuntimeError(f"{len(failures)} records were not delivered: {failures[0]}")
    return counts


def headers_of(
    source_topic: str | None,
    source_partition: int | None,
    source_offset: int | None,
    error_class: str | None,
    error_message: str | None,
) -> list[tuple[str, bytes]]:
    """The Kafka headers of an output row: where it came from and, for a dead letter, why."""
    headers = []
    if source_topic is not None:
        headers = [
            ("enrichd.source.topic", source_topic.encode("utf-8")),
            ("enrichd.source.partition", str(source_partition).encode("utf-8")),
            ("enrichd.source.offset", str(source_offset).encode("utf-8")),
        ]
    if error_class is not None:
        headers.append(("enrichd.error.class", error_class.encode("utf-8")))
        if error_message is not None:
            headers.append(("enrichd.error.message", error_message.encode("utf-8")))
    return headers


def _add(totals: dict[str, int], counts: dict[str, int]) -> None:
    for name, n in counts.items():
        totals[name] = totals.get(name, 0) + int(n)
