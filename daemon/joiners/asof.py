"""``asof``: as-of event-time join with periodic re-join and a revision log."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from pydantic import Field, model_validator

from daemon.joiners.versions import Kept, Versions, headers_of, rejoin, too_old
from daemon.plugin import (
    END_OF_TIME,
    DeadLetter,
    DurationMs,
    Emit,
    FieldOf,
    Headers,
    InputRecord,
    Joiner,
    JoinerContext,
    JoinerOptions,
    OutputValue,
    Register,
    Written,
    hookimpl,
    merge_headers,
    pickled_fields,
)

RejoinOn = Literal["event_time", "processing_time"]
"""What drives the re-join timer. ``"event_time"``: the key's stream time crossing a multiple of
``rejoin_interval`` (like a Kafka Streams stream-time punctuator). ``"processing_time"``: the
Kafka timestamps of the key's records crossing one, and ``rejoin_interval`` of quiet processing
time (like a wall-clock punctuator)."""


class AsOfOptions(JoinerOptions):
    """Options of ``asof``."""

    left_id: Annotated[str | None, FieldOf("left")] = Field(
        default=None,
        min_length=1,
        description="field that identifies a left event (default: join key and event time)",
    )
    inclusive: bool = Field(
        default=False, description="join right records at the left event's time too (at-or-before)"
    )
    history_retention: DurationMs = Field(
        default=3_600_000, gt=0, description="how long right history is kept behind stream time"
    )
    rejoin_horizon: DurationMs = Field(
        default=600_000, gt=0, description="how long left events are kept for re-join"
    )
    rejoin_interval: DurationMs = Field(
        default=60_000, gt=0, description="how often kept left events are joined again"
    )
    rejoin_on: RejoinOn = Field(default="event_time", description="the clock of the re-join timer")
    state_ttl: DurationMs | None = Field(
        default=None,
        gt=0,
        description=(
            "forget a key's history and left events this long (processing time) after its "
            "state last changed, after a last re-join"
        ),
    )

    @model_validator(mode="after")
    def _horizon_within_retention(self) -> AsOfOptions:
        # A kept left event is re-joined against the right history of its own time; past the
        # retention that history is gone and a re-join would "correct" it to a wrong answer.
        if self.rejoin_horizon > self.history_retention:
            raise ValueError(
                f"rejoin_horizon ({self.rejoin_horizon} ms) must not exceed history_retention "
                f"({self.history_retention} ms): a kept left event needs the right history of "
                "its time"
            )
        return self


KeptLeft = Kept
"""A left event kept for re-join, with the answer of its latest revision (the shared
:class:`~daemon.joiners.versions.Kept`; the name stays, as stored states refer to it)."""


@dataclass(slots=True)
class AsOfState:
    """One key's state: its clocks, right history (sorted by event time) and kept left events.

    ``right_times`` and ``right_values`` are parallel lists in event-time order; records with
    equal event times stay in arrival order, so the last of them is the one an as-of lookup
    finds. ``*_tick`` is the number of whole ``rejoin_interval``s the clock had reached at the
    last timer, so a timer fires once per interval crossed. ``changed_from`` is the earliest
    event time of the right records added since the last re-join of every kept event: only
    left events after it can have a new answer, so a re-join skips the others.
    ``right_headers``, under ``headers_from = "inputs"`` only, the right records' carried
    headers, parallel to ``right_times`` (None otherwise, and then not pickled at all).
    """

    stream_time: int | None = None
    arrival_time: int | None = None
    stream_tick: int | None = None
    arrival_tick: int | None = None
    right_times: list[int] = field(default_factory=list)
    right_values: list[dict[str, Any]] = field(default_factory=list)
    left: dict[str, KeptLeft] = field(default_factory=dict)
    changed_from: int | None = None
    right_headers: list[Headers | None] | None = None

    def __reduce__(self) -> tuple[Any, ...]:
        # As its fields, the right records' headers only when kept: a state that carries
        # none keeps its bytes' meaning, and one written before loads (__setstate__).
        fields = (
            self.stream_time,
            self.arrival_time,
            self.stream_tick,
            self.arrival_tick,
            self.right_times,
            self.right_values,
            self.left,
            self.changed_from,
        )
        return (AsOfState, pickled_fields(fields, self.right_headers))

    def __setstate__(self, state: Sequence[Any]) -> None:
        """Load a state pickled the slotted dataclass's way (before it had ``__reduce__``)."""
        names = [each.name for each in dataclasses.fields(self)]
        for name, value in zip(names, state, strict=False):
            object.__setattr__(self, name, value)
        if len(state) < len(names):
            self.right_headers = None


