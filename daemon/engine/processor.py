"""The joiner operator: a ``transformWithState`` processor that runs any :class:`Joiner`.

Records of a micro-batch arrive grouped by state bucket (a hash of the join key into the
pipeline's ``state_buckets``), packed many to a row by the source
(:data:`~daemon.kafka.records.SOURCE_DDL`), and within a bucket the processor takes them key
by key: it decodes a key's records, puts them in apply order, loads the key's state (one
Python object), lets the joiner process them, keeps the new state, and writes what the joiner
yielded to Kafka: Avro-encoded output records with provenance headers, and dead letters with
their original bytes and the reason. A joiner that raises does not stop the pipeline: that
key's records go to the dead-letter topic with the exception, and the key's state stays as
it was.

Why the operator writes, not a sink after it: handing records on to a sink costs two more
crossings between Python and the JVM, one out of this worker and one into the sink's, which
cost more than the writing. The task's records go into one Kafka
transaction (:class:`~daemon.kafka.task_output.TaskOutput`), committed when Spark closes the
operator at the end of the task, just before Spark commits the task's state; a replay of a
batch whose transaction landed recomputes the state and writes nothing. What reaches the
sink is one row of counts per call, for the metrics.

Why packs: see :data:`~daemon.kafka.records.SOURCE_DDL`. The processor reads a pack's records
a column at a time, as named tuples. Why the Row-based ``transformWithState`` and not
``transformWithStateInPandas``: PySpark's Row flavour converts each cell one Arrow scalar at a
time, which was too slow when each record was a row, but a call now gets a few packs; the
pandas flavour built frames for them and for each call's counts row, which made the latency
run's batches slower.

Why buckets: every state-store call is a round trip between the Python worker and the JVM,
and per-key calls (set the key, read, write) cost about a millisecond per key and
micro-batch, more than the joining. A bucket is one value holding its keys' states, each
pickled on its own, so a micro-batch reads and writes each touched bucket once and unpickles
only the keys it has rows for; the bucket is stored as plain data in enrichd's state format
(:mod:`daemon.engine.state_format`), compressed (:mod:`daemon.engine.blobs`). Values a joiner
keeps in a
:class:`~daemon.joiners.stash.Stash` are not in the bucket: they are appended to the bucket's
stash log once, and read only when looked at (:mod:`daemon.engine.stash_log`).

Time: next to the joiner's state the processor keeps the key's clock: its latest event time
and the processing time of its last record. When the joiner wants a wake-up
(:meth:`Joiner.wakeup_ms`) or the key's state has a TTL, the bucket notes when the key is
due, and keeps one processing-time timer at or before its earliest due key. When it fires,
each due key's :meth:`Joiner.advance` gets the latest event time plus the processing time
that passed (or, past its TTL, the key is dropped); an end-of-input marker row (see
:data:`daemon.kafka.records.CONTROL_INPUT`) advances the key to :data:`END_OF_TIME`, after
the records of its micro-batch, and for good: a record that reaches the key in a later
micro-batch is applied and flushed at once.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from functools import partial
from operator import attrgetter
from typing import Any, NamedTuple

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import Row as SparkRow
from pyspark.sql.streaming import StatefulProcessor, StatefulProcessorHandle
from pyspark.sql.types import BinaryType, StructField, StructType

from daemon.engine import blobs
from daemon.engine.stash_log import CHUNK_SCHEMA, StashLog
from daemon.engine.state_format import (
    EVENT_TIME,
    LAST_MS,
    STATE,
    STREAM_TIME,
    UPDATED_MS,
    Bucket,
    decode_bucket,
    decode_portable,
    encode_bucket,
)
from daemon.engine.worker_gc import freeze_loaded
from daemon.errors import SchemaRegistryUnavailableError
from daemon.formats.avro.codec import AvroCodec
from daemon.formats.envelope import Envelope, unwrap
from daemon.formats.keys import KafkaKeyCodec
from daemon.joiners.base import (
    END_OF_TIME,
    DeadLetter,
    Emit,
    InputRecord,
    Joiner,
    JoinerContext,
    apply_order,
    input_record,
)
from daemon.kafka.records import CONTROL_INPUT, DEAD_LETTER_ROUTE, unpack
from daemon.kafka.task_output import OutputSpec, TaskOutput
from daemon.service.latency import compact
from daemon.service.metrics_relay import COUNTS_TOPIC

AFTER_END_OF_INPUT = "after_end_of_input"
"""The event counted (``enrichd_joiner_events``) for each record that reaches its key after
the key's end of input."""

