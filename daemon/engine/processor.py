"""The joiner operator: a ``transformWithState`` processor that runs any :class:`Joiner`.

Rows of a micro-batch arrive grouped by join key. The processor decodes them, puts them in
apply order, loads the key's state (one pickled object), lets the joiner process them, stores
the state back, and turns what the joiner yielded into output rows for the Kafka sink: Avro-
encoded output records with provenance headers, and dead letters with their original bytes
and the reason. A joiner that raises does not stop the pipeline: that key's records go to the
dead-letter topic with the exception, and the key's state stays as it was.

Time: next to the joiner's state the processor keeps the key's clock: its latest event time,
the processing time of its last record, and the processing-time timer it registered for the
joiner's wake-up (:meth:`Joiner.wakeup_ms`). When that timer fires, the joiner's
:meth:`Joiner.advance` gets the latest event time plus the processing time that passed; an
end-of-input marker row (see :data:`daemon.kafka.records.CONTROL_ROLE`) advances the key to
:data:`END_OF_TIME`.
"""

from __future__ import annotations

import json
import pickle  # noqa: S403 - the state store holds only what this processor wrote
from collections.abc import Callable, Generator, Iterable, Iterator
from dataclasses import dataclass
from functools import partial
from typing import Any

from pyspark.sql import Row
from pyspark.sql.streaming import StatefulProcessor, StatefulProcessorHandle

from daemon.avro import AvroCodec
from daemon.joiners.base import END_OF_TIME, DeadLetter, Emit, InputRecord, Joiner, apply_order
from daemon.kafka.records import CONTROL_ROLE, DEAD_LETTER_ROUTE
from daemon.metrics_relay import JOINER_COUNTS_TOPIC


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


@dataclass
class KeyClock:
    """A key's time, stored with its state: see the module docstring."""

    stream_time: int = 0
    last_ms: int = 0
    timer_ms: int | None = None


def _header(name: str, value: object) -> dict[str, Any]:
    return {"key": name, "value": str(value).encode("utf-8")}


def _provenance(topic: str, partition: int, offset: int) -> list[dict[str, Any]]:
    return [
        _header("enrichd.source.topic", topic),
        _header("enrichd.source.partition", partition),
        _header("enrichd.source.offset", offset),
    ]


def _key_bytes(key: str | bytes | None) -> bytes | None:
    return key.encode("utf-8") if isinstance(key, str) else key


