"""``window``: windowed stream-stream join, as Kafka Streams' KStream-KStream join."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import Field, model_validator

from daemon.plugin import (
    DeadLetter,
    DurationMs,
    Emit,
    InputRecord,
    Joiner,
    JoinerContext,
    JoinerOptions,
    OutputValue,
    Register,
    Written,
    hookimpl,
    merge_headers,
)

WindowMode = Literal["inner", "left", "outer"]
"""``inner``: only pairs; ``left``: also each left record that found no partner, with a null
right side, once its window has closed; ``outer``: also such right records, with a null left."""

Span = Annotated[DurationMs, Field(ge=0)]
"""A non-negative duration: windows and grace periods do not run backwards."""


class WindowOptions(JoinerOptions):
    """Options of ``window``."""

    window: Span | None = Field(
        default=None,
        description="records join when their event times differ by at most this (both ways)",
    )
    before: Span | None = Field(
        default=None,
        description="a right record joins a left record up to this much earlier (default: window)",
    )
    after: Span | None = Field(
        default=None,
        description="a right record joins a left record up to this much later (default: window)",
    )
    grace: Span = Field(
        default=0,
        description="how long past a record's window end (event time) it may still arrive",
    )
    mode: WindowMode = Field(
        default="inner", description="inner: pairs only; left/outer: also unmatched records"
    )
    idle_timeout: DurationMs = Field(
        default=60_000,
        gt=0,
        description="quiet processing time after which a key's event time moves on by it",
    )

    @model_validator(mode="after")
    def _window_is_given(self) -> WindowOptions:
        if self.window is None and (self.before is None or self.after is None):
            raise ValueError(
                'give `window` (e.g. window = "10s"), or both `before` and `after` for an '
                "asymmetric window"
            )
        return self

    def sides(self) -> tuple[int, int]:
        """``(before, after)`` in milliseconds, each ``window`` unless given on its own."""
        before = self.window if self.before is None else self.before
        after = self.window if self.after is None else self.after
        return before or 0, after or 0  # never None: _window_is_given checked that


@dataclass(slots=True)
class Held:
    """A record kept in a key's state until no partner that is still on time can arrive."""

    record: InputRecord
    seq: int
    """Arrival position within the key: ties in event time keep arrival order."""
    matched: bool = False

    def __reduce__(self) -> tuple[Any, ...]:
        # Pickled with the key's state every micro-batch: as its fields, not through a
        # slotted dataclass's Python-level __getstate__ (see InputRecord.__reduce__).
        return (Held, (self.record, self.seq, self.matched))


