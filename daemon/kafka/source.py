"""A Spark streaming source over confluent-kafka: ``assign()``, offsets in Spark's checkpoint.

How it works: the driver-side reader plans each micro-batch as a range of offsets per
partition, ``{"topic/partition": offset}`` (and a :data:`CLOCK` for joiners that wake quiet
keys), which Spark stores in its checkpoint; a restart resumes from the last committed range,
and no consumer group is involved. The end of each partition comes from the high watermark
that the broker returns with every Fetch response (a ListOffsets request under-reports it on
some brokers), read from a probe consumer that follows the log end. The ranges are read on
executors with ``assign()`` and yielded as Arrow record batches, by as many Spark tasks as the
cluster has cores (``read_tasks``), each reading one or more Kafka partitions: a task costs
tens of milliseconds of Spark's own beside its reading, and on two cores four tasks (two
topics of two partitions) ran in two waves, so a small micro-batch spent twice as long in this
stage. Each record's join key and event time are read here, from the bytes where the schema
allows (:mod:`daemon.formats.avro.fields`; the joiner decodes the whole record later), else by a
decode; one that cannot be read or lacks either field is passed on with ``error`` set, for the
dead-letter topic, instead of failing the query.
"""

from __future__ import annotations

import base64
import bisect
import pickle  # noqa: S403 - only our own driver-made spec travels through it
import threading
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np
import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows
from pyspark.sql.types import StructType

from daemon.constants import DEFAULT_STATE_BUCKETS, END_OF_TIME
from daemon.engine.worker_gc import freeze_loaded
from daemon.errors import SchemaRegistryUnavailableError
from daemon.formats.avro.codec import AvroCodec
from daemon.formats.envelope import Envelope
from daemon.formats.keys import KafkaKeyCodec, key_parts
from daemon.formats.routing import Router
from daemon.kafka import connect
from daemon.kafka.clients import read_partition
from daemon.kafka.records import (
    CONTROL_HEADER,
    CONTROL_INPUT,
    DEAD_LETTER_ROUTE,
    END_OF_INPUT,
    RECORD_ARROW,
    SOURCE_DDL,
    Routing,
    buckets_of,
    pack,
    route,
    route_fields,
)