BUCKET_SCHEMA = StructType([StructField("blob", BinaryType())])
"""Schema of the bucket's value state (a StructType: a DDL string would cost a call to the JVM
to parse it in every task)."""


class Row(NamedTuple):
    """An input record: the fields of :data:`daemon.kafka.records.RECORD_ARROW`."""

    input: int
    """The input's position in :attr:`OperatorPlan.inputs`, or :data:`CONTROL_INPUT`."""
    key: str
    event_time: int
    partition: int
    offset: int
    timestamp: int
    kafka_key: bytes | None
    value: bytes | None
    error: str | None


class Output(NamedTuple):
    """An output row, the fields of :data:`daemon.kafka.records.SINK_DDL` in order."""

    topic: str
    key: bytes | None
    value: bytes | None
    timestamp: int | None
    source_topic: str | None = None
    source_partition: int | None = None
    source_offset: int | None = None
    error_class: str | None = None
    error_message: str | None = None


Send = Callable[[tuple[Any, ...]], None]
"""Takes one output row: an :class:`Output`, or a plain tuple of its fields in order (the
hot path builds those: a named tuple's constructor is a Python call)."""


@dataclass(frozen=True)
class OperatorPlan:
    """What the processor needs on executors; pickled with it."""

    joiner: Joiner
    codecs: dict[str, AvroCodec]
    output_codec: AvroCodec
    output_topic: str
    dead_letter_topic: str
    plugin: str
    outputs: dict[str, tuple[str, AvroCodec]] | None = None
    """Secondary outputs by name: topic and codec."""
    inputs: tuple[tuple[str, str], ...] = ()
    """Role and topic of each input, in the source's order (a row's ``input``)."""
    envelopes: dict[str, Envelope] | None = None
    """The value envelope of each role that has one (``debezium``)."""
    output_keys: dict[str | None, KafkaKeyCodec] | None = None
    """How keys are written, by output (None: the main one), where not as UTF-8 text."""


@dataclass
class KeyClock:
    """A key's time, stored with its state (as fields of its entry): see the module docstring.

    Only what the pipeline uses is kept up to date: ``stream_time`` and ``last_ms`` when its
    joiner wakes up, ``updated_ms`` when it has a state TTL. Otherwise they stay as they
    were, so a key whose state a call leaves alone keeps the same bytes (see
    :meth:`JoinerProcessor._store_bucket`).
    """

    stream_time: int = 0
    last_ms: int = 0
    """Processing time of the key's last record (or wake-up)."""
    updated_ms: int = 0
    """Processing time of the key's last state change, for ``state_ttl``; 0: not known."""