class Window(Joiner[WindowOptions, dict[str, Any]]):
    """Windowed stream-stream join: every pair within the window, once.

    How it works: a left record at event time tL and a right record at tR of the same key
    join when ``tL - before <= tR <= tL + after`` (``window`` sets both; edges included).
    Each such pair is emitted exactly once, when the later of the two arrives (apply order
    is arrival order), so several left records before the first right record all join it,
    and every later right record joins every left record still in its window: the cartesian
    product per key and window. The output value is ``{left field: left record, right field:
    right record}`` keyed by the join key.

    Time is per key: its stream time is the greatest event time seen for it. A record is
    late, and goes to the dead-letter topic as ``LateRecord``, when its own window has ended
    more than ``grace`` ago: for a left record ``tL + after + grace < stream time``, for a
    right record ``tR + before + grace < stream time``. Records are kept until no record
    that is still on time could join them, i.e. until stream time passes
    ``t + before + after + grace``; then they are evicted, so state per key is bounded by
    the records of that span. In ``left`` and ``outer`` modes, a record that never found a
    partner is emitted with a null partner at that moment, never earlier, so there are no
    null results that a later pair contradicts.

    A key's stream time moves without records at the end of input (every window closes)
    and after ``idle_timeout`` of quiet processing time (it moves on by the processing time
    that passed), so a quiet input cannot hold results back forever. A key that holds
    nothing and stays quiet for ``idle_timeout`` is forgotten. Tombstones carry no join key
    and no event to join: they go to the dead-letter topic (Kafka Streams skips them).

    Example:
        Two left records, then a right record 4 ms after the first; a 5 ms window and
        ``mode = "left"``: the first left record pairs, the second never finds a partner::

            >>> from daemon.joiners.window import Window
            >>> from daemon.testing import run_joiner
            >>> run = run_joiner(
            ...     Window,
            ...     {
            ...         "left": [
            ...             {"key": 1, "value": {"k": 1, "v": "A"}, "timestamp": 1},
            ...             {"key": 1, "value": {"k": 1, "v": "B"}, "timestamp": 20},
            ...         ],
            ...         "right": [{"key": 1, "value": {"k": 1, "v": "a"}, "timestamp": 5}],
            ...     },
            ...     keys={"left": "k", "right": "k"},
            ...     options={"window": "5ms", "mode": "left"},
            ... )
            >>> [(out.value["left"]["v"], out.value["right"]) for out in run.outputs]
            [('A', {'k': 1, 'v': 'a'}), ('B', None)]
    """

    name = "window"
    description = "Windowed stream-stream join: every pair within the window, once."
    roles = ("left", "right")
    order = "arrival"
    merges_headers = True
    inputs_headers = "the held partner, then the later record of the pair"

    def __init__(self, options: WindowOptions, context: JoinerContext) -> None:
        super().__init__(options, context)
        window = options
        self.before, self.after = window.sides()
        self.grace: int = window.grace
        self.idle_timeout: int = window.idle_timeout
        # How far past its own event time a record's partners reach: a left record's right
        # partners are at most `after` later, a right record's left partners `before` later.
        self.reach = {"left": self.after, "right": self.before}
        # A left record at tL can still meet a right record that is on time (tR + before +
        # grace >= stream time) and in its window (tR <= tL + after) until stream time passes
        # tL + after + before + grace; the same sum holds for right records.
        self.keep = self.before + self.after + self.grace
        self.unmatched_roles = {"inner": (), "left": ("left",), "outer": ("left", "right")}[
            window.mode
        ]

    def writes(self) -> list[OutputValue]:
        """The two sides' records, either null where the mode lets it be missing."""
        fields = self.context.fields
        return [
            OutputValue(
                [
                    Written.record(
                        fields["left"],
                        "left",
                        "the left record; null for an unmatched right record (outer)",
                        nullable=self.options.mode == "outer",
                    ),
                    Written.record(
                        fields["right"],
                        "right",
                        "the right record; null for an unmatched left record (left, outer)",
                        nullable=self.options.mode != "inner",
                    ),
                ],
                key="the join key",
            )
        ]

    def initial_state(self) -> dict[str, Any]:
        """No stream time yet, nothing held."""
        return {"time": None, "seq": 0, "held": []}

    def is_empty(self, state: dict[str, Any]) -> bool:
        """A key is dropped once it holds no records and its stream time was let go."""
        return state["time"] is None and not state["held"]

    def wakeup_ms(self, state: dict[str, Any]) -> int | None:
        """While a key holds anything, ask to be woken after ``idle_timeout`` of quiet."""
        return None if self.is_empty(state) else self.idle_timeout

    def joins(self, left_time: int, right_time: int) -> bool:
        """Whether a left and a right record at these event times are in each other's window."""
        return left_time - self.before <= right_time <= left_time + self.after

    def process(
        self,
        key: str,
        state: dict[str, Any],
        records: Sequence[InputRecord],
        ctx: JoinerContext,
    ) -> Iterator[Emit | DeadLetter]:
        """Apply one key's records in arrival order; see the class docstring."""
        for record in records:
            if record.value is None:  # tombstones are dead-lettered by routing before this
                continue
            now = state["time"]
            window_end = record.event_time + self.reach[record.role]
            if now is not None and window_end + self.grace < now:
                ctx.count("late")
                yield DeadLetter(record, self._late_reason(record, now), "LateRecord")
                continue
            state["time"] = record.event_time if now is None else max(now, record.event_time)
            yield from self._close(key, state, ctx)
            yield from self._join(key, state, record, ctx)

    def advance(
        self, key: str, state: dict[str, Any], to: int, ctx: JoinerContext
    ) -> list[Emit | DeadLetter]:
        """Stream time moves to ``to``: close the windows that ends, then maybe forget the key."""
        if state["time"] is None:
            return []
        state["time"] = max(state["time"], to)
        out: list[Emit | DeadLetter] = list(self._close(key, state, ctx))
        if not state["held"]:
            # Quiet for idle_timeout (or at end of input) with nothing held: let the key go,
            # so state is bounded by the keys active within the last idle_timeout.
            state["time"] = None
        return out

    def _late_reason(self, record: InputRecord, now: int) -> str:
        side = "after" if record.role == "left" else "before"
        closed = record.event_time + self.reach[record.role] + self.grace
        return (
            f"{record.role} record at event time {record.event_time} is {now - closed} ms late: "
            f"its window ({side} {self.reach[record.role]} ms) plus grace ({self.grace} ms) "
            f"ended at {closed}, and the key's stream time is {now}"
        )

    def _close(self, key: str, state: dict[str, Any], ctx: JoinerContext) -> Iterator[Emit]:
        """Evict what no on-time record can join any more; emit unmatched ones per mode."""
        now: int = state["time"]
        held: list[Held] = state["held"]
        if not held or min(h.record.event_time for h in held) + self.keep >= now:
            return
        closed = [h for h in held if h.record.event_time + self.keep < now]
        state["held"] = [h for h in held if h.record.event_time + self.keep >= now]
        ctx.count("evicted", len(closed))
        for entry in sorted(closed, key=lambda h: (h.record.event_time, h.seq)):
            if entry.matched or entry.record.role not in self.unmatched_roles:
                continue
            ctx.count("unmatched")
            yield Emit(key=key, value=self._value(entry.record, None), source=entry.record)

    def _join(
        self, key: str, state: dict[str, Any], record: InputRecord, ctx: JoinerContext
    ) -> Iterator[Emit]:
        """Pair ``record`` with every held record of the other side in its window."""
        held: list[Held] = state["held"]
        if record.role == "left":
            partners = [
                h
                for h in held
                if h.record.role == "right" and self.joins(record.event_time, h.record.event_time)
            ]
        else:
            partners = [
                h
                for h in held
                if h.record.role == "left" and self.joins(h.record.event_time, record.event_time)
            ]
        # Partners in event-time order, as a window store is scanned.
        partners.sort(key=lambda h: (h.record.event_time, h.seq))
        for partner in partners:
            partner.matched = True
            headers = (
                merge_headers(partner.record.headers, record.headers)
                if self.context.carries_inputs
                else None
            )
            yield Emit(
                key=key, value=self._value(record, partner.record), source=record, headers=headers
            )
        ctx.count("matched", len(partners))
        held.append(Held(record, state["seq"], matched=bool(partners)))
        state["seq"] += 1

    def _value(self, record: InputRecord, partner: InputRecord | None) -> dict[str, Any]:
        left, right = (record, partner) if record.role == "left" else (partner, record)
        fields = self.context.fields
        return {
            fields["left"]: None if left is None else left.value,
            fields["right"]: None if right is None else right.value,
        }


@hookimpl
def enrichd_register_joiners(register: Register) -> None:
    """Register the built-in ``window`` joiner."""
    register(Window)
