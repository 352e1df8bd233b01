"""One operator of a chain: a joiner's stage run as one of several chained in one query.

A joiner that runs as a chain (:meth:`daemon.plugin.Joiner.chain`, ``lookup`` with
``tables``) gets one ``transformWithState`` operator per stage, and one more for the chain's
:attr:`~daemon.plugin.Chain.last` joiner when it has one, all in one streaming query
(:func:`daemon.pipeline.plan.start_query`). Each is grouped by the state bucket of its own
key, as a one-joiner query's operator is, and is a :class:`JoinerProcessor` with these
differences:

- What it hands on. An operator other than the last writes nothing to Kafka: its rows are
  packs (:class:`~daemon.model.wire.SourceRow`) for the next operator. They hold what its
  stage emitted, re-keyed by the next stage's key (:data:`~daemon.model.wire.PASSED_INPUT`),
  or by the stream record's identity for the last joiner
  (:data:`~daemon.model.wire.WITHDRAWN_INPUT` for withdrawals); the rows of later stages'
  tables and end-of-input markers, unchanged; and its dead letters
  (:data:`~daemon.model.wire.DEAD_INPUT`), which the last operator writes, so that a task has
  one transactional producer. Every pack range a call read is handed on (in an empty pack if
  need be), so the writing operator's batch marker records its share of the batch as a
  one-joiner query's does.
- What it takes. The stream's records (first stage only) enter the chain
  (:meth:`~daemon.plugin.Chain.enter`); its own table's rows are the stage's ``table``
  records; a passed record is read back (:meth:`~daemon.plugin.Chain.passed`), and one
  without a key here is answered at once (:meth:`~daemon.plugin.Chain.without_key`).
- Dead letters of records so far hold the stream record they carry
  (:meth:`~daemon.plugin.Chain.carried`), encoded with the stream's schema.

- Counts. Each stage's joiner counts are named ``TABLE.NAME`` (``customers.revisions``) and
  handed on (:data:`~daemon.model.wire.METRICS_INPUT`) to the writing operator, which
  reports them with its own: the names the plain replay of a chain gives them. The lines of
  failed joiner calls of earlier stages are not reported (their dead letters are written).
- Time. A stage with a ``grace`` wakes its quiet keys, one with a ``state_ttl`` expires its
  keys, by its buckets' timers, as a one-joiner operator does (:class:`JoinerProcessor`). What
  a timer lets out goes on to the next operator in the same micro-batch, as what a record
  lets out does (stamped by :meth:`~daemon.plugin.Chain.let_out`). The timers each operator's
  buckets hold after a call go on with its counts to the writing operator, which reports them
  for the planner's clock (:mod:`daemon.checkpoint.due_times`) under labels of their own
  (:meth:`ChainStep.timer_label`), with the batch's time if one fired (for its marker).
- In a lease (``daemon.continuous``), where every operator's state is in one worker, a record
  so far is answered at the next operator at once where its key only reads its state
  (:meth:`ChainProcessor.read_on`), and a stream record at every stage where each only adds a
  row (:meth:`ChainProcessor._straight`).

Why this module is long: what an operator of a chain takes, hands on, reads through and
writes are one protocol over one class's state (its packs, its held buckets, its answers),
called by Spark or by a lease; split, each part would reach into the others' attributes.
"""

from __future__ import annotations

import json
import pickle  # noqa: S403 - rows pickled by this query's own operators, never read from outside
from collections.abc import Iterator, Sequence
from dataclasses import replace
from itertools import islice
from typing import Any, NamedTuple

from pyspark.sql import Row as SparkRow