class AsOf(Joiner[AsOfOptions, AsOfState]):
    """As-of event-time join with periodic re-join and a revision log.

    For each left event at event time t: the right record of the same key with the greatest
    event time strictly before t (``inclusive = true``: at or before t); among right records
    with equal event times, the one that arrived last. Records are applied in arrival order,
    since the answers depend on what was known when.

    A left event is answered at once with the right history known so far (right side null
    when none is), as revision 0. Output is keyed by the left event's identity (the
    ``left_id`` field, else ``KEY@EVENT_TIME``) and holds one field per role plus
    ``revision``, so a compacted topic keeps the current best answer per left event.

    Left events stay in state for ``rejoin_horizon`` behind the key's stream time (the
    greatest event time seen for the key); a re-join timer every ``rejoin_interval`` (of
    stream time, or with ``rejoin_on = "processing_time"`` of Kafka timestamps and of quiet
    processing time) joins them again and emits revision n + 1 only where the chosen right
    record changed. A left event leaving state is re-joined one last time first. At the end
    of input every kept event is re-joined and state is cleared, so the latest revision per
    left event equals the batch as-of join over all inputs when no record came later than
    the horizon.

    Right history is kept for ``history_retention`` behind stream time, plus the one record
    that was current at that boundary, so lookups at any time within retention are exact.
    A left event or right record older than stream time - ``history_retention`` goes to the
    dead-letter topic as ``LateRecord``: its history is gone. State per key is bounded by
    the right records of the retention (plus one) and the left events of the horizon (plus
    one interval, since eviction runs on the timer).

    ``state_ttl``: a key whose state has not changed for that long (processing time) is
    forgotten after a last re-join of its kept left events (as at the end of input), so that
    the history of keys that stop updating (the one right record kept past the retention,
    the stream time) does not grow for ever. Its next record starts afresh: no history, no
    stream time, so nothing is judged late against the time it had.

    Example:
        A mood at 10, a recommendation at 20 (answered with it), then a late mood at 15: the
        re-join at the end of input corrects the answer as revision 1::

            >>> from daemon.testing import run_joiner
            >>> def line(t, arrival, **fields):
            ...     return {"key": "ann", "value": {"who": "ann", "t": t, **fields},
            ...             "timestamp": arrival}
            >>> run = run_joiner(
            ...     AsOf,
            ...     {
            ...         "left": [line(20, 2, pick="tea")],
            ...         "right": [line(10, 1, mood="calm"), line(15, 3, mood="grumpy")],
            ...     },
            ...     keys={"left": "who", "right": "who"},
            ...     times={"left": "t", "right": "t"},
            ... )
            >>> [(out.key, out.value["right"]["mood"], out.value["revision"])
            ...  for out in run.outputs]
            [('ann@20', 'calm', 0), ('ann@20', 'grumpy', 1)]
    """

    name = "asof"
    description = "As-of event-time join: best answer at once, corrected revisions on a timer."
    roles = ("left", "right")
    order = "arrival"
    merges_headers = True
    inputs_headers = (
        "the right record it was answered with (a revision: the one it now matches), then "
        "the left event"
    )

    def initial_state(self) -> AsOfState:
        """No clocks, no right history, no left events (nor, under "inputs", their headers)."""
        return AsOfState(right_headers=[] if self.context.carries_inputs else None)

    def writes(self) -> list[OutputValue]:
        """A revision: the left event, the right record as of its time (or null), its number."""
        fields = self.context.fields
        identity = "KEY@EVENT_TIME" if self.options.left_id is None else "the left_id field"
        return [
            OutputValue(
                [
                    Written.record(fields["left"], "left", "the left event"),
                    Written.record(
                        fields["right"],
                        "right",
                        "the right record as of the left event's time; null when none",
                        nullable=True,
                    ),
                    Written.typed("revision", "int", "0 for the first answer, then 1, 2, ..."),
                ],
                key=f"the left event's identity: {identity}",
            )
        ]

    def is_empty(self, state: AsOfState) -> bool:
        """Only a cleared state is empty.

        A key's stream time is kept even when nothing else is, so whether a record is late
        never depends on where micro-batches happened to end.
        """
        return state.stream_time is None and not state.left and not state.right_times

    def wakeup_ms(self, state: AsOfState) -> int | None:
        """In processing-time mode, a re-join every ``rejoin_interval`` while events are kept."""
        if self.options.rejoin_on == "processing_time" and state.left:
            return self.options.rejoin_interval
        return None

    def process(
        self, key: str, state: AsOfState, records: Sequence[InputRecord], ctx: JoinerContext
    ) -> Iterator[Emit | DeadLetter]:
        """Apply one key's records in arrival order; see the class docstring."""
        for record in records:
            yield from self._apply(key, state, record, ctx)
            if record.timestamp and self.options.rejoin_on == "processing_time":
                state.arrival_time = max(state.arrival_time or 0, record.timestamp)
                if self._crossed(state.arrival_time, "arrival_tick", state):
                    yield from self._rejoin_all(key, state, record, ctx)
            yield from self._on_stream_time(key, state, record, ctx)

    def advance(
        self, key: str, state: AsOfState, to: int, ctx: JoinerContext
    ) -> Iterator[Emit | DeadLetter]:
        """Event time moved to ``to`` without a record of the key.

        At the end of input: a final re-join, then nothing is kept. At a processing-time
        wake-up: stream time moves to ``to`` (the engine's rule for quiet keys), kept events
        are joined again and those past the horizon leave.
        """
        if to >= END_OF_TIME:
            yield from self._rejoin_all(key, state, None, ctx)
            state.stream_time = state.arrival_time = None
            state.stream_tick = state.arrival_tick = state.changed_from = None
            state.left.clear()
            state.right_times.clear()
            state.right_values.clear()
            if state.right_headers is not None:
                state.right_headers.clear()
            return
        state.stream_time = max(state.stream_time or to, to)
        if self.options.rejoin_on == "processing_time":
            yield from self._rejoin_all(key, state, None, ctx)
        yield from self._on_stream_time(key, state, None, ctx)

    def _apply(
        self, key: str, state: AsOfState, record: InputRecord, ctx: JoinerContext
    ) -> Iterator[Emit | DeadLetter]:
        """Add one record to the key's state; a left event gets its immediate answer."""
        options = self.options
        event_time = record.event_time
        late = too_old(record, key, state.stream_time, options.history_retention, "right", ctx)
        if late is not None:
            yield late
            return
        stream_time = max(state.stream_time or event_time, event_time)
        state.stream_time = stream_time
        if record.value is None:  # not routed here: asof has no keyed tombstones
            return
        if record.role == "right":
            if self.context.carries_inputs:
                state.right_headers = headers_of(state.right_times, state.right_headers)
            _versions(state).add(event_time, record.value, record.headers)
            if state.changed_from is None or event_time < state.changed_from:
                state.changed_from = event_time
            return
        identity = self._identity(key, record)
        if identity is None:
            yield DeadLetter(
                record, f"left event lacks its id field {options.left_id!r}", "MissingId"
            )
            return
        right = self._answer(state, event_time)
        kept = state.left.pop(identity, None)
        if kept is not None and (kept.event_time, kept.value, kept.answer) == (
            event_time,
            record.value,
            right,
        ):
            state.left[identity] = kept  # a re-sent event changes no answer
            return
        revision = 0 if kept is None else kept.revision + 1
        ctx.count("matched" if right is not None else "unmatched")
        headers = self._headers(state, event_time, record.headers)
        yield self._emit(identity, record.value, right, revision, record, headers)
        if event_time >= stream_time - options.rejoin_horizon:
            kept = KeptLeft(event_time, record.value, right, revision, None, record.headers)
            state.left[identity] = kept

    def _on_stream_time(
        self, key: str, state: AsOfState, source: InputRecord | None, ctx: JoinerContext
    ) -> Iterator[Emit]:
        """The stream-time timer: re-join (event-time mode) and evict past the horizons."""
        if state.stream_time is None or not self._crossed(state.stream_time, "stream_tick", state):
            return
        options = self.options
        if options.rejoin_on == "event_time":
            yield from self._rejoin_all(key, state, source, ctx)
        horizon = state.stream_time - options.rejoin_horizon
        leaving = [ident for ident, kept in state.left.items() if kept.event_time < horizon]
        # A leaving event's last answer is what a compacted topic keeps: make it current.
        yield from self._rejoin(key, state, leaving, source, ctx)
        for ident in leaving:
            del state.left[ident]
        # Keep every right record of the retention and the one current at its boundary.
        _versions(state).forget_before(state.stream_time - options.history_retention)

    def _crossed(self, clock: int, tick: str, state: AsOfState) -> bool:
        """Whether ``clock`` reached a new multiple of the interval since the last timer."""
        now = clock // self.options.rejoin_interval
        last = getattr(state, tick)
        setattr(state, tick, now if last is None else max(last, now))
        return last is not None and now > last

    def _rejoin_all(
        self, key: str, state: AsOfState, source: InputRecord | None, ctx: JoinerContext
    ) -> Iterator[Emit]:
        """Join every kept left event again (the timer); then nothing has changed since."""
        yield from self._rejoin(key, state, list(state.left), source, ctx)
        state.changed_from = None

    def _rejoin(
        self,
        key: str,
        state: AsOfState,
        identities: Iterable[str],
        source: InputRecord | None,
        ctx: JoinerContext,
    ) -> Iterator[Emit]:
        """Join kept left events again; a new revision where the answer changed."""
        changed_from = state.changed_from
        if changed_from is None:
            return
        inclusive = self.options.inclusive
        versions = _versions(state)
        for identity in identities:
            kept = state.left[identity]
            if rejoin(kept, versions, changed_from=changed_from, inclusive=inclusive):
                ctx.count("revisions")
                headers = self._headers(state, kept.event_time, kept.headers)
                yield self._emit(identity, kept.value, kept.answer, kept.revision, source, headers)

    def _answer(self, state: AsOfState, event_time: int) -> dict[str, Any] | None:
        """The right record current at ``event_time`` (strictly before it unless inclusive)."""
        answer: dict[str, Any] | None = _versions(state).at(
            event_time, inclusive=self.options.inclusive
        )
        return answer

    def _headers(self, state: AsOfState, event_time: int, left: Headers | None) -> Headers | None:
        """An answer's headers: its left event's; under "inputs" its right record's first."""
        if not self.context.carries_inputs:
            return left
        right = _versions(state).headers_at(event_time, inclusive=self.options.inclusive)
        return merge_headers(right, left)

    def _identity(self, key: str, record: InputRecord) -> str | None:
        id_field = self.options.left_id
        if id_field is None:
            return f"{key}@{record.event_time}"
        value = (record.value or {}).get(id_field)
        return None if value is None else str(value)

    def _emit(
        self,
        identity: str,
        left: dict[str, Any],
        right: dict[str, Any] | None,
        revision: int,
        source: InputRecord | None,
        headers: Headers | None = None,
    ) -> Emit:
        """An answer to a left event; a revision carries the event's ``headers``."""
        fields = self.context.fields
        value = {fields["left"]: left, fields["right"]: right, "revision": revision}
        return Emit(key=identity, value=value, source=source, headers=headers)


def _versions(state: AsOfState) -> Versions:
    """The key's right history, as the shared versions view over its lists."""
    return Versions(state.right_times, state.right_values, state.right_headers)


@hookimpl
def enrichd_register_joiners(register: Register) -> None:
    """Register the built-in ``asof`` joiner."""
    register(AsOf)