class JoinerProcessor(StatefulProcessor):
    """Runs a joiner over the records of one state bucket per call (see the module docstring)."""

    def __init__(self, plan: OperatorPlan, output: OutputSpec) -> None:
        self.plan = plan
        self.spec = output
        # Asked once: reading an option a joiner's options lack costs a pydantic exception.
        self.ttl_ms = plan.joiner.state_ttl_ms()
        self.wakes = plan.joiner.wakes_up()

    def init(self, handle: StatefulProcessorHandle) -> None:
        """Declare the state variables: the bucket and its stash log."""
        freeze_loaded()
        self.handle = handle
        self.output: TaskOutput | None = None  # opened at the task's first call
        self._stamps: dict[str, list[int]] = {}
        """Source timestamps of the call's output records, by topic (``daemon.service.latency``)."""
        self._newest: dict[int, int] = {}
        """The newest event time of the call's records, by input (event-time lag)."""
        self.state = handle.getValueState("state_bucket", BUCKET_SCHEMA)
        self.stash_chunks = handle.getListState("stash_chunks", CHUNK_SCHEMA)
        envelopes = self.plan.envelopes or {}
        self._decoders = tuple(
            _decoder(self.plan.codecs[role], envelopes.get(role)) for role, _ in self.plan.inputs
        )
        """Each input's value decoder, by a row's ``input``: its codec's, unwrapping the
        row of an envelope."""
        self._emitted = self._keyed_output if self.plan.output_keys else self._output

    def handleInputRows(  # noqa: N802
        self,
        key: Any,
        rows: Iterator[SparkRow],
        timerValues: Any,  # noqa: N803
    ) -> Iterator[SparkRow]:
        """Apply this micro-batch's packs of one bucket, key by key."""
        self._input_rows(rows, timerValues, self._sender())
        yield from self._counts()

    def _input_rows(self, packs: Iterator[SparkRow], timer_values: Any, send: Send) -> None:
        by_key: dict[str, list[Row]] = {}
        for row in _rows_of(packs, self._newest):
            if row.key == DEAD_LETTER_ROUTE:
                kind, _, reason = (row.error or "Error: unknown").partition(": ")
                send(self._dead_letter(row, kind, reason))
            else:
                by_key.setdefault(row.key, []).append(row)
        if not by_key:
            return
        bucket, log, stored = self._load_bucket()
        now = timer_values.getCurrentProcessingTimeInMs()
        for group, group_rows in by_key.items():
            self._apply(bucket, log, group, group_rows, now, send)
        self._store_bucket(bucket, log, stored)

    def _apply(
        self, bucket: Bucket, log: StashLog, group: str, rows: list[Row], now: int, send: Send
    ) -> None:
        """Apply one key's rows: decode, order, run the joiner, keep its new state."""
        records: list[InputRecord] = []
        end_of_input = False
        inputs, decoders = self.plan.inputs, self._decoders
        for row in rows:
            if row.input == CONTROL_INPUT:
                end_of_input = True
                continue
            role, topic = inputs[row.input]
            try:
                value = None if row.value is None else decoders[row.input](row.value)
            except SchemaRegistryUnavailableError:
                raise  # the record is fine: fail the batch, which is retried, not the record
            except Exception as exc:  # the source read only the key and time fields
                send(self._dead_letter(row, "UndecodableRecord", str(exc)))
                continue
            records.append(
                input_record(
                    role,
                    group,
                    value,
                    row.event_time,
                    topic,
                    row.partition,
                    row.offset,
                    row.kafka_key,
                    row.timestamp,
                )
            )
        raw = _Originals(rows, inputs)
        joiner = self.plan.joiner
        clock, state = self._load(bucket, log, group, now)
        # A key's end of input is final: a record that comes after it is applied and flushed
        # at once, since no later marker would flush what the joiner holds back.
        ended = clock.stream_time == END_OF_TIME
        newest = None
        if records:
            if ended:
                joiner.context.count(AFTER_END_OF_INPUT, len(records))
            ordered = apply_order(records, joiner.roles, joiner.order)
            newest = max(map(_EVENT_TIME_OF, records))
            if self.wakes:
                clock.stream_time = max(clock.stream_time, newest)
                clock.last_ms = now
            state = self._step(joiner.process, group, state, ordered, raw, records, send)
            if state is None:
                return
        if end_of_input or (ended and records):
            clock.stream_time = END_OF_TIME
            state = self._step(joiner.advance, group, state, END_OF_TIME, raw, records, send)
            if state is None:
                return
        self._store(bucket, log, group, clock, state, now, newest)

    def handleInitialState(  # noqa: N802
        self,
        key: Any,
        initialState: SparkRow,  # noqa: N803
        timerValues: Any,  # noqa: N803
    ) -> None:
        """Take in a bucket's keys moved from another checkpoint (``daemon.state.seed``).

        Spark calls this in a new checkpoint's first micro-batch only, before that batch's
        records, with one row per bucket: its keys and each key's portable entry
        (:func:`~daemon.engine.state_format.encode_portable`). Each key's state is stored
        anew, its stashes' values in this bucket's log.
        """
        bucket, log, stored = self._load_bucket()
        for item in initialState.keys:  # PySpark gives the structs as dicts
            key = item["key"]
            clock, due, state = decode_portable(bytes(item["entry"]))
            bucket.keys[key] = (*clock, log.dumps(state))
            if due is not None:
                bucket.due[key] = due
        self._store_bucket(bucket, log, stored)

    def handleExpiredTimer(  # noqa: N802
        self,
        key: Any,
        timerValues: Any,
        expiredTimerInfo: Any,  # noqa: N803
    ) -> Iterator[SparkRow]:
        """Keys of the bucket have been quiet for their wake-up time: move their event time on.

        A key whose state outlived ``state_ttl`` is dropped instead.
        """
        self._wake_up(timerValues, self._sender())
        yield from self._counts()

    def _wake_up(self, timer_values: Any, send: Send) -> None:
        joiner = self.plan.joiner
        bucket, log, stored = self._load_bucket()
        bucket.timer_ms = None  # fired, so gone
        now = timer_values.getCurrentProcessingTimeInMs()
        for group in sorted(k for k, at in bucket.due.items() if at <= now):
            clock, state = self._load(bucket, log, group, now)
            if group not in bucket.keys:  # expired
                continue
            clock.stream_time = min(clock.stream_time + max(now - clock.last_ms, 0), END_OF_TIME)
            clock.last_ms = now
            advanced = self._step(
                joiner.advance, group, state, clock.stream_time, _Originals([], ()), [], send
            )
            if advanced is None:  # the joiner raised: no more wake-ups until its next record
                bucket.due.pop(group, None)
            else:
                self._store(bucket, log, group, clock, advanced, now)
        self._store_bucket(bucket, log, stored)

    def _sender(self) -> Send:
        """Where a call's output rows go: the task's transaction, opened at its first call.

        Rows are handed to it as they are made, not yielded up through the call chain: a
        generator level costs a resumption per row.
        """
        if self.output is None:
            self.output = TaskOutput.of_task(self.spec)
            self.output.open()  # now, so that a replay knows at once it writes nothing
        return self.output.send_row

    def _counts(self) -> Iterator[SparkRow]:
        """Hand the call's counts (records, dead letters, ``ctx.count``) to the sink.

        With them go the source timestamps of its output records (:mod:`daemon.service.latency`)
        and its inputs' newest event times. A replay that writes nothing counts nothing: its
        counts were reported the first time.
        """
        output = self.output
        metrics = self.plan.joiner.context.metrics
        counts: dict[str, Any] = {"joiner": dict(metrics)}
        metrics.clear()
        stamps, newest = self._stamps, self._newest
        self._stamps, self._newest = {}, {}
        if output is None or output.skipped:
            return
        counts.update(records=output.records, dead_letters=output.dead_letters)
        output.records, output.dead_letters = {}, {}
        if stamps:
            counts["stamps"] = {topic: compact(times) for topic, times in stamps.items()}
        if newest:
            inputs = self.plan.inputs
            counts["event_time"] = {inputs[index][0]: ms for index, ms in newest.items()}
        if any(counts.values()):
            row = Output(COUNTS_TOPIC, None, json.dumps(counts).encode("utf-8"), None)
            yield SparkRow(**row._asdict())

    def _load_bucket(self) -> tuple[Bucket, StashLog, bytes | None]:
        """The bucket, its stash log for this call, and its stored bytes (None: none yet)."""
        blob = self.state.get()
        stored = blobs.decompress(blob[0]) if blob else None
        bucket = decode_bucket(stored) if stored else Bucket()
        return bucket, StashLog(self.stash_chunks, bucket), stored

    def _store_bucket(self, bucket: Bucket, log: StashLog, stored: bytes | None) -> None:
        """Write the bucket back unless ``stored`` holds it already; keep one timer.

        The timer is at or before the earliest key's due time: it moves only to an earlier
        time. Keys that a batch touches are due later than before (a window key a minute after
        its last record), and moving the timer after them cost two calls to the JVM per
        bucket in nearly every batch, about a fifth of a window task; a timer that fires
        before any key is due costs a read of the bucket and a new timer, once in a while.

        A call that changed no key (a lookup's stream records read the table value and leave
        it) encodes the bucket into the bytes it loaded: writing them again would cost a round
        trip to the JVM with the whole blob, and the state store a changelog entry.
        """
        log.flush()
        earliest = min(bucket.due.values(), default=None)
        if bucket.timer_ms is not None and (earliest is None or earliest < bucket.timer_ms):
            self.handle.deleteTimer(bucket.timer_ms)
            bucket.timer_ms = None
        if bucket.timer_ms is None and earliest is not None:
            self.handle.registerTimer(earliest)
            bucket.timer_ms = earliest
        if bucket.keys:
            blob = encode_bucket(bucket)
            if blob != stored:
                self.state.update((blobs.compress(blob),))
        elif stored is not None:
            self.state.clear()

    def _load(self, bucket: Bucket, log: StashLog, group: str, now: int) -> tuple[KeyClock, Any]:
        """A key's clock and state; a fresh start when it has none or it outlived its TTL."""
        entry = bucket.keys.get(group)
        if entry is not None:
            clock = KeyClock(entry[STREAM_TIME], entry[LAST_MS], entry[UPDATED_MS])
            state = log.loads(group, entry[STATE])
            # updated_ms 0: stored while the pipeline had no state_ttl, so unknown. The TTL
            # counts from this key's next update rather than dropping it unseen.
            if self.ttl_ms is None or not clock.updated_ms or now - clock.updated_ms < self.ttl_ms:
                return clock, state
            log.forget(group)
            del bucket.keys[group]
            bucket.due.pop(group, None)
        return KeyClock(), self.plan.joiner.initial_state()

    def _store(
        self,
        bucket: Bucket,
        log: StashLog,
        group: str,
        clock: KeyClock,
        state: Any,
        now: int,
        newest: int | None = None,
    ) -> None:
        """Keep a key's new state and clock (``newest``: its records' newest event time).

        The key's ``event_time`` moves to ``newest`` only if the state changed: a record that
        leaves the state as it was (a lookup's stream record) leaves the entry, and so the
        bucket's bytes, as they were.
        """
        joiner = self.plan.joiner
        # An ended key with nothing left stays, as its clock, so that its end stays final.
        if joiner.is_empty(state) and clock.stream_time != END_OF_TIME:
            log.forget(group)
            bucket.keys.pop(group, None)
            bucket.due.pop(group, None)
            return
        if self.ttl_ms is not None:
            clock.updated_ms = now
        due = []
        if self.wakes and (wakeup := joiner.wakeup_ms(state)) is not None:
            due.append(now + max(wakeup, 1))
        if self.ttl_ms is not None:
            due.append(now + self.ttl_ms)
        if due:
            bucket.due[group] = min(due)
        elif bucket.due:
            bucket.due.pop(group, None)
        pickled = log.dumps(state)
        before = bucket.keys.get(group)
        event_time = 0 if before is None else before[EVENT_TIME]
        if newest is not None and (before is None or before[STATE] != pickled):
            event_time = max(event_time, newest)
        bucket.keys[group] = (
            clock.stream_time,
            clock.last_ms,
            clock.updated_ms,
            event_time,
            pickled,
        )

    def _step(
        self,
        call: Callable[[str, Any, Any, JoinerContext], Iterable[Emit | DeadLetter]],
        group: str,
        state: Any,
        argument: Any,
        raw: _Originals,
        records: list[InputRecord],
        send: Send,
    ) -> Any:
        """Run one joiner call on the key's state; send its rows; return the state.

        ``call`` is the joiner's ``process`` (``argument``: the records) or ``advance``
        (``argument``: the event time to advance to).

        Returns None when the joiner raised: the records it was given are dead-lettered, and
        since the caller then stores nothing, the stored state stays as it was.
        """
        joiner = self.plan.joiner
        try:
            results = list(call(group, state, argument, joiner.context))
        except Exception as exc:
            reason = f"joiner {joiner.name!r} of plugin {self.plan.plugin!r} raised {exc!r}"
            for record in records:
                send(self._dead_letter(raw[_origin(record)], "JoinerFailed", reason))
            return None
        for result in results:
            if isinstance(result, Emit):
                send(self._emitted(result, raw))
            else:
                send(self._rejected(result, raw))
        return state

    def _output(self, emit: Emit, raw: _Originals) -> tuple[Any, ...]:
        """The row of an emitted record: :class:`Output`'s fields, as a plain tuple (see Send)."""
        topic, codec = self.plan.output_topic, self.plan.output_codec
        if emit.output is not None:
            topic, codec = (self.plan.outputs or {})[emit.output]
        try:
            value = None if emit.value is None else codec.encode(emit.value)
        except Exception as exc:
            # An output the schema rejects is the joiner's or the schema's fault: keep the
            # triggering record, with the reason, rather than lose it.
            if emit.source is None:
                raise
            reason = f"{type(exc).__name__}: {exc}"
            return self._rejected(DeadLetter(emit.source, reason, "UnencodableOutput"), raw)
        key = emit.key.encode("utf-8") if isinstance(emit.key, str) else emit.key
        source = emit.source
        if source is None:
            return (topic, key, value, None, None, None, None, None, None)
        if source.timestamp:
            stamps = self._stamps.get(topic)
            if stamps is None:
                stamps = self._stamps[topic] = []
            stamps.append(source.timestamp)
        return (
            topic,
            key,
            value,
            source.timestamp or None,
            source.topic,
            source.partition,
            source.offset,
            None,
            None,
        )

    def _keyed_output(self, emit: Emit, raw: _Originals) -> tuple[Any, ...]:
        """:meth:`_output` for a pipeline whose outputs write keys in Avro or JSON.

        Apart, so that the pipelines that write text keys (most) pay nothing for it.
        """
        writer = (self.plan.output_keys or {}).get(emit.output)
        if writer is None or emit.key is None:
            return self._output(emit, raw)
        try:
            key = writer.encode(emit.key)
        except Exception as exc:
            if emit.source is None:
                raise
            reason = f"key {emit.key!r}: {type(exc).__name__}: {exc}"
            return self._rejected(DeadLetter(emit.source, reason, "UnencodableOutput"), raw)
        return self._output(Emit(key, emit.value, emit.source, emit.output), raw)

    def _rejected(self, letter: DeadLetter, raw: _Originals) -> Output:
        """A dead letter for a record of this batch (its original bytes) or one from state."""
        row = raw.get(_origin(letter.record))
        if row is not None:
            return self._dead_letter(row, letter.kind, letter.reason)
        record = letter.record
        try:
            value = (
                None if record.value is None else self.plan.codecs[record.role].encode(record.value)
            )
        except Exception:  # e.g. a registry codec that only reads: keep the fields as JSON
            value = json.dumps(record.value, default=str).encode("utf-8")
        return Output(
            self.plan.dead_letter_topic,
            record.kafka_key,
            value,
            record.timestamp or None,
            *_origin(record),
            letter.kind,
            letter.reason,
        )

    def _dead_letter(self, row: Row, kind: str, reason: str) -> Output:
        """A dead letter of an input row of this batch: its original bytes, and why."""
        return Output(
            self.plan.dead_letter_topic,
            row.kafka_key,
            row.value,
            row.timestamp or None,
            self.plan.inputs[row.input][1],
            row.partition,
            row.offset,
            kind,
            reason,
        )

    def close(self) -> None:
        """Commit the task's output: it lands with the task's state, or neither does.

        Spark closes the operator after the task's last call (and on the driver, after
        asking for the state schemas, where nothing was written).
        """
        if self.output is not None:
            self.output.commit()