from daemon.model.headers import Headers, merge_headers
from daemon.model.keys import join_key
from daemon.model.record_route import bucket_of, field_at
from daemon.model.wire import (
    CONTROL_INPUT,
    DEAD_INPUT,
    DEAD_LETTER_ROUTE,
    INPUT,
    METRICS_INPUT,
    NO_KEY_ROUTE,
    PASSED_INPUT,
    SOURCE,
    WITHDRAWN_INPUT,
    InputRow,
    OutputRow,
)
from daemon.operator.bucket_store import Buckets
from daemon.operator.call_rows import Originals, origin, rows_of
from daemon.operator.chain_step import ChainStep
from daemon.operator.core import JoinerFailure
from daemon.operator.processor import JOINER_FAILED, At, JoinerProcessor
from daemon.operator.spec import OperatorPlan
from daemon.operator.stash_log import StashLog
from daemon.operator.state_format import Bucket
from daemon.plugin.joiner import (
    END_OF_TIME,
    Answer,
    DeadLetter,
    Emit,
    InputRecord,
    RowAnswer,
    emit_record,
    recast,
)
from daemon.sink.spec import OutputSpec

SETTLED_KEYS = 1 << 16
"""How many keys' answers an operator keeps for a lease's sub-batches (each holds the key's
row) before it forgets the older half (:meth:`ChainProcessor.settle`): a bound on what the
lease holds beside its state."""


class Passed(NamedTuple):
    """A row for the next operator, and the bucket it goes to."""

    bucket: int
    row: tuple[Any, ...]