_ARROW_CHUNK = 10_000
_MARKER_LOOKAHEAD = 1_000
"""Records read past a capped batch's budget to find end-of-input markers that follow it."""
_RANGE_FETCH = {
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
_PROBE_QUEUE = {"queued.min.messages": 100_000, "queued.max.messages.kbytes": 1024}
"""How much the probe's fetcher queues before it stops fetching: messages per partition,
kilobytes in all (librdkafka's defaults are 100,000 messages and 64 MB)."""
_PROBE_DRAIN = 100_000
"""Messages the probe takes off its queue at most per call."""
_PROBE_WAIT_S = 0.05
"""How long a plan waits for a Fetch response when the probe's watermarks may be old."""
_OPEN_TRANSACTION_WAIT_S = 120.0
"""How long a read waits for the position to move: a ``read_committed`` read stops at an open
upstream transaction until it commits or aborts, and Kafka producers' default transaction
timeout is 60 s. Planned ends come from the high watermark, which may lie past such a
transaction."""


@dataclass(frozen=True)
class SourceInput:
    """One input topic and how to read its records."""

    role: str
    topic: str
    key_field: str | tuple[str, ...]
    """The join key: a value field, or several, or parts of the Kafka key (daemon.formats.keys)."""
    time_field: str | None
    codec: AvroCodec
    keyed_tombstones: bool = True
    """Whether the Kafka key of a tombstone is its join key (see Joiner.keyed_tombstones)."""
    kafka_keys: KafkaKeyCodec = field(default_factory=KafkaKeyCodec)
    """How the topic's Kafka keys are read (``key_format``)."""
    envelope: Envelope | None = None
    """The values' envelope (``debezium``), or None when a value is the row."""
    bootstrap: bool = False
    """Whether a new query reads this input to the end it had at start before any other
    input's record (see :data:`BOOTSTRAP` and Joiner.bootstrap_roles)."""

    @cached_property
    def routed_fields(self) -> tuple[str, ...]:
        """The fields the source reads of every record: the join key, then the event time.

        Only for an input without a :attr:`router`, whose key is one value field.
        """
        assert isinstance(self.key_field, str)  # noqa: S101 - see router
        return (self.key_field,) if self.time_field is None else (self.key_field, self.time_field)

    @cached_property
    def millis_fields(self) -> tuple[str, ...]:
        """The routed field that may be a ``timestamp-millis``: the event time."""
        return () if self.time_field is None else (self.time_field,)

    def route_decoded(
        self, value: dict[str, Any] | None, kafka_key: bytes | None, timestamp: int
    ) -> Routing:
        """Route a decoded value as the source routes its bytes (for replay's markers)."""
        if self.router is not None:
            return self.router.route(value, kafka_key, timestamp)
        assert isinstance(self.key_field, str)  # noqa: S101 - see router
        return route(
            value,
            kafka_key,
            timestamp,
            role=self.role,
            key_field=self.key_field,
            time_field=self.time_field,
            keyed_tombstones=self.keyed_tombstones,
        )

    @cached_property
    def router(self) -> Router | None:
        """How the records are routed, unless by one field of the value (None).

        The common case, a join key from one field of a value that is the row, with the
        Kafka key as text for tombstones, keeps its own path (:func:`_route`), which costs
        no more per record than it did before keys could be composite or come from the
        Kafka key; everything else goes through a :class:`~daemon.formats.routing.Router`.
        """
        parts = key_parts(self.key_field)
        if (
            len(parts) == 1
            and not parts[0].from_kafka_key
            and self.kafka_keys.key_format == "string"
            and self.envelope is None
        ):
            return None
        return Router(
            self.role,
            parts,
            self.time_field,
            self.keyed_tombstones,
            self.kafka_keys,
            self.envelope,
        )


@dataclass(frozen=True)
class SourceSpec:
    """Everything the source needs; pickled into the data source's options."""

    inputs: tuple[SourceInput, ...]
    client_conf: dict[str, str]
    max_records_per_batch: int
    state_buckets: int = DEFAULT_STATE_BUCKETS
    """How many state buckets the join keys are hashed into (the ``bucket`` column)."""
    read_tasks: int = 0
    """How many Spark tasks read a micro-batch at most (the cluster's cores); 0: one task
    per Kafka partition."""
    wake_ms: int = 0
    """How often the plan's :data:`CLOCK` moves, for a joiner that wakes quiet keys; 0: no
    clock."""
    start: dict[str, int] | None = None
    """Where a new checkpoint starts reading (``"topic/partition"`` -> offset), from its seed
    (:mod:`daemon.state.seed`); None, and for partitions it leaves out: the earliest."""

    def encode(self) -> str:
        """The spec as an option string."""
        return base64.b64encode(pickle.dumps(self)).decode("ascii")

    @staticmethod
    def decode(text: str) -> SourceSpec:
        """The spec back from :meth:`encode`."""
        return pickle.loads(base64.b64decode(text))  # type: ignore[no-any-return]  # noqa: S301


@dataclass(frozen=True)
class KafkaRange:
    """One Kafka partition's offset range ``[start, end)`` of a micro-batch."""

    topic: str
    partition: int
    start: int
    end: int


@dataclass(frozen=True)
class KafkaPartition(InputPartition):
    """What one Spark task reads of a micro-batch: one or more Kafka partitions' ranges."""

    ranges: tuple[KafkaRange, ...]


@dataclass
class Heads:
    """What planning a capped batch needs of a partition's records ``[start, end)``.

    Each record's timestamp and offset, and whether it is an end-of-input marker, in offset
    order, as columns: planning reads them for hundreds of thousands of records per batch.
    """

    start: int
    end: int
    timestamps: list[int] = field(default_factory=list)
    offsets: list[int] = field(default_factory=list)
    markers: list[bool] = field(default_factory=list)

    def drop_before(self, first: int) -> None:
        """Forget the records before offset ``first``."""
        cut = bisect.bisect_left(self.offsets, first)
        del self.timestamps[:cut], self.offsets[:cut], self.markers[:cut]
        self.start = first

    def before(self, stop: int) -> Heads:
        """The records before offset ``stop``."""
        cut = bisect.bisect_left(self.offsets, stop)
        return Heads(
            self.start, stop, self.timestamps[:cut], self.offsets[:cut], self.markers[:cut]
        )


CLOCK = "clock"
"""The offsets' entry that counts ``wake_ms`` periods of wall-clock time; no ``/``, so no
partition's. Spark runs a micro-batch when a source's offset changes, and fires timers only
in micro-batches: a clock that moves makes a batch every ``wake_ms`` while no record comes in,
and the query keeps the default trigger, so a record that does come in starts its batch at
once. Spark's other way, a batch per processing-time trigger with no-data batches on, makes
every record wait up to that interval for its batch."""


BOOTSTRAP = "bootstrap"
"""The offsets' entry of a query that bootstraps: ``{"topic/partition": end}``, the end each
partition of a bootstrapped input (:attr:`SourceInput.bootstrap`) had when the query started
without a checkpoint. While any of them is short of its end, a plan admits records of those
partitions only, up to those ends, and carries the entry on; the plan that reaches them all
leaves it out, and the next admits every input again. Living in the offsets, which Spark keeps
in the checkpoint, the entry survives a restart in the middle of a bootstrap, and a restart
after one (or of a query that never bootstrapped) does not bootstrap again. No ``/``, so no
partition's."""

Offsets = dict[str, Any]
"""A plan's offsets as Spark stores them: ``"topic/partition"`` -> offset, and the
:data:`CLOCK` and :data:`BOOTSTRAP` entries."""


def _name(topic: str, partition: int) -> str:
    return f"{topic}/{partition}"


def _split(name: str) -> tuple[str, int]:
    topic, _, partition = name.rpartition("/")
    return topic, int(partition)


class KafkaSource(DataSource):
    """``spark.readStream.format("enrichd-kafka").option("spec", SourceSpec(...).encode())``."""

    @classmethod
    def name(cls) -> str:
        """The format name."""
        return "enrichd-kafka"

    def schema(self) -> str:
        """The fixed row shape of :data:`daemon.kafka.records.SOURCE_DDL`."""
        return SOURCE_DDL

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        """The driver-side planner and executor-side reader."""
        return KafkaStreamReader(SourceSpec.decode(self.options["spec"]))


class KafkaStreamReader(DataSourceStreamReader):
    """Plans offset ranges on the driver and reads them on executors."""

    def __init__(self, spec: SourceSpec) -> None:
        self.spec = spec
        self._probe: Any = None
        self._probe_assigned: set[str] = set()
        self._reader: Any = None
        self._head_cache: dict[str, Heads] = {}
        self._read_ahead: threading.Thread | None = None
        """Reads the next plan's heads while Spark runs the batch just planned; joined before
        the cache or the reader is used again."""

    # -- driver side ---------------------------------------------------------------------

    def _consumer_conf(self) -> dict[str, Any]:
        return {
            **self.spec.client_conf,
            "group.id": "enrichd-unused",  # required by the client; never joined or committed
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "enable.partition.eof": False,
            "isolation.level": "read_committed",
        }

    def _partitions(self) -> list[tuple[str, int]]:
        if self._probe is None:
            self._probe = connect.consumer(
                self._consumer_conf(),
                {
                    "fetch.wait.max.ms": 100,
                    **_PROBE_QUEUE,
                    # After its queue was full, fetch again soon after it is drained (the
                    # default waits a second).
                    "fetch.queue.backoff.ms": 10,
                    "max.partition.fetch.bytes": 65536,
                },
            )
        metadata = self._probe.list_topics(timeout=10)
        found: list[tuple[str, int]] = []
        for spec in self.spec.inputs:
            topic = metadata.topics.get(spec.topic)
            if topic is None or topic.error is not None:
                raise RuntimeError(f"input topic {spec.topic!r} does not exist")
            found.extend((spec.topic, p) for p in sorted(topic.partitions))
        return found

    def initialOffset(self) -> Offsets:
        """Start every partition at its earliest offset, as Kafka's ``earliest`` reset does.

        Spark asks only when the query has no checkpoint yet. A seeded checkpoint starts where
        its seed says (``spec.start``), but never before the earliest offset still there.
        With bootstrapped inputs, the ends their partitions have now go along as the
        :data:`BOOTSTRAP` entry.
        """
        from confluent_kafka import TopicPartition

        offsets: Offsets = {}
        start = self.spec.start or {}
        for topic, partition in self._partitions():
            low, _ = self._probe.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
            name = _name(topic, partition)
            offsets[name] = max(low, start.get(name, 0), 0)
        targets = self._bootstrap_ends(offsets)
        if targets:
            offsets[BOOTSTRAP] = targets
        return offsets

    def _bootstrap_ends(self, start: Offsets) -> dict[str, int]:
        """The ends now of the bootstrapped inputs' partitions that hold records past ``start``."""
        topics = {spec.topic for spec in self.spec.inputs if spec.bootstrap}
        if not topics:
            return {}
        ends = self._log_ends(start)
        return {
            name: end
            for name, end in sorted(ends.items())
            if _split(name)[0] in topics and end > start.get(name, 0)
        }

    def _log_ends(self, start: Offsets) -> dict[str, int]:
        """The end of every partition, from the high watermarks of recent Fetch responses."""
        from confluent_kafka import KafkaException, TopicPartition

        partitions = self._partitions()
        fresh = [
            TopicPartition(t, p, start.get(_name(t, p), 0))
            for t, p in partitions
            if _name(t, p) not in self._probe_assigned
        ]
        if fresh:
            self._probe.incremental_assign(fresh)
            self._probe_assigned.update(_name(tp.topic, tp.partition) for tp in fresh)
        ends: dict[str, int] = {}
        deadline = time.monotonic() + 2.0
        wait_s = _PROBE_WAIT_S if self._probe_may_have_paused() else 0.0
        while True:
            if wait_s:  # for a Fetch response, whose watermark is fresh
                self._probe.consume(num_messages=_PROBE_DRAIN, timeout=wait_s)
            missing = []
            for topic, partition in partitions:
                tp = TopicPartition(topic, partition)
                _, high = self._probe.get_watermark_offsets(tp, cached=True)
                if high >= 0:
                    ends[_name(topic, partition)] = high
                else:
                    missing.append(tp)
            if not missing:
                break
            wait_s = _PROBE_WAIT_S
            if time.monotonic() > deadline:
                for tp in missing:  # no Fetch answered yet: fall back to ListOffsets
                    _, high = self._probe.get_watermark_offsets(tp, timeout=10)
                    ends[_name(tp.topic, tp.partition)] = high
                break
        behind = [
            TopicPartition(*_split(name), end)
            for name, end in ends.items()
            if self._probe.position([TopicPartition(*_split(name))])[0].offset < end
        ]
        for tp in behind:  # the probe only needs watermarks, not the data in between
            try:
                self._probe.seek(tp)
            except KafkaException:
                pass  # not fetching yet; it will start from its assigned offset
        return ends

    def _probe_may_have_paused(self) -> bool:
        """Drain the probe's queue; whether its fetcher may have stopped since the last plan.

        The fetcher fetches only while its queue holds less than :data:`_PROBE_QUEUE`
        (messages per partition, bytes in all). A queue that got near that may have stopped
        fetching, and so holds old watermarks: the plan then waits for a new Fetch response.
        A queue that stayed well below kept fetching, so its watermarks are the latest
        responses', and the plan need not wait (:data:`_PROBE_WAIT_S` per batch, data or not).
        """
        drained = self._probe.consume(num_messages=_PROBE_DRAIN, timeout=0)
        per_partition = Counter((m.topic(), m.partition()) for m in drained)
        half_bytes = _PROBE_QUEUE["queued.max.messages.kbytes"] * 1024 // 2
        half_messages = _PROBE_QUEUE["queued.min.messages"] // 2
        return (
            len(drained) >= _PROBE_DRAIN  # more may be queued
            or sum(len(m) for m in drained) >= half_bytes
            or max(per_partition.values(), default=0) >= half_messages
        )

    def latestOffset(self, start: Offsets, limit: ReadLimit) -> Offsets:
        """The end of the next micro-batch: the log ends, capped to the read limit.

        While the query bootstraps (``start`` has a :data:`BOOTSTRAP` entry), only the
        bootstrapped partitions move, and the entry goes on until they reach its ends. With
        the spec's ``wake_ms``, also the :data:`CLOCK`. The partitions come in the order of
        their names, whatever order their ends were found in: Spark compares offsets as JSON
        text, and the same ends in another order made it run a batch that read nothing.
        """
        targets = start.get(BOOTSTRAP)
        found = (
            self._bootstrapping(start, targets, limit) if targets else self._planned(start, limit)
        )
        planned: Offsets = dict(sorted(found.items()))
        if targets and any(planned.get(name, 0) < end for name, end in targets.items()):
            planned[BOOTSTRAP] = targets
        if self.spec.wake_ms:
            planned[CLOCK] = time.time_ns() // 1_000_000 // self.spec.wake_ms
        return planned

    def _planned(self, start: Offsets, limit: ReadLimit) -> dict[str, int]:
        ends = self._log_ends(start)
        planned = {name: max(start.get(name, 0), end) for name, end in ends.items()}
        return self._capped(start, planned, limit)

    def _bootstrapping(
        self, start: Offsets, targets: dict[str, int], limit: ReadLimit
    ) -> dict[str, int]:
        """A bootstrap's plan: the bootstrapped partitions up to their ends at start, no other."""
        ends = self._log_ends(start)
        planned = {name: start.get(name, 0) for name in ends}
        for name, target in targets.items():
            planned[name] = max(start.get(name, 0), min(ends.get(name, target), target))
        return self._capped(start, planned, limit)

    def _capped(self, start: Offsets, planned: dict[str, int], limit: ReadLimit) -> dict[str, int]:
        """``planned`` cut to the read limit: its earliest records across partitions."""
        if isinstance(limit, ReadAllAvailable):
            return planned
        budget = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        if budget is None:
            return planned
        if sum(planned[n] - start.get(n, 0) for n in planned) <= budget:
            return planned
        self._await_read_ahead()
        capped = self._earliest_first(start, planned, budget)
        # Spark runs the batch before it plans the next one: read that one's heads meanwhile.
        self._read_ahead = threading.Thread(
            target=self._read_heads_ahead,
            args=(capped, planned, budget),
            name="enrichd-plan-read-ahead",
            daemon=True,
        )
        self._read_ahead.start()
        return capped

    def _read_heads_ahead(
        self, start: dict[str, int], planned: dict[str, int], budget: int
    ) -> None:
        try:
            self._heads_for(start, planned, budget)
        except Exception:  # noqa: BLE001 - the next plan reads again, and raises there
            return

    def _await_read_ahead(self) -> None:
        if self._read_ahead is not None:
            self._read_ahead.join()
            self._read_ahead = None

    def _earliest_first(
        self, start: Offsets, planned: dict[str, int], budget: int
    ) -> dict[str, int]:
        """Admit the ``budget`` records with the smallest timestamps across all partitions.

        Like a Kafka Streams task choosing the partition whose next record is oldest, this
        keeps a capped micro-batch a prefix of the input in time order, so the cap cannot
        change the order in which a key's records from different topics are applied.
        """
        ranks: dict[str, int] = {}  # the inputs come in the joiner's role order
        for i, spec in enumerate(self.spec.inputs):
            ranks.setdefault(spec.topic, i)
        heads = self._heads_for(start, planned, budget)
        admitted = admit_earliest(heads, {name: ranks[_split(name)[0]] for name in heads}, budget)
        return {name: admitted.get(name, int(start.get(name, 0))) for name in planned}

    def _heads_for(self, start: Offsets, planned: dict[str, int], budget: int) -> dict[str, Heads]:
        """The heads a capped plan from ``start`` needs, per partition with records to read."""
        # Read past the budget: end-of-input markers there ride along free. As many as
        # :data:`_MARKER_LOOKAHEAD` whatever the budget: replay writes a marker per key after
        # every record, and with a cap of one, a lookahead of one left a marker a batch of its
        # own.
        return {
            name: self._heads(
                name,
                start.get(name, 0),
                min(end, start.get(name, 0) + budget + _MARKER_LOOKAHEAD),
            )
            for name, end in planned.items()
            if end > start.get(name, 0)
        }

    def _heads(self, name: str, first: int, stop: int) -> Heads:
        """The heads of one partition's records in ``[first, stop)``.

        Planning reads ahead of each batch, so what one plan read is most of the next one's
        range: the heads stay cached, and each record is read once, not once per plan.
        """
        from confluent_kafka import TopicPartition

        cached = self._head_cache.get(name)
        if cached is None or not cached.start <= first <= cached.end:
            cached = self._head_cache[name] = Heads(first, first)
        cached.drop_before(first)
        if cached.end < stop:
            if self._reader is None:
                self._reader = connect.consumer(self._consumer_conf(), _RANGE_FETCH)
            tp = TopicPartition(*_split(name), cached.end)
            read = [m for records in read_partition(self._reader, tp, stop) for m in records]
            # Only a complete read joins the cache: a failed one is read again next time.
            cached.timestamps.extend([m.timestamp()[1] for m in read])
            cached.offsets.extend([m.offset() or 0 for m in read])
            cached.markers.extend([m.value() is None and _is_end_of_input(m) for m in read])
            cached.end = stop
        return cached.before(stop)

    def getDefaultReadLimit(self) -> ReadLimit:
        """The pipeline's cap on records per micro-batch."""
        return ReadMaxRows(self.spec.max_records_per_batch)

    def partitions(self, start: Offsets, end: Offsets) -> Sequence[InputPartition]:
        """The ranges with records, dealt out to at most ``read_tasks`` Spark partitions."""
        ranges = []
        for name, stop in sorted(end.items()):
            if name in (CLOCK, BOOTSTRAP):
                continue
            first = start.get(name, 0)
            if stop > first:
                topic, partition = _split(name)
                ranges.append(KafkaRange(topic, partition, first, stop))
        return [KafkaPartition(tuple(task)) for task in deal(ranges, self.spec.read_tasks)]

    def commit(self, end: Offsets) -> None:
        """Nothing to do: the offsets live in Spark's checkpoint, not in a consumer group."""

    def stop(self) -> None:
        """Close the probe and the planning reader."""
        self._await_read_ahead()
        if self._probe is not None:
            self._probe.close()
            self._probe = None
        if self._reader is not None:
            self._reader.close()
            self._reader = None

    # -- executor side -------------------------------------------------------------------

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """Read the task's ranges, one after the other, as decoded Arrow record batches."""
        assert isinstance(partition, KafkaPartition)  # noqa: S101 - Spark gives back our own
        freeze_loaded()
        for kafka_range in partition.ranges:
            yield from self._read_range(kafka_range)

    def _read_range(self, kafka_range: KafkaRange) -> Iterator[pa.RecordBatch]:
        from confluent_kafka import TopicPartition

        index, spec = next(
            (i, s) for i, s in enumerate(self.spec.inputs) if s.topic == kafka_range.topic
        )
        buckets = self.spec.state_buckets
        number = kafka_range.partition
        consumer = connect.consumer(self._consumer_conf(), _RANGE_FETCH)
        tp = TopicPartition(kafka_range.topic, number, kafka_range.start)
        pending: list[Any] = []
        try:
            chunks = read_partition(
                consumer, tp, kafka_range.end, chunk=_ARROW_CHUNK, stall_s=_OPEN_TRANSACTION_WAIT_S
            )
            for records in chunks:
                pending.extend(records)
                if len(pending) >= _ARROW_CHUNK:
                    yield _arrow_batch(spec, index, number, pending, buckets)
                    pending = []
        finally:
            consumer.close()
        if pending:
            yield _arrow_batch(spec, index, number, pending, buckets)


def deal(ranges: Sequence[KafkaRange], tasks: int) -> list[list[KafkaRange]]:
    """``ranges`` dealt out to at most ``tasks`` tasks (0: one each), evening out records.

    The largest range goes first, each to the task with the fewest records so far; the
    same ranges always give the same tasks.
    """
    if tasks <= 0 or len(ranges) <= tasks:
        return [[kafka_range] for kafka_range in ranges]
    dealt: list[list[KafkaRange]] = [[] for _ in range(tasks)]
    loads = [0] * tasks
    for kafka_range in sorted(ranges, key=lambda r: r.start - r.end):  # largest first, stable
        least = loads.index(min(loads))
        dealt[least].append(kafka_range)
        loads[least] += kafka_range.end - kafka_range.start
    return dealt


def admit_earliest(heads: dict[str, Heads], ranks: dict[str, int], budget: int) -> dict[str, int]:
    """Where a capped batch ends in each partition: its ``budget`` earliest records.

    Earliest in the order of a k-way merge that always takes the partition whose next record
    is smallest by (timestamp, rank, partition number, offset), so that each partition is
    admitted as a prefix of its own order. A record's rank is its input's (``ranks``: the
    joiner's role order); an end-of-input marker ranks after every input, so at a tied
    timestamp the end of input comes after the records of every input (docs/semantics.md).

    Such a merge takes a record only after every record before it in its partition: that is
    the order of each record's *running maximum* (timestamp, rank) in its partition, then
    partition and offset. So one sort finds the cut, much faster than a merge record by
    record in Python.

    End-of-input markers are not records to join: they ride along free, taken as they come
    up to the ``budget``-th record and right after it, so a cap spends no batch on them.

    Returns:
        The admitted end offset of each partition that admits any record.
    """
    names = sorted(
        (name for name in heads if heads[name].offsets), key=lambda n: (ranks[n], _split(n))
    )
    if not names:
        return {}
    parts = [heads[name] for name in names]
    marker_rank = max(ranks.values()) + 1
    levels = marker_rank + 1
    # (timestamp, rank) as one number, so that a running maximum orders by both.
    keys = [
        np.maximum.accumulate(
            np.asarray(p.timestamps, dtype=np.int64) * levels
            + np.where(np.asarray(p.markers, dtype=bool), marker_rank, ranks[name])
        )
        for name, p in zip(names, parts, strict=True)
    ]
    times = np.concatenate(keys)
    offsets = np.concatenate([np.asarray(p.offsets, dtype=np.int64) for p in parts])
    markers = np.concatenate([np.asarray(p.markers, dtype=bool) for p in parts])
    which = np.repeat(np.arange(len(parts)), [len(p.offsets) for p in parts])
    order = np.lexsort((offsets, which, times))  # the last key sorts first
    is_marker = markers[order]
    records = np.cumsum(~is_marker)
    taken = int(np.searchsorted(records, budget))  # the budget-th record's place
    if taken < len(order):
        following = np.flatnonzero(~is_marker[taken + 1 :])  # markers right after it ride
        taken = taken + 1 + (int(following[0]) if following.size else len(order) - taken - 1)
    last = np.full(len(parts), -1, dtype=np.int64)
    np.maximum.at(last, which[order[:taken]], offsets[order[:taken]])
    return {name: int(end) + 1 for name, end in zip(names, last, strict=True) if end >= 0}


def _arrow_batch(
    spec: SourceInput, index: int, partition: int, messages: list[Any], buckets: int
) -> pa.RecordBatch:
    """Route one partition's messages and pack them by state bucket (:func:`pack`).

    Built a column at a time: a per-record loop appending to ten lists cost more than
    the routing itself.
    """
    count = len(messages)
    values = [m.value() for m in messages]
    kafka_keys = [m.key() for m in messages]
    timestamps = [m.timestamp()[1] for m in messages]
    inputs = [index] * count
    route_one = _route if spec.router is None else _route_by_router
    routings = [
        route_one(spec, value, kafka_key, timestamp)
        for value, kafka_key, timestamp in zip(values, kafka_keys, timestamps, strict=True)
    ]
    for i in [i for i, value in enumerate(values) if value is None and kafka_keys[i]]:
        if _is_end_of_input(messages[i]):
            inputs[i] = CONTROL_INPUT
            routings[i] = Routing(kafka_keys[i].decode("utf-8", "replace"), END_OF_TIME, None)
    keys = [
        DEAD_LETTER_ROUTE if error is not None or key is None else key for key, _, error in routings
    ]
    records = pa.RecordBatch.from_arrays(
        [
            pa.array(inputs, pa.int32()),
            pa.array(keys, pa.string()),
            pa.array([event_time for _, event_time, _ in routings], pa.int64()),
            pa.repeat(pa.scalar(partition, pa.int32()), count),
            pa.array([m.offset() for m in messages], pa.int64()),
            pa.array(timestamps, pa.int64()),
            pa.array(kafka_keys, pa.binary()),
            pa.array(values, pa.binary()),
            pa.array([error for _, _, error in routings], pa.string()),
        ],
        schema=RECORD_ARROW,
    )
    return pack(records, buckets_of(keys, buckets))


def _route(
    spec: SourceInput, value: bytes | None, kafka_key: bytes | None, timestamp: int
) -> Routing:
    """One record's join key and event time, or why it has none.

    The key and time fields are read from the bytes where the schema allows
    (:meth:`AvroCodec.read_fields`); the joiner decodes the whole record later.
    """
    if value is not None:
        try:
            fields = spec.codec.read_fields(value, spec.routed_fields, spec.millis_fields)
        except SchemaRegistryUnavailableError:
            raise  # the record is fine: fail the batch, which is retried, not the record
        except Exception:  # noqa: BLE001 - bad bytes, or a registry that does not know the id
            fields = None  # the decode below fails too, and says why in its own words
        if fields is not None:
            raw_time = fields[1] if spec.time_field is not None else None
            return route_fields(fields[0], raw_time, timestamp, spec.key_field, spec.time_field)
    return _route_by_decode(spec, value, kafka_key, timestamp)


def _route_by_router(
    spec: SourceInput, value: bytes | None, kafka_key: bytes | None, timestamp: int
) -> Routing:
    """:func:`_route` for an input with a :attr:`SourceInput.router`.

    The value's key parts and event time are read from the bytes where the schema allows,
    as :func:`_route` does (which keeps that read inline: a call per record costs); an
    envelope or a nested field needs a decode.
    """
    router = spec.router
    assert router is not None  # noqa: S101 - chosen for inputs with a router
    names = router.scanned_fields
    if value is not None and names is not None:
        try:
            fields = spec.codec.read_fields(value, names, spec.millis_fields)
        except SchemaRegistryUnavailableError:
            raise
        except Exception:  # noqa: BLE001 - the decode below fails too, and says why
            fields = None
        if fields is not None:
            return router.route_scanned(fields, kafka_key, timestamp)
    return _route_by_decode(spec, value, kafka_key, timestamp)


def _route_by_decode(
    spec: SourceInput, value: bytes | None, kafka_key: bytes | None, timestamp: int
) -> Routing:
    """Route a record by decoding it whole: what reading its fields from the bytes cannot."""
    try:
        record = None if value is None else spec.codec.decode(value)
    except SchemaRegistryUnavailableError:
        raise
    except Exception as exc:
        return Routing(None, timestamp, f"UndecodableRecord: {type(exc).__name__}: {exc}")
    return spec.route_decoded(record, kafka_key, timestamp)


def _is_end_of_input(message: Any) -> bool:
    """Whether a tombstone is an end-of-input marker (see :data:`CONTROL_INPUT`)."""
    return any(
        name == CONTROL_HEADER and raw == END_OF_INPUT for name, raw in message.headers() or ()
    )