class _Originals:
    """The input rows of one key's call, found by origin when a dead letter needs their bytes.

    Indexed on first use: most calls never need it, and an index entry per record cost more
    than the rest of a record's bookkeeping.
    """

    def __init__(self, rows: list[Row], inputs: tuple[tuple[str, str], ...]) -> None:
        self._rows = rows
        self._inputs = inputs
        self._index: dict[tuple[str, int, int], Row] | None = None

    def get(self, origin: tuple[str, int, int]) -> Row | None:
        """The row a record of this call came from; None for a record from state."""
        if self._index is None:
            self._index = {
                (self._inputs[row.input][1], row.partition, row.offset): row
                for row in self._rows
                if row.input != CONTROL_INPUT
            }
        return self._index.get(origin)

    def __getitem__(self, origin: tuple[str, int, int]) -> Row:
        row = self.get(origin)
        if row is None:
            raise KeyError(origin)
        return row


def _decoder(codec: AvroCodec, envelope: Envelope | None) -> Callable[[bytes], Any]:
    """How an input's values are decoded: by its codec, then, with an envelope, unwrapped."""
    if envelope is None:
        return codec.decode
    return partial(_unwrapped, codec.decode)


def _unwrapped(decode: Callable[[bytes], Any], data: bytes) -> dict[str, Any] | None:
    """The row of a change event (None: a delete), decoded by ``decode``.

    Raises:
        ValueError: not a usable change event; the source dead-letters those, so this
            happens only to a record the source routed by its fields alone.
    """
    return unwrap(decode(data))