class ChainProcessor(JoinerProcessor):
    """A :class:`JoinerProcessor` for one operator of a chain (see the module docstring)."""

    def __init__(self, plan: OperatorPlan, output: OutputSpec, step: ChainStep) -> None:
        super().__init__(plan, output)
        self.step = step

    def ready(self, buckets: Buckets) -> None:
        """Get ready for calls, with nothing handed on yet.

        Here, not in ``start``: a processor whose buckets are held in the process
        (``bench.stage_costs``) is made ready without Spark's handle.
        """
        super().ready(buckets)
        self._passing: list[Passed] = []
        self._call_ranges: set[str] = set()
        self._forwarded: dict[str, int] = {}
        """The earlier stages' counts that reached the writing operator since its last report."""
        self._fired: int | None = None
        """The batch's time, if a timer fired in this operator's call (for its report)."""
        self._timed_labels: set[int] = set()
        """The labels whose timer a timer call reported since the last report (see
        :meth:`_take_report`)."""
        self._stream_role = self.plan.inputs[self.step.stream_input][0]
        step = self.step
        self._reader = None if step.last_joiner else step.chain.reader(step.index)
        """How this stage answers a key from its state alone, if it can (:meth:`_read_through`)."""
        self._paths = () if step.last_joiner else step.chain.stages[step.index].paths
        """Where a partial has its key at this stage (:meth:`read_on`)."""
        self.onward: ChainProcessor | None = None
        """In a lease, the next operator, which answers a partial at once where it can
        (:meth:`read_on`); None: every partial is handed on in a pack."""
        self._settled: dict[str, Answer] = {}
        """Answers of keys whose state no row of the current sub-batch changes (:meth:`settle`)."""
        self._moving: set[str] | None = None
        """The keys this stage's own rows of the current sub-batch change (None: read none on)."""
        self._layout: list[tuple[str, Any, int]] | None = None
        """How :meth:`_straight_bytes` writes an output by fields (None: not known yet)."""

    # -- a call ----------------------------------------------------------------------------

    def handleInputRows(  # noqa: N802
        self,
        key: Any,
        rows: Iterator[SparkRow],
        timerValues: Any,  # noqa: N803
    ) -> Iterator[SparkRow]:
        """Apply the call's records; the last operator writes, the others hand packs on."""
        if self.step.writes:
            self._input_rows(key, rows, timerValues, self._sender())
            yield from self._counts()
            return
        self._input_rows(key, rows, timerValues, self._collect)
        yield from self._packs(int(key[0]))

    def _input_rows(
        self, key: Any, packs: Iterator[SparkRow], timer_values: Any, send: Any
    ) -> None:
        """Sort the call's rows: hand on, answer without a key, or group by key for the core."""
        step = self.step
        own = {step.table_input, step.stream_input if step.index == 0 else None} - {None}
        by_key: dict[str, list[InputRow]] = {}
        keyless: list[InputRow] = []
        self._send = send
        self._raw = Originals([], self.plan.inputs)
        ranges: set[str] = set()
        for row in rows_of(packs, self._newest, ranges):
            kind = row.input
            if kind == DEAD_INPUT:
                if step.writes:
                    send(_unpickled(row.value))
                else:
                    self._hand_on(key, row)
            elif kind == METRICS_INPUT:
                if step.writes:
                    self._take_report(json.loads(row.value or b"{}"))
                else:
                    self._hand_on(key, row)
            elif kind == CONTROL_INPUT:
                if not step.last_joiner:
                    by_key.setdefault(row.key, []).append(row)  # this stage's key ends
                if step.index + 1 < step.stages:
                    self._hand_on(key, row)  # and each later stage's of that key
            elif kind == WITHDRAWN_INPUT and not step.last_joiner:
                self._hand_on(key, row)
            elif kind >= 0 and kind not in own:
                self._hand_on(key, row)  # a later stage's table row
            elif row.key == DEAD_LETTER_ROUTE:
                if kind == step.stream_input and (row.error or "").startswith("MissingKey"):
                    keyless.append(row)  # no key in the first table: answered without one
                else:
                    kind_name, _, reason = (row.error or "Error: unknown").partition(": ")
                    send(self._dead_letter(row, kind_name, reason))
            elif row.key == NO_KEY_ROUTE:
                keyless.append(row)
            else:
                by_key.setdefault(row.key, []).append(row)
        ranges.discard("")  # the packs of a timer's call, which read no range
        if step.writes:  # its marker records them; an earlier operator hands them on
            self._covered |= ranges
        self._call_ranges |= ranges
        for row in keyless:
            record = self._record(row, "")
            if record is not None:
                self.send(self.rows([step.chain.without_key(step.index, record)]))
        if not by_key:
            return
        bucket, log, stored = self.buckets.load(key)
        now = timer_values.getCurrentProcessingTimeInMs()
        if self._reader is not None:
            by_key = self._read_through(bucket, log, by_key, now)
        self.core.apply(bucket, log, self._decoded(by_key), now)
        self.buckets.save(key, bucket, log, stored)
        self._timers[int(key[0])] = bucket.timer_ms

    def _read_through(
        self, bucket: Bucket, log: StashLog, by_key: dict[str, list[InputRow]], now: int
    ) -> dict[str, list[InputRow]]:
        """Hand on the answers of keys that only read their state; the other keys, returned.

        A key whose rows are all the stage's stream records (records so far, or the stream's
        own at the first stage), whose input has not ended and whose stage answers from its
        state (:meth:`~daemon.plugin.Chain.reader`) leaves its state as it was, so the apply
        loop's per-record steps (a record, the stage's sort and call, an emit read back) would
        only make what the answer makes from each record's value. The order they go on in
        does not matter, as each next operator sorts its key's records; the last stage
        writes them in its own order (:meth:`_write_through`). In a lease a key's answer is
        kept for the next sub-batches (:meth:`_kept`).
        """
        kind = PASSED_INPUT if self.step.index else self.step.stream_input
        left: dict[str, list[InputRow]] = {}
        moving = self._moving
        for key, rows in by_key.items():
            answer = None
            if all(row.input == kind for row in rows):
                # In a lease: a key whose rows are all stream records has no table row in
                # the sub-batch (they would be in this call), so its answer may be kept.
                if moving is None:
                    answer = self._answer_at(bucket, log, key, now)
                else:
                    answer = self._kept(key, now, bucket, log)
            if answer is None:
                left[key] = rows
                continue
            if self.step.writes:
                self._write_through(key, rows, answer)
                continue
            if self.onward is not None and not self.step.index:
                self._raw = raw = Originals(rows, self.plan.inputs)
                for row in rows:
                    record = self._input_record(row, "stream", key)
                    if record is not None:
                        self._straight(record, answer, raw, now)
                continue
            for value, headers, kafka_key in self._values(rows, key):
                self._pass_on(*answer(value, headers), kafka_key, now)
        return left

    def _straight(self, record: InputRecord, answer: Answer, raw: Originals, now: int) -> None:
        """A stream record answered at every stage at once and written, where it can be.

        In a lease, at the first stage: where every later stage answers its key from a state
        the sub-batch does not change (:meth:`_answer_for`) and each answer only adds a row
        (:class:`~daemon.plugin.RowAnswer`), the output is the stream record's
        (:meth:`~daemon.plugin.Chain.output_base`) with each row added, written by the last
        operator with the record as its source, as the stages' calls would write it; no
        record so far is made. Else the record goes on from the last stage that answered it,
        its record so far made by the answers.
        """
        chain = self.step.chain
        answers = [answer]
        at: ChainProcessor = self
        if isinstance(answer, RowAnswer) and (base := chain.output_base(record)) is not None:
            value = {**base, answer.field: answer.row}
            while at.onward is not None:
                found = at.onward._answer_for(value, now)
                if found is None or not isinstance(found[1], RowAnswer):
                    break
                answers.append(found[1])
                value[found[1].field] = found[1].row
                at = at.onward
            if at.onward is None:
                at._write_straight(record, value, answers, raw)
                return
        entered = chain.enter(record)
        value, headers = entered.value or {}, entered.headers
        for answered in answers:
            value, headers = answered(value, headers)
        at._pass_on(value, headers, entered.kafka_key, now)

    def _write_straight(
        self, record: InputRecord, value: dict[str, Any], answers: list[Answer], raw: Originals
    ) -> None:
        """Write the output ``value`` of a record every stage answered (:meth:`_straight`).

        Each stage counts its answer, and carries its row's headers, as calling it would.
        """
        headers = record.headers
        for answered in answers:
            assert isinstance(answered, RowAnswer)  # noqa: S101 - _straight's condition
            answered.count()
            if answered.merges:
                headers = merge_headers(answered.headers, headers)
        self._send = self._sender()
        emit = emit_record(record.kafka_key, value, record, None, headers)
        encoded = self._straight_bytes(value, answers)
        if encoded is None:
            self.send([self._emitted(emit, raw)])
        else:
            self.send([self._output(emit, raw, written_value=encoded)])

    def _straight_bytes(self, value: dict[str, Any], answers: list[Answer]) -> bytes | None:
        """The output ``value`` of :meth:`_write_straight` in bytes, each row's made once.

        A row an answer adds is the same in every output it goes into, so its bytes are kept
        with the answer (:attr:`~daemon.plugin.RowAnswer.encoded`) and only the stream
        record's are written each time (:meth:`~daemon.formats.avro.codec.AvroCodec.field_writers`).
        None where the output is not written by fields (a select, a key format, a schema the
        compiled writer does not take, a field missing or left over, a value it declines):
        it is then written as any other output is, and dead-lettered as any other if refused.
        """
        layout = self._layout
        if layout is None:
            layout = self._layout = self._straight_layout(answers)
        if not layout or len(value) != len(layout):
            return None
        parts = []
        try:
            for name, write, place in layout:
                if place < 0:
                    parts.append(write(value[name]))
                    continue
                answered = answers[place]
                assert isinstance(answered, RowAnswer)  # noqa: S101 - _straight's condition
                if answered.encoded is None:
                    answered.encoded = write(answered.row)
                parts.append(answered.encoded)
        except Exception:  # noqa: BLE001 - the usual way writes it, or says why it cannot
            return None
        return self.plan.output_codec.joined(parts)

    def _straight_layout(self, answers: list[Answer]) -> list[tuple[str, Any, int]]:
        """Each output field's encoder and the stage whose answer adds it (-1: none).

        Each stage's answer adds the same field every time, so the first output tells. Empty
        where outputs are not written by fields (a select, a key format, no compiled writer).
        """
        if self.plan.output_keys or self._shapes.get(None) is not None:
            return []
        writers = self.plan.output_codec.field_writers()
        if writers is None:
            return []
        stages = {a.field: place for place, a in enumerate(answers) if isinstance(a, RowAnswer)}
        return [(name, write, stages.get(name, -1)) for name, write in writers]

    def _pass_on(
        self, value: dict[str, Any], headers: Headers | None, kafka_key: bytes | None, now: int
    ) -> None:
        """An answered partial: read on at the next operator if it can, else in a pack."""
        onward = self.onward
        if onward is None or not onward.read_on(value, headers, kafka_key, now):
            emit = emit_record(kafka_key, value, None, None, headers)
            self._passing.append(self._routed(emit, PASSED_INPUT))

    def _write_through(self, key: str, rows: list[InputRow], answer: Answer) -> None:
        """Write a key's answers at the last stage, in its apply order, as the core would.

        Each output's source is the record so far as the stage reads it (where its stream
        record was read), so it is written, and dead-lettered if its schema refuses it, as
        an answer of the apply loop is.
        """
        self._raw = Originals(rows, self.plan.inputs)
        records = [r for r in (self._record(row, key) for row in rows) if r is not None]
        emits = []
        for record in self.step.chain.ordered(self.step.index, records):
            value, headers = answer(record.value or {}, record.headers)
            emits.append(emit_record(record.kafka_key, value, record, None, headers))
        self.send(self.rows(emits))

    def _values(
        self, rows: list[InputRow], key: str
    ) -> Iterator[tuple[dict[str, Any], Headers | None, bytes | None]]:
        """Each record so far of ``rows`` as the stage reads it: value, headers, Kafka key.

        At the first stage, each stream record decoded (one that does not is dead-lettered)
        and entered into the chain (:meth:`~daemon.plugin.Chain.enter`); later, each pickled
        record so far as it was handed on.
        """
        if self.step.index:
            for row in rows:
                value, headers = _unpickled(row.value)
                yield value, headers, row.kafka_key
            return
        self._raw = Originals(rows, self.plan.inputs)
        for row in rows:
            record = self._record(row, key)
            if record is not None:
                yield record.value or {}, record.headers, record.kafka_key

    def handleExpiredTimer(  # noqa: N802
        self,
        key: Any,
        timerValues: Any,  # noqa: N803
        expiredTimerInfo: Any,  # noqa: N803
    ) -> Iterator[SparkRow]:
        """Keys of the bucket are due: as :class:`JoinerProcessor` wakes or expires them.

        An operator other than the last hands what they let out on to the next one.
        """
        if self.step.writes:
            yield from super().handleExpiredTimer(key, timerValues, expiredTimerInfo)
            return
        self._fired = timerValues.getCurrentProcessingTimeInMs()
        self._wake_up(key, timerValues, self._collect)
        yield from self._packs(int(key[0]))

    # -- read on within a lease (daemon.continuous.operators) -------------------------------

    @property
    def reads_state(self) -> bool:
        """Whether this stage answers a key from its state alone (:meth:`read_on` may)."""
        return self._reader is not None

    def settle(self, moving: set[str] | None) -> None:
        """A sub-batch begins whose rows of this stage's own input change keys ``moving``.

        Their answers are forgotten, and :meth:`read_on` leaves them to the stage's calls;
        None (an end of input among the rows): every answer is, and nothing is read on.
        """
        self._moving = moving
        settled = self._settled
        if moving is None:
            settled.clear()
            return
        for key in moving:
            settled.pop(key, None)
        if len(settled) > SETTLED_KEYS:  # the older half: the keys read since stay answered
            for key in list(islice(settled, len(settled) - SETTLED_KEYS // 2)):
                del settled[key]

    def read_on(
        self, value: dict[str, Any], headers: Headers | None, kafka_key: bytes | None, now: int
    ) -> bool:
        """Answer a partial the previous operator passes on at once; False: hand it on in a pack.

        In a lease every operator's buckets are in the worker (:mod:`daemon.continuous`),
        so a partial need not wait for this operator's call when its key here only reads its
        state (:meth:`_read_through`) and none of the sub-batch's rows change that state:
        the call would answer it with the same answer, as its order among the key's partials
        does not matter. What it answers goes on to the next operator the same way, or is
        written by the last (:meth:`_write_on`).
        """
        found = self._answer_for(value, now)
        if found is None:
            return False
        key, answer = found
        if self.step.writes:
            self._write_on(key, value, headers, kafka_key, answer)
        else:
            self._pass_on(*answer(value, headers), kafka_key, now)
        return True

    def _answer_for(self, value: dict[str, Any], now: int) -> tuple[str, Answer] | None:
        """The key of a record so far here, and its answer; None where only a call may answer.

        The key's answer is kept until a sub-batch brings a row for it (:meth:`settle`).
        """
        moving = self._moving
        if moving is None or self._reader is None:
            return None
        parts = [field_at(value, path) for path in self._paths]
        if None in parts:
            return None
        key = join_key(parts)
        if key in moving:
            return None
        answer = self._kept(key, now)
        return None if answer is None else (key, answer)

    def _kept(
        self, key: str, now: int, bucket: Bucket | None = None, log: StashLog | None = None
    ) -> Answer | None:
        """:meth:`_answer_at`, kept until a sub-batch brings a row for ``key`` (:meth:`settle`).

        ``bucket`` and ``log``: the key's, where the caller has them loaded.
        """
        answer = self._settled.get(key)
        if answer is None:
            if bucket is None or log is None:
                bucket, log, _ = self.buckets.load((bucket_of(key, self.step.buckets),))
            answer = self._answer_at(bucket, log, key, now)
            if answer is not None:
                self._settled[key] = answer
        return answer

    def _answer_at(self, bucket: Bucket, log: StashLog, key: str, now: int) -> Answer | None:
        """How this stage answers ``key`` from its state as it is (None: only a call can)."""
        assert self._reader is not None  # noqa: S101 - called only with one
        clock, state = self.core.load(bucket, log, key, now)
        if clock.stream_time == END_OF_TIME:
            return None
        return self._reader(state)

    def _write_on(
        self,
        key: str,
        value: dict[str, Any],
        headers: Headers | None,
        kafka_key: bytes | None,
        answer: Answer,
    ) -> None:
        """Write a partial read on to the last stage, as :meth:`_write_through` writes its own."""
        passed = self.step.chain.passed(emit_record(kafka_key, value, None, None, headers))
        record = recast(passed, "stream", key, passed.value)
        self._send, self._raw = self._sender(), Originals([], self.plan.inputs)
        answered, headers = answer(record.value or {}, record.headers)
        self.send(self.rows([emit_record(record.kafka_key, answered, record, None, headers)]))

    # -- driven by a long batch's task (daemon.continuous), before the writing operator ------

    def hand_on(self, key: Any, packs: Iterator[Any], now: int) -> Iterator[SparkRow]:
        """A call with bucket ``key``'s packs at processing time ``now``: the packs it hands on."""
        return self.handleInputRows(key, packs, At(now))

    def hand_on_woken(self, key: Any, now: int) -> Iterator[SparkRow]:
        """A call for bucket ``key``'s timer, due at ``now``: the packs it hands on."""
        return self.handleExpiredTimer(key, At(now), None)

    def _record(self, row: InputRow, key: str) -> InputRecord | None:
        """One row as a record of this operator's joiner (None: dead-lettered, undecodable)."""
        step, chain = self.step, self.step.chain
        if row.input in (PASSED_INPUT, WITHDRAWN_INPUT):
            value, headers = _unpickled(row.value)
            passed = chain.passed(emit_record(row.kafka_key, value, None, None, headers))
            return recast(passed, "joined" if step.last_joiner else "stream", key, passed.value)
        stream = row.input == step.stream_input
        record = self._input_record(row, "stream" if stream else "table", key)
        if record is None or not stream:
            return record
        return chain.enter(record)

    # -- what a call yields ----------------------------------------------------------------

    def rows(self, results: Sequence[Emit | DeadLetter]) -> list[tuple[Any, ...]]:
        """The rows of a call's yields: handed on, or, by the last operator, written."""
        step, chain = self.step, self.step.chain
        if not step.writes:
            made: list[tuple[Any, ...]] = []
            for result in results:
                if isinstance(result, DeadLetter):
                    made.append(self._rejected(result, self._raw))
                    continue
                if result.source is None:  # let out by a wake-up, an expiry or the end of input
                    result = chain.let_out(result, self._raw.newest_timestamp)
                if chain.withdrawn(result):
                    if chain.last is not None:
                        made.append(self._routed(result, WITHDRAWN_INPUT))
                else:
                    made.append(self._routed(result, PASSED_INPUT))
            return made
        # An output's source is where its stream record was read (Chain.passed places the
        # records so far there), with the timestamp of the record whose arrival made it.
        if step.last_joiner:
            return super().rows(results)
        written: list[Emit | DeadLetter] = []
        for result in results:
            if isinstance(result, DeadLetter):
                written.append(result)
                continue
            out = chain.output(result)
            if out is not None:
                written.append(out)
        return super().rows(written)

    def _routed(self, emit: Emit, kind: int) -> Passed:
        """An emit as a row for the next operator, in the bucket of its key there.

        The row is a plain tuple of :data:`~daemon.model.wire.INPUT`'s columns (a named
        tuple's constructor is a Python call, once per record at every stage).
        """
        step, chain = self.step, self.step.chain
        record = chain.routed(emit)
        nxt = step.index + 1
        if kind == WITHDRAWN_INPUT or nxt == step.stages:
            key = chain.identity(record)
            bucket_key = key
        else:
            parts = [field_at(record.value, path) for path in chain.stages[nxt].paths]
            key = NO_KEY_ROUTE if None in parts else join_key(parts)
            bucket_key = chain.identity(record) if key == NO_KEY_ROUTE else key
        kafka_key = emit.key.encode("utf-8") if isinstance(emit.key, str) else emit.key
        value = pickle.dumps((emit.value, emit.headers), pickle.HIGHEST_PROTOCOL)
        row = (kind, key, record.event_time, 0, 0, record.timestamp, kafka_key, value, None, None)
        return Passed(bucket_of(bucket_key, step.buckets), row)

    def send(self, rows: Sequence[tuple[Any, ...]]) -> None:
        """Write a call's rows, or, before the last operator, hand them on."""
        if self.step.writes:
            super().send(rows)
            return
        for row in rows:
            self._collect(row)

    def _collect(self, row: tuple[Any, ...]) -> None:
        """Keep a row for the next operator; a dead letter goes on to the writing one."""
        if isinstance(row, Passed):
            self._passing.append(row)
            return
        dead = InputRow(DEAD_INPUT, "", 0, 0, 0, 0, None, pickle.dumps(tuple(row)), None, None)
        self._passing.append(Passed(-1, dead))

    def _hand_on(self, key: Any, row: InputRow) -> None:
        """A row the next operator takes as it came, in the bucket it came in."""
        bucket = int(key[0]) if row.input != DEAD_INPUT else -1
        self._passing.append(Passed(bucket, tuple(row)))

    def _packs(self, bucket: int) -> Iterator[SparkRow]:
        """The call's rows for the next operator, a pack per bucket; every range read too.

        A dead letter goes in the call's own bucket. Each range the call read goes on with a
        pack (an empty one where it has none), for the writing operator's batch marker.
        """
        report: dict[str, Any] = {}
        counted = self._stage_metrics()
        if counted:
            report["counts"] = counted
        if self._timers:
            labelled = self.step.timer_label
            report["timers"] = {labelled(b): ms for b, ms in self._timers.items()}
        if self._fired is not None:
            report["fired"], self._fired = self._fired, None
        if report:
            blob = json.dumps(report).encode()
            counts = InputRow(METRICS_INPUT, "", 0, 0, 0, 0, None, blob, None, None)
            self._passing.append(Passed(-1, counts))
        for _ in super()._counts():  # the writing operator reports; this only resets
            pass
        passing, self._passing = self._passing, []
        ranges, self._call_ranges = sorted(self._call_ranges), set()
        by_bucket: dict[int, list[tuple[Any, ...]]] = {}
        for label, row in passing:
            by_bucket.setdefault(bucket if label < 0 else label, []).append(row)
        by_bucket.setdefault(bucket, [])
        first = ranges[0] if ranges else ""
        for label, rows in by_bucket.items():
            yield SparkRow(**SOURCE.row(label, _packed(rows), first)._asdict())
        for extra in ranges[1:]:
            yield SparkRow(**SOURCE.row(bucket, _packed([]), extra)._asdict())

    # -- counts ----------------------------------------------------------------------------

    def _stage_metrics(self) -> dict[str, int]:
        """The operator's joiner counts since the last report, named as reported; cleared.

        A stage's are named ``TABLE.NAME``; the last joiner's keep their names.
        """
        metrics = self.plan.joiner.context.metrics
        if self.step.last_joiner:
            named = dict(metrics)
        else:
            table = self.step.chain.stages[self.step.index].table
            named = {f"{table}.{name}": n for name, n in metrics.items()}
        metrics.clear()
        return named

    def _take_report(self, report: dict[str, Any]) -> None:
        """An earlier operator's report, taken in by the writing operator for its own.

        Its counts are added up; its timers join the writing operator's, to be reported as
        its own are. A bucket's timer call comes after its call with records in the same
        micro-batch, so what a timer call reports wins over the other, in whichever order
        the two reach this operator.
        """
        for name, n in report.get("counts", {}).items():
            self._forwarded[name] = self._forwarded.get(name, 0) + int(n)
        fired = report.get("fired")
        for text, ms in report.get("timers", {}).items():
            label = int(text)
            if fired is None and label in self._timed_labels:
                continue
            self._timers[label] = None if ms is None else int(ms)
            if fired is not None:
                self._timed_labels.add(label)
        if fired is not None and self.output is not None and self.output.timer_ms is None:
            self.output.timer_ms = int(fired)  # a timer's firing is part of the batch's share

    def merged_metrics(self) -> dict[str, int]:
        """The writing operator's counts to report: its own and the earlier stages'; cleared.

        Left in its joiner's metrics, where :meth:`JoinerProcessor._counts` reads them.
        """
        merged = self._stage_metrics()
        for name, n in self._forwarded.items():
            merged[name] = merged.get(name, 0) + n
        self._forwarded = {}
        self.plan.joiner.context.metrics.update(merged)
        return dict(merged)

    def _counts(self) -> Iterator[SparkRow]:
        """The call's counts, with the earlier stages' (see :meth:`merged_metrics`)."""
        self.merged_metrics()
        self._timed_labels = set()
        yield from super()._counts()

    # -- dead letters ----------------------------------------------------------------------

    def failed(self, failure: JoinerFailure) -> None:
        """A stage's call failed: dead-letter the stream records its records carry."""
        if not failure.records:
            super().failed(failure)
            return
        reason = failure.reason(self.plan.plugin)
        self._failures.append(reason)
        for record in failure.records:
            letter = DeadLetter(record, reason, JOINER_FAILED)
            self._send(self._rejected(letter, self._raw, failure.error))

    def _rejected(
        self, letter: DeadLetter, raw: Originals, error: BaseException | None = None
    ) -> OutputRow:
        """A dead letter; of a record so far, the stream record it carries."""
        record = letter.record
        if record.role in ("stream", "joined") and raw.get(origin(record)) is None:
            carried = self.step.chain.carried(record)
            letter = replace(letter, record=replace(carried, role=self._stream_role))
        return super()._rejected(letter, raw, error)


def _packed(rows: Sequence[tuple[Any, ...]]) -> bytes:
    """Rows of :data:`~daemon.model.wire.INPUT` as one pack's Arrow IPC bytes."""
    # A column at a time from the rows' transpose: indexing every row once per column cost
    # a Python step per cell.
    cells = list(zip(*rows, strict=True)) if rows else [()] * len(INPUT.columns)
    batch = INPUT.batch(**dict(zip(INPUT.columns, cells, strict=True)))
    data: bytes = batch.serialize().to_pybytes()
    return data


def _unpickled(blob: bytes | None) -> Any:
    """A value an operator of this query pickled into a row."""
    if blob is None:
        raise ValueError("a chain's row without its pickled value")
    return pickle.loads(blob)  # noqa: S301 - see the import