class JoinerProcessor(StatefulProcessor):
    """Runs a joiner over the records of one join key per call (see the module docstring)."""

    def __init__(self, plan: OperatorPlan) -> None:
        self.plan = plan

    def init(self, handle: StatefulProcessorHandle) -> None:
        """Declare the one state variable: the key's clock and the joiner's state, pickled."""
        self.handle = handle
        self.state = handle.getValueState(
            "joiner_state", "blob binary", self.plan.joiner.state_ttl_ms()
        )

    def handleInputRows(self, key: Any, rows: Iterator[Row], timerValues: Any) -> Iterator[Row]:  # noqa: N802, N803
        """Apply one key's rows of this micro-batch."""
        (group,) = key
        if group == DEAD_LETTER_ROUTE:
            for row in rows:
                kind, _, reason = (row.error or "Error: unknown").partition(": ")
                yield self._dead_letter(row, kind, reason)
            return
        records: list[InputRecord] = []
        raw: dict[tuple[str, int, int], Row] = {}
        end_of_input = False
        for row in rows:
            if row.role == CONTROL_ROLE:
                end_of_input = True
                continue
            raw[(row.topic, row.partition, row.offset)] = row
            try:
                value = None if row.value is None else self.plan.codecs[row.role].decode(row.value)
            except Exception as exc:  # the source decoded it once; this cannot differ
                yield self._dead_letter(row, "UndecodableRecord", str(exc))
                continue
            records.append(
                InputRecord(
                    role=row.role,
                    key=group,
                    value=value,
                    event_time=row.event_time,
                    topic=row.topic,
                    partition=row.partition,
                    offset=row.offset,
                    kafka_key=row.kafka_key,
                    timestamp=row.timestamp,
                )
            )
        joiner = self.plan.joiner
        clock, state = self._load()
        now = timerValues.getCurrentProcessingTimeInMs()
        if records:
            ordered = apply_order(records, joiner.roles, joiner.order)
            clock.stream_time = max(clock.stream_time, *(r.event_time for r in ordered))
            clock.last_ms = now
            call = partial(joiner.process, group, records=ordered, ctx=joiner.context)
            state = yield from self._step(state, call, raw, records)
            if state is None:
                return
        if end_of_input:
            clock.stream_time = END_OF_TIME
            call = partial(joiner.advance, group, to=END_OF_TIME, ctx=joiner.context)
            state = yield from self._step(state, call, raw, records)
            if state is None:
                return
        self._store(clock, state, now)
        yield from self._counts()

    def handleExpiredTimer(  # noqa: N802
        self,
        key: Any,
        timerValues: Any,
        expiredTimerInfo: Any,  # noqa: N803
    ) -> Iterator[Row]:
        """The key has been quiet for its wake-up time: move its event time on by as much."""
        (group,) = key
        joiner = self.plan.joiner
        clock, state = self._load()
        now = timerValues.getCurrentProcessingTimeInMs()
        clock.timer_ms = None  # fired, so gone
        clock.stream_time = min(clock.stream_time + max(now - clock.last_ms, 0), END_OF_TIME)
        clock.last_ms = now
        call = partial(joiner.advance, group, to=clock.stream_time, ctx=joiner.context)
        advanced = yield from self._step(state, call, {}, [])
        if advanced is not None:
            self._store(clock, advanced, now)
            yield from self._counts()

    def _counts(self) -> Iterator[Row]:
        """Hand what the joiner counted (``ctx.count``) to the sink, which adds it to metrics."""
        metrics = self.plan.joiner.context.metrics
        if metrics:
            value = json.dumps(metrics).encode("utf-8")
            metrics.clear()
            yield Row(
                topic=JOINER_COUNTS_TOPIC, key=None, value=value, headers=None, timestamp=None
            )

    def _load(self) -> tuple[KeyClock, Any]:
        blob = self.state.get() if self.state.exists() else None
        if blob:
            clock, state = pickle.loads(blob[0])  # noqa: S301
            return clock, state
        return KeyClock(), self.plan.joiner.initial_state()

    def _store(self, clock: KeyClock, state: Any, now: int) -> None:
        joiner = self.plan.joiner
        if joiner.is_empty(state):
            self._set_timer(clock, None)
            self.state.clear()
            return
        wakeup = joiner.wakeup_ms(state)
        self._set_timer(clock, None if wakeup is None else now + max(wakeup, 1))
        self.state.update((pickle.dumps((clock, state), protocol=pickle.HIGHEST_PROTOCOL),))

    def _set_timer(self, clock: KeyClock, at: int | None) -> None:
        if clock.timer_ms == at:
            return
        if clock.timer_ms is not None:
            self.handle.deleteTimer(clock.timer_ms)
        if at is not None:
            self.handle.registerTimer(at)
        clock.timer_ms = at

    def _step(
        self,
        state: Any,
        call: Callable[[Any], Iterable[Emit | DeadLetter]],
        raw: dict[tuple[str, int, int], Row],
        records: list[InputRecord],
    ) -> Generator[Row, None, Any]:
        """Run one joiner call on the state; yield its rows; return the state.

        Returns None when the joiner raised: the records it was given are dead-lettered, and
        since the caller then stores nothing, the stored state stays as it was.
        """
        joiner = self.plan.joiner
        try:
            results = list(call(state))
        except Exception as exc:
            reason = f"joiner {joiner.name!r} of plugin {self.plan.plugin!r} raised {exc!r}"
            for record in records:
                yield self._dead_letter(raw[_origin(record)], "JoinerFailed", reason)
            return None
        for result in results:
            if isinstance(result, Emit):
                yield self._output(result, raw)
            else:
                yield self._rejected(result, raw)
        return state

    def _output(self, emit: Emit, raw: dict[tuple[str, int, int], Row]) -> Row:
        headers = _provenance(*_origin(emit.source)) if emit.source is not None else []
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
        timestamp = emit.source.timestamp if emit.source is not None else None
        return Row(
            topic=topic,
            key=_key_bytes(emit.key),
            value=value,
            headers=headers,
            timestamp=timestamp or None,
        )

    def _rejected(self, letter: DeadLetter, raw: dict[tuple[str, int, int], Row]) -> Row:
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
        row = Row(
            topic=record.topic,
            partition=record.partition,
            offset=record.offset,
            kafka_key=record.kafka_key,
            value=value,
            timestamp=record.timestamp,
        )
        return self._dead_letter(row, letter.kind, letter.reason)

    def _dead_letter(self, row: Row, kind: str, reason: str) -> Row:
        headers = _provenance(row.topic, row.partition, row.offset)
        headers.append(_header("enrichd.error.class", kind))
        headers.append(_header("enrichd.error.message", reason))
        return Row(
            topic=self.plan.dead_letter_topic,
            key=row.kafka_key,
            value=row.value,
            headers=headers,
            timestamp=row.timestamp or None,
        )

    def close(self) -> None:
        """Nothing to release."""


def _origin(record: InputRecord) -> tuple[str, int, int]:
    return (record.topic, record.partition, record.offset)