def _rows_of(packs: Iterator[SparkRow], newest: dict[int, int]) -> Iterator[Row]:
    """The records of the call's packs (:func:`~daemon.kafka.records.unpack`), by columns.

    Notes in ``newest`` each input's newest event time, a pack at a time (a pack's records
    come from one Kafka partition), leaving out end-of-input markers and unroutable records.
    """
    for pack in packs:
        records = unpack(pack.records)
        _note_newest(records, newest)
        columns = [records.column(name).to_pylist() for name in Row._fields]
        yield from map(_MAKE_ROW, zip(*columns, strict=True))


def _note_newest(records: pa.RecordBatch, newest: dict[int, int]) -> None:
    inputs = records.column("input")
    routed = pc.and_(pc.greater_equal(inputs, 0), pc.is_null(records.column("error")))
    times = pc.filter(records.column("event_time"), routed)
    if len(times):
        index = pc.filter(inputs, routed)[0].as_py()
        latest = pc.max(times).as_py()
        if latest > newest.get(index, latest - 1):
            newest[index] = latest


_MAKE_ROW = partial(tuple.__new__, Row)
"""``Row._make`` without its Python frame: zip's tuples always have every field."""


_EVENT_TIME_OF = attrgetter("event_time")
"""A record's event time, got in C: a generator over a key's records costs a resumption each."""


def _origin(record: InputRecord) -> tuple[str, int, int]:
    return (record.topic, record.partition, record.offset)
