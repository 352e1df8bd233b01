"""The joiner operator: a ``transformWithState`` processor that runs any :class:`Joiner`.

Records of a micro-batch arrive grouped by state bucket (a hash of the join key into the
pipeline's ``state_buckets``), packed many to a row by the source
(:class:`~daemon.model.wire.SourceRow`). The processor is the Spark side of the engine: it
decodes a call's records by join key, loads the bucket from Spark's state store
(:mod:`daemon.operator.bucket_store`, which says why buckets), hands both to the engine core
(:class:`~daemon.operator.core.EngineCore`: apply order, each key's clock, end of input,
state TTL, wake-ups), stores the bucket back with one timer, and writes what the joiner
yielded to Kafka: Avro-encoded output records with provenance headers, and dead letters
with their original bytes and the reason. A joiner call that fails (raises, or yields what
cannot be written) does not stop the pipeline: nothing it yielded is written, its records go
to the dead-letter topic as ``JoinerFailed`` with the reason (an ``advance``, which has none,
writes one dead letter keyed by the join key), and the key's state stays as it was
(:mod:`daemon.operator.core`). The counts row tells the sink, which logs the batch's first
failure once it commits.

Why the operator writes, not a sink after it: handing records on to a sink costs two more
crossings between Python and the JVM, one out of this worker and one into the sink's, which
cost more than the writing. The task's records go into one Kafka
transaction (:class:`~daemon.sink.task_output.TaskOutput`), committed when Spark closes the
operator at the end of the task, just before Spark commits the task's state; a replay of a
batch whose transaction landed recomputes the state and writes nothing. What reaches the
sink is one row of counts per call, for the metrics.

Why packs: see :class:`~daemon.model.wire.SourceRow`. The processor reads a pack's records
a column at a time, as named tuples. Why the Row-based ``transformWithState`` and not
``transformWithStateInPandas``: PySpark's Row flavour converts each cell one Arrow scalar at a
time, which was too slow when each record was a row, but a call now gets a few packs; the
pandas flavour built frames for them and for each call's counts row, which made the latency
run's batches slower.

Time: when the joiner wants a wake-up (:meth:`Joiner.wakeup_ms`) or the key's state has a
TTL, the bucket notes when the key is due (:mod:`daemon.operator.core`), and the bucket store
keeps one processing-time timer at or before its earliest due key; when it fires, the core
ticks the bucket. Each call's counts row says which timer its bucket holds after it, so that
the planner's clock makes a batch only when one is due (:mod:`daemon.checkpoint.due_times`). An
end-of-input marker row (see :data:`daemon.model.wire.CONTROL_INPUT`) ends its key's input,
after the records of its micro-batch.

Why this module is long: it is Spark's side of every call (input rows, initial state, timers,
close) and the one place a joiner's results become output rows and dead letters, which a
continuous mode's task (``daemon.continuous``) drives too; split, each half would need the
other's private state.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from functools import cached_property, partial
from typing import Any

from pyspark.sql import Row as SparkRow
from pyspark.sql.streaming import StatefulProcessor, StatefulProcessorHandle

from daemon import secrets
from daemon.errors import SchemaRegistryUnavailableError
from daemon.formats.avro.codec import AvroCodec
from daemon.model.envelope import Envelope, unwrap
from daemon.model.headers import Carrier, carrier, dead_letter_headers, reads_headers
from daemon.model.headers import pack as pack_headers
from daemon.model.latency import compact
from daemon.model.wire import (
    CONTROL_INPUT,
    DEAD_LETTER_ROUTE,
    FAILURES_REPORTED,
    OUTPUT,
    CallCounts,
    InputRow,
    OutputRow,
    counts_row,
)
from daemon.operator.bucket_store import Buckets, BucketStore
from daemon.operator.call_rows import Originals, origin, rows_of
from daemon.operator.core import ContractBreach, EngineCore, JoinerFailure, KeyBatch
from daemon.operator.held_records import HeldRecords
from daemon.operator.spec import OperatorPlan
from daemon.operator.state_format import decode_portable, entry_bytes
from daemon.operator.state_vars import StateVariables, declare
from daemon.plugin.joiner import DeadLetter, Emit, InputRecord, input_record
from daemon.sink.spec import OutputSpec
from daemon.sink.task_output import TaskOutput
from daemon.spark.worker_gc import freeze_loaded

JOINER_FAILED = "JoinerFailed"
"""The dead-letter class of a joiner call that failed (:class:`JoinerFailure`)."""
_STAMPED = OUTPUT.position("source_topic")
_ERROR_CLASS = OUTPUT.position("error_class")
_TIMESTAMP = OUTPUT.position("timestamp")

Send = Callable[[tuple[Any, ...]], None]
"""Takes one output row: an :class:`~daemon.model.wire.OutputRow`, or a plain tuple of its
columns in order (the hot path builds those: a named tuple's constructor is a Python call)."""


class JoinerProcessor(StatefulProcessor):
    """Runs a joiner over the records of one state bucket per call (see the module docstring)."""

    def __init__(self, plan: OperatorPlan, output: OutputSpec) -> None:
        self.plan = plan
        self.spec = output
        self._secrets = secrets.remembered()
        """The driver's secrets, for the workers to mask in dead letters' reasons: pickled
        with the processor, never put in a Spark option (:mod:`daemon.secrets`)."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        """Declare the state variables (:mod:`.state_vars`) and get ready for calls."""
        self.start(handle, declare(handle))

    def start(self, handle: StatefulProcessorHandle, variables: StateVariables) -> None:
        """Get ready for calls, with the state variables ``init`` declared on ``handle``."""
        freeze_loaded()  # a Spark worker's: what it loaded stays for its life
        self.handle = handle
        self.ready(BucketStore(handle, variables, self.plan))

    def ready(self, buckets: Buckets) -> None:
        """Get ready for calls whose buckets ``buckets`` loads and saves.

        Spark's state store's (:meth:`start`), or a long batch's buckets held in the worker
        (``daemon.continuous``).
        """
        secrets.remember_values(self._secrets)
        self.output: TaskOutput | None = None  # opened at the task's first call
        self._covered: set[str] = set()
        """The ranges the task's packs were read over: its share of the batch, which its
        output's marker records (:attr:`TaskOutput.covered` is this set)."""
        self._stamps: dict[str, list[int]] = {}
        """Source timestamps of the call's output records, by topic (``daemon.model.latency``)."""
        self._failures: list[str] = []
        """The lines of the joiner calls that failed since the last counts row."""
        self._replay_told = False
        """Whether a counts row said the task replays a committed batch (said once a task)."""
        self._newest: dict[int, int] = {}
        """The newest event time of the call's records, by input (event-time lag)."""
        self._timers: dict[int, int | None] = {}
        """The timer each bucket stored since the last counts row holds (None: none), for the
        planner's clock (:mod:`daemon.checkpoint.due_times`)."""
        self.buckets = buckets
        """Where a call's bucket is loaded from and written back to, once per call."""
        envelopes = self.plan.envelopes or {}
        self._decoders = tuple(
            _decoder(self.plan.codecs[role], envelopes.get(role)) for role, _ in self.plan.inputs
        )
        """Each input's value decoder, by a row's ``input``: its codec's, unwrapping the
        row of an envelope."""
        self._emitted = self._keyed_output if self.plan.output_keys else self._output
        self._shapes = {name: select.shape for name, select in (self.plan.selects or {}).items()}
        """The compiled select of each output that has one (its main one, and the retractions
        of its answers), by output name (None: the main one)."""
        policy = self.plan.headers
        self._carry: Carrier | None = carrier(policy) if reads_headers(policy) else None
        """What a record keeps of its headers for its outputs (None: the source read none)."""
        self._send: Send = _unsent
        self._raw = Originals([], ())
        """Where the current call's rows go, and its input rows by origin (for dead letters)."""
        self.core = EngineCore(self.plan.joiner, self)
        """The apply loop; made here, on the executor: it holds this processor's methods."""

    def handleInputRows(  # noqa: N802
        self,
        key: Any,
        rows: Iterator[SparkRow],
        timerValues: Any,  # noqa: N803
    ) -> Iterator[SparkRow]:
        """Apply this micro-batch's packs of one bucket, key by key."""
        self._input_rows(key, rows, timerValues, self._sender())
        yield from self._counts()

    def _input_rows(
        self, key: Any, packs: Iterator[SparkRow], timer_values: Any, send: Send
    ) -> None:
        """Group the call's records by key and hand them to the core (:mod:`.core`)."""
        by_key: dict[str, list[InputRow]] = {}
        for row in rows_of(packs, self._newest, self._covered):
            if row.key == DEAD_LETTER_ROUTE:
                kind, _, reason = (row.error or "Error: unknown").partition(": ")
                send(self._dead_letter(row, kind, reason))
            else:
                by_key.setdefault(row.key, []).append(row)
        if not by_key:
            return
        self._send = send
        bucket, log, stored = self.buckets.load(key)
        now = timer_values.getCurrentProcessingTimeInMs()
        self.core.apply(bucket, log, self._decoded(by_key), now)
        self.buckets.save(key, bucket, log, stored)
        self._timers[int(key[0])] = bucket.timer_ms

    def _input_record(self, row: InputRow, role: str, key: str) -> InputRecord | None:
        """A source row as the joiner's record of ``role`` (None: undecodable, dead-lettered).

        Raises:
            SchemaRegistryUnavailableError: the registry did not answer; the record is fine,
                so the batch fails and is retried rather than the record dead-lettered.
        """
        topic = self.plan.inputs[row.input][1]
        try:
            value = None if row.value is None else self._decoders[row.input](row.value)
        except SchemaRegistryUnavailableError:
            raise
        except Exception as exc:  # the source read only the key and time fields
            self._send(self._dead_letter(row, "UndecodableRecord", str(exc), exc))
            return None
        carry = self._carry
        return input_record(
            role,
            key,
            value,
            row.event_time,
            topic,
            row.partition,
            row.offset,
            row.kafka_key,
            row.timestamp,
            None if row.headers is None or carry is None else carry(row.headers),
        )

    def _decoded(self, by_key: dict[str, list[InputRow]]) -> Iterator[KeyBatch]:
        """Each key's part of the call, decoded when the core comes to the key.

        So one key's decoded records (and their values) are alive at a time, not the whole
        call's. An end-of-input marker row ends its key's input; a record that does not
        decode is dead-lettered here.
        """
        inputs = self.plan.inputs
        for key, rows in by_key.items():
            records: list[InputRecord] = []
            end_of_input = False
            for row in rows:
                if row.input == CONTROL_INPUT:
                    end_of_input = True
                    continue
                record = self._record(row, key)
                if record is not None:
                    records.append(record)
            self._raw = Originals(rows, inputs)
            yield key, records, end_of_input

    def _record(self, row: InputRow, key: str) -> InputRecord | None:
        """A row as the joiner's record (None: undecodable, dead-lettered)."""
        return self._input_record(row, self.plan.inputs[row.input][0], key)

    def handleInitialState(  # noqa: N802
        self,
        key: Any,
        initialState: SparkRow,  # noqa: N803
        timerValues: Any,  # noqa: N803
    ) -> None:
        """Take in a bucket's keys moved from another checkpoint (``daemon.state.seed``).

        Spark calls this in a new checkpoint's first micro-batch only, before that batch's
        records, with one row per bucket: its keys and each key's portable entry
        (:func:`~daemon.operator.state_format.encode_portable`). Each key's state is stored
        anew, its stashes' values in this bucket's log.
        """
        bucket, log, stored = self.buckets.load(key)
        for item in initialState.keys:  # PySpark gives the structs as dicts
            join_key = item["key"]
            clock, due, state = decode_portable(bytes(item["entry"]))
            before = bucket.keys.get(join_key)
            entry = bucket.keys[join_key] = (*clock, log.dumps(state))
            bucket.grown += entry_bytes(join_key, entry) - entry_bytes(join_key, before)
            if due is not None:
                bucket.due[join_key] = due
            bucket.touch(join_key)
        self.buckets.save(key, bucket, log, stored)
        self._timers[int(key[0])] = bucket.timer_ms

    def handleExpiredTimer(  # noqa: N802
        self,
        key: Any,
        timerValues: Any,
        expiredTimerInfo: Any,  # noqa: N803
    ) -> Iterator[SparkRow]:
        """Keys of the bucket have been quiet for their wake-up time: move their event time on.

        A key whose state outlived ``state_ttl`` is flushed to the end of time and dropped
        instead (:meth:`EngineCore.load`).
        """
        send = self._sender()
        # A timer's firing depends on the batch's time, which its marker records.
        self._task_output().timer_ms = timerValues.getCurrentProcessingTimeInMs()
        self._wake_up(key, timerValues, send)
        yield from self._counts()

    def _wake_up(self, key: Any, timer_values: Any, send: Send) -> None:
        bucket, log, stored = self.buckets.load(key)
        bucket.timer_ms = None  # fired, so gone: the stored bucket must say so
        bucket.changed = True
        self._send, self._raw = send, Originals([], ())
        self.core.tick(bucket, log, timer_values.getCurrentProcessingTimeInMs())
        self.buckets.save(key, bucket, log, stored)
        self._timers[int(key[0])] = bucket.timer_ms

    # -- driven by a long batch's task (daemon.continuous), not by Spark's calls -------------

    def write_to(self, output: TaskOutput) -> None:
        """Write the coming calls' rows through ``output``: a sub-batch's, opened already."""
        self.output = output
        self._covered = output.covered

    def apply(self, key: Any, packs: Iterator[Any], now: int) -> None:
        """A call with bucket ``key``'s packs at processing time ``now``."""
        self._input_rows(key, packs, At(now), self._sender())

    def wake(self, key: Any, now: int) -> None:
        """A call for bucket ``key``'s timer, due at processing time ``now``."""
        self._wake_up(key, At(now), self._sender())

    def counts(self) -> list[SparkRow]:
        """The counts rows of the calls since the last ones (see :meth:`_counts`)."""
        return list(self._counts())

    def _sender(self) -> Send:
        """Where a call's output rows go: the task's output, opened at its first call.

        Rows are handed to it as they are made, not yielded up through the call chain: a
        generator level costs a resumption per row.
        """
        return self._task_output().send_row

    def _task_output(self) -> TaskOutput:
        """The task's output, opened at its first call: its producer fences any earlier one."""
        if self.output is None:
            self.output = TaskOutput.of_task(self.spec)
            self.output.covered = self._covered  # noted by the calls, recorded by its marker
            self.output.open()  # now, so that a replay knows at once it writes nothing
        return self.output

    def _counts(self) -> Iterator[SparkRow]:
        """Hand the call's counts (records, dead letters, ``ctx.count``) to the sink.

        With them go the source timestamps of its output records (:mod:`daemon.model.latency`)
        and its inputs' newest event times. A replay that writes nothing counts nothing: its
        counts were reported the first time. The bucket's timer goes along either way: it is
        a fact about the state the batch commits, the same in a replay, not a count; and so
        does the one count a replay makes: that it found its batch committed.
        """
        output = self.output
        metrics = self.plan.joiner.context.metrics
        counts: CallCounts = {"joiner": dict(metrics)}
        metrics.clear()
        stamps, newest, timers = self._stamps, self._newest, self._timers
        self._stamps, self._newest, self._timers = {}, {}, {}
        loads, self.buckets.loads = self.buckets.loads, {}
        failures, self._failures = self._failures, []
        if output is None or output.skipped:
            replayed: CallCounts = {"timers": timers} if timers else {}
            if output is not None and not self._replay_told:
                # Counted once a task, so that a verify (or an operator) sees replays found
                # their batch committed: the path exactly-once rests on after a crash.
                replayed["replayed"], self._replay_told = 1, True
            if replayed:
                yield SparkRow(**counts_row(replayed)._asdict())
            return
        if timers:
            counts["timers"] = timers
        if failures:
            counts["failed_calls"] = len(failures)
            counts["failures"] = failures[:FAILURES_REPORTED]
        counts["records"], counts["dead_letters"] = output.records, output.dead_letters
        output.records, output.dead_letters = {}, {}
        if stamps:
            counts["stamps"] = {topic: compact(times) for topic, times in stamps.items()}
        if newest:
            inputs = self.plan.inputs
            counts["event_time"] = {inputs[index][0]: ms for index, ms in newest.items()}
        if loads:
            counts["cache"] = loads
        if any(counts.values()):
            yield SparkRow(**counts_row(counts)._asdict())

    def rows(self, results: Sequence[Emit | DeadLetter]) -> list[tuple[Any, ...]]:
        """The output rows of a call's yields, none sent yet (the core's ``Outlet``).

        Raises:
            ValueError: an output the pipeline does not configure, or a value or key that
                the output's schema refuses where no input record can be dead-lettered
                instead: the call fails as a whole.
        """
        raw, emitted, rejected = self._raw, self._emitted, self._rejected
        return [
            emitted(result, raw) if isinstance(result, Emit) else rejected(result, raw)
            for result in results
        ]

    def send(self, rows: Sequence[tuple[Any, ...]]) -> None:
        """Write a completed call's rows, noting the source timestamps of its outputs."""
        send, stamps = self._send, self._stamps
        for row in rows:
            send(row)
            # An output made from an input record (a dead letter has an error class).
            if row[_STAMPED] is not None and row[_ERROR_CLASS] is None and row[_TIMESTAMP]:
                topic = row[0]
                times = stamps.get(topic)
                if times is None:
                    times = stamps[topic] = []
                times.append(row[_TIMESTAMP])

    def failed(self, failure: JoinerFailure) -> None:
        """A joiner call failed: dead-letter the records it was given, with their original bytes.

        An ``advance`` has none: its dead letter is keyed by the join key, with no value.
        """
        reason = failure.reason(self.plan.plugin)
        self._failures.append(reason)
        if not failure.records:
            key = failure.key.encode("utf-8")
            timestamp = self._raw.newest_timestamp
            dead = self.plan.dead_letter_topic
            headers = dead_letter_headers(None, JOINER_FAILED, reason, failure.error)
            self._send(
                OutputRow(
                    dead,
                    key,
                    None,
                    timestamp,
                    None,
                    None,
                    None,
                    JOINER_FAILED,
                    secrets.redact(reason),
                    headers,
                )  # fmt: skip
            )
            return
        for record in failure.records:
            row = self._raw[origin(record)]
            self._send(self._dead_letter(row, JOINER_FAILED, reason, failure.error))

    def _output(
        self,
        emit: Emit,
        raw: Originals,
        written_key: bytes | None = None,
        written_value: bytes | None = None,
    ) -> tuple[Any, ...]:
        """The row of an emitted record: an :class:`OutputRow` as a plain tuple (see Send).

        ``written_key``: the Kafka key as its output's key format writes it, where not as
        text (:meth:`_keyed_output`); a select reads the key the joiner gave all the same.
        ``written_value``: the value already encoded, where the caller could do it cheaper.
        """
        topic, codec = self.plan.output_topic, self.plan.output_codec
        if emit.output is not None:
            configured = (self.plan.outputs or {}).get(emit.output)
            if configured is None:
                raise ValueError(
                    f"it emitted to output {emit.output!r}, which the pipeline does not "
                    f"configure ([pipeline.outputs.{emit.output}])"
                )
            topic, codec = configured
        value = written_value
        try:
            if value is None and emit.value is not None:
                value = self._encoded(emit.value, emit, codec, raw)
        except Exception as exc:
            # Records held in state since before their input's schema evolved: read them
            # with the schema they have now, as Avro reads old data (.held_records).
            value = self._evolved(emit, codec, raw)
            if value is None:
                # An output the schema rejects (or its select cannot shape) is the joiner's,
                # the select's or the schema's fault: keep the triggering record, with the
                # reason, rather than lose it.
                reason = f"{type(exc).__name__}: {exc}"
                refused = "the schema of its output refuses a value it emitted"
                return self._unencodable(emit, raw, refused, reason, exc)
        key = written_key
        if key is None:
            key = emit.key.encode("utf-8") if isinstance(emit.key, str) else emit.key
        source = emit.source
        carried = emit.headers
        if source is None:
            # No input record made it (a revision at the end of input): the newest timestamp
            # of the key's rows in this call, its end-of-input marker's, so that the output is
            # the same however the input fell into micro-batches; at a wake-up (no rows) the
            # time of writing.
            headers = None if carried is None else pack_headers(carried)
            return (topic, key, value, raw.newest_timestamp, None, None, None, None, None, headers)
        if carried is None:
            carried = source.headers
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
            None if carried is None else pack_headers(carried),
        )

    def _encoded(
        self, record: dict[str, Any], emit: Emit, codec: AvroCodec, raw: Originals
    ) -> bytes:
        """An emitted output record in bytes, through the pipeline's select if it has one."""
        shape = self._shapes.get(emit.output) if self._shapes else None
        if shape is not None:  # the pipeline's select (daemon.model.selection)
            record = shape(record, emit.key, _timestamp(emit.source, raw))
        return codec.encode(record)

    @cached_property
    def _held(self) -> HeldRecords:
        """Which output fields hold input records, and each input's schema (made when needed)."""
        return HeldRecords(self.plan.joiner, self.plan.codecs, self.plan.envelopes)

    def _evolved(self, emit: Emit, codec: AvroCodec, raw: Originals) -> bytes | None:
        """An output value encoded with its input records conformed; None: it still fails."""
        conformed = None if emit.value is None else self._held.conformed(emit.value, emit.output)
        if conformed is None:
            return None
        try:
            return self._encoded(conformed, emit, codec, raw)
        except Exception:
            return None

    def _keyed_output(self, emit: Emit, raw: Originals) -> tuple[Any, ...]:
        """:meth:`_output` for a pipeline whose outputs write keys in Avro or JSON.

        Apart, so that the pipelines that write text keys (most) pay nothing for it.
        """
        writer = (self.plan.output_keys or {}).get(emit.output)
        if writer is None or emit.key is None:
            return self._output(emit, raw)
        try:
            key = writer.encode(emit.key)
        except Exception as exc:
            reason = f"key {emit.key!r}: {type(exc).__name__}: {exc}"
            refused = "its output's key format refuses a key it emitted"
            return self._unencodable(emit, raw, refused, reason, exc)
        return self._output(emit, raw, key)

    def _unencodable(
        self, emit: Emit, raw: Originals, refused: str, reason: str, error: Exception
    ) -> OutputRow:
        """An ``UnencodableOutput`` dead letter of the emit's source record.

        Raises:
            ContractBreach: the emit has no source record to dead-letter: the call fails.
        """
        if emit.source is None:
            raise ContractBreach(f"{refused} ({reason}), which no input record made") from error
        letter = DeadLetter(emit.source, reason, "UnencodableOutput")
        return self._rejected(letter, raw, error)

    def _rejected(
        self, letter: DeadLetter, raw: Originals, error: BaseException | None = None
    ) -> OutputRow:
        """A dead letter for a record of this batch (its original bytes) or one from state.

        ``error``: the exception that made it, for its KIP-1034 headers.
        """
        row = raw.get(origin(letter.record))
        if row is not None:
            return self._dead_letter(row, letter.kind, letter.reason, error)
        record = letter.record
        value = (
            None
            if record.value is None
            else self._held.encoded(record.role, record.value, self.plan.codecs[record.role])
        )
        # From state: the headers it kept (its outputs'), where the batch's own keep all.
        return OutputRow(
            self.plan.dead_letter_topic,
            record.kafka_key,
            value,
            record.timestamp or None,
            *origin(record),
            letter.kind,
            secrets.redact(letter.reason),
            dead_letter_headers(pack_headers(record.headers), letter.kind, letter.reason, error),
        )

    def _dead_letter(
        self, row: InputRow, kind: str, reason: str, error: BaseException | None = None
    ) -> OutputRow:
        """A dead letter of an input row of this batch: its original bytes and headers, and why.

        The reason is redacted: an exception's message may quote a secret. ``error``: the
        exception that made it, when one did, for its KIP-1034 headers
        (:func:`~daemon.model.headers.error_headers`).
        """
        return OutputRow(
            self.plan.dead_letter_topic,
            row.kafka_key,
            row.value,
            row.timestamp or None,
            self.plan.inputs[row.input][1],
            row.partition,
            row.offset,
            kind,
            secrets.redact(reason),
            dead_letter_headers(row.headers, kind, reason, error),
        )

    def close(self) -> None:
        """Commit the task's output: it lands with the task's state, or neither does.

        Spark closes the operator after the task's last call (and on the driver, after
        asking for the state schemas, where nothing was written).
        """
        if self.output is not None:
            self.output.commit()


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


@dataclass(frozen=True)
class At:
    """A call's timer values at processing time ``now``, as Spark hands them to a call."""

    now: int

    def getCurrentProcessingTimeInMs(self) -> int:  # noqa: N802 - Spark's name
        """The call's processing time."""
        return self.now


def _unsent(row: tuple[Any, ...]) -> None:
    raise RuntimeError("an output row outside a call of the processor")


def _timestamp(source: InputRecord | None, raw: Originals) -> int | None:
    """An output's Kafka timestamp, as :meth:`JoinerProcessor._output` writes it (None: now)."""
    if source is None:
        return raw.newest_timestamp
    return source.timestamp or None
