"""The engine core: one state bucket's apply loop, the same under Spark and in the test kit.

A micro-batch's records reach a state bucket grouped by join key. For each key the core
loads the key's clock and state (a fresh start when it has none, or it outlived its
``state_ttl``: see below), puts the key's records in apply order
(:func:`~daemon.plugin.joiner.apply_order`: time, then role order, partition and offset),
lets the joiner process them and, when the key's input has ended, advances it to
:data:`END_OF_TIME`: the records of a micro-batch before its ticks. Then it keeps the key's
new state and clock, and notes when the key is next due (its joiner's wake-up, or its TTL).
A *tick* (the bucket's timer firing) moves each due key's event time on by the processing
time that passed, or drops the key past its TTL.

State TTL: a key's TTL counts from the last change of its state (``updated_ms``); a record
that leaves the state as it was (a lookup's stream record, a re-sent identical row) reads it
and does not renew it, as Flink's default TTL (renewed on create and write). A key past its
TTL is *expired*: its joiner first gets :meth:`~daemon.plugin.joiner.Joiner.advance` to
:data:`END_OF_TIME`, so that nothing it holds back is lost (a lookup's records in their grace
go out, an as-of join re-joins its kept events a last time), then the key is dropped and
counted as :data:`EXPIRED`. Its next record starts afresh.

End of input is final: a record that reaches an ended key in a later micro-batch is applied
and flushed at once (no later marker would flush what the joiner holds back), and counted as
:data:`AFTER_END_OF_INPUT`.

What the core leaves to its caller: where the bucket lives and when the timer fires (Spark's
state store and timers in :class:`~daemon.operator.processor.JoinerProcessor`, a dict and a
hand-moved clock in :class:`daemon.testing.JoinerHarness`), decoding the input, and writing
what comes out, through an :class:`Outlet`. Nothing here imports Spark.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from operator import attrgetter
from typing import Any, Protocol

from daemon.operator.stash_log import StashLog
from daemon.operator.state_format import EVENT_TIME, LAST_MS, STATE, STREAM_TIME, UPDATED_MS, Bucket
from daemon.plugin.joiner import (
    END_OF_TIME,
    DeadLetter,
    Emit,
    InputRecord,
    Joiner,
    JoinerContext,
    apply_order,
)

AFTER_END_OF_INPUT = "after_end_of_input"
"""The event counted (``enrichd_joiner_events``) for each record that reaches its key after
the key's end of input."""
EXPIRED = "expired"
"""The event counted (``enrichd_joiner_events``) for each key dropped past its ``state_ttl``."""


KeyBatch = tuple[str, list[InputRecord], bool]
"""A key's part of a micro-batch: the join key, its records in any order (maybe none: they
were all undecodable, or only its end of input came), and whether its input ends after them."""


class Outlet(Protocol):
    """Where the core hands what a joiner yields (the caller writes it)."""

    def emit(self, emit: Emit) -> None:
        """An output record."""

    def reject(self, letter: DeadLetter) -> None:
        """A dead letter the joiner yielded."""

    def failed(self, records: Sequence[InputRecord], error: Exception) -> None:
        """The joiner raised on ``records`` (none for a tick); the key's state stays as it was."""


@dataclass
class KeyClock:
    """A key's time, stored with its state (as fields of its bucket entry).

    Only what the pipeline uses is kept up to date: ``stream_time`` and ``last_ms`` when its
    joiner wakes up, ``updated_ms`` when it has a state TTL. Otherwise they stay as they
    were, so a key whose state a call leaves alone keeps the same bytes.
    """

    stream_time: int = 0
    """The key's event time: its newest record's, moved on by ticks and end of input."""
    last_ms: int = 0
    """Processing time of the key's last record (or wake-up)."""
    updated_ms: int = 0
    """Processing time of the key's last state change, for ``state_ttl``; 0: not known."""


class EngineCore:
    """Applies micro-batches and ticks to a bucket's keys for one joiner (see module docstring).

    Args:
        joiner: the joiner; its ``process``, ``advance``, ``is_empty`` and ``wakeup_ms`` run here.
        outlet: what receives the joiner's output.
    """

    def __init__(self, joiner: Joiner, outlet: Outlet) -> None:
        self.joiner = joiner
        # Asked once: reading an option a joiner's options lack costs a pydantic exception.
        self.ttl_ms = joiner.state_ttl_ms()
        self.wakes = joiner.wakes_up()
        self._emit = outlet.emit
        self._reject = outlet.reject
        self._failed = outlet.failed

    def apply(self, bucket: Bucket, log: StashLog, batch: Iterable[KeyBatch], now: int) -> None:
        """Apply one micro-batch's records to the bucket, key by key.

        Args:
            bucket: the bucket, changed in place.
            log: the bucket's stash log for this call (the caller flushes it).
            batch: each key's part of the micro-batch, taken one at a time: it may be a
                generator that decodes a key's records as the core comes to the key.
            now: processing time, epoch milliseconds.
        """
        for key, records, end_of_input in batch:
            self._apply(bucket, log, key, records, end_of_input, now)

    def _apply(
        self,
        bucket: Bucket,
        log: StashLog,
        key: str,
        records: list[InputRecord],
        end_of_input: bool,
        now: int,
    ) -> None:
        joiner = self.joiner
        clock, state = self.load(bucket, log, key, now)
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
            state = self._step(joiner.process, key, state, ordered, records)
            if state is None:
                return
        if end_of_input or (ended and records):
            clock.stream_time = END_OF_TIME
            state = self._step(joiner.advance, key, state, END_OF_TIME, records)
            if state is None:
                return
        self._store(bucket, log, key, clock, state, now, newest)

    def tick(self, bucket: Bucket, log: StashLog, now: int) -> None:
        """Processing time is ``now``: advance every key due by then, or drop it past its TTL.

        A due key's event time moves on by the processing time since its last record or
        wake-up. Keys go in key order.
        """
        for key in sorted(k for k, at in bucket.due.items() if at <= now):
            clock, state = self.load(bucket, log, key, now)
            if key not in bucket.keys:  # outlived its TTL
                continue
            clock.stream_time = min(clock.stream_time + max(now - clock.last_ms, 0), END_OF_TIME)
            clock.last_ms = now
            advanced = self._step(self.joiner.advance, key, state, clock.stream_time, ())
            if advanced is None:  # the joiner raised: no more wake-ups until its next record
                bucket.due.pop(key, None)
                bucket.touch(key)
            else:
                self._store(bucket, log, key, clock, advanced, now)

    def load(self, bucket: Bucket, log: StashLog, key: str, now: int) -> tuple[KeyClock, Any]:
        """A key's clock and state; a fresh start when it has none or it outlived its TTL.

        A key that outlived its TTL is expired first (see the module docstring).
        """
        entry = bucket.keys.get(key)
        if entry is not None:
            clock = KeyClock(entry[STREAM_TIME], entry[LAST_MS], entry[UPDATED_MS])
            state = log.loads(key, entry[STATE])
            # updated_ms 0: stored while the pipeline had no state_ttl, so unknown. The TTL
            # counts from this key's next store rather than dropping it unseen.
            if self.ttl_ms is None or not clock.updated_ms or now - clock.updated_ms < self.ttl_ms:
                return clock, state
            self._expire(bucket, log, key, clock, state)
        return KeyClock(), self.joiner.initial_state()

    def _expire(self, bucket: Bucket, log: StashLog, key: str, clock: KeyClock, state: Any) -> None:
        """Drop a key past its TTL, after flushing what its joiner holds back.

        An ended key was flushed by its end of input already. A joiner that raises here is
        told (with no records), and the key is dropped all the same: its state ran out.
        """
        if clock.stream_time != END_OF_TIME:
            self._step(self.joiner.advance, key, state, END_OF_TIME, ())
        _drop(bucket, log, key)
        self.joiner.context.count(EXPIRED)

    def _store(
        self,
        bucket: Bucket,
        log: StashLog,
        key: str,
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
        joiner = self.joiner
        # An ended key with nothing left stays, as its clock, so that its end stays final.
        if joiner.is_empty(state) and clock.stream_time != END_OF_TIME:
            _drop(bucket, log, key)
            return
        pickled = log.dumps(state)
        before = bucket.keys.get(key)
        changed = before is None or before[STATE] != pickled
        due = []
        if self.wakes and (wakeup := joiner.wakeup_ms(state)) is not None:
            due.append(now + max(wakeup, 1))
        if self.ttl_ms is not None:
            # Renewed by a change only: a record that read the state leaves its TTL running.
            if changed or not clock.updated_ms:
                clock.updated_ms = now
            due.append(clock.updated_ms + self.ttl_ms)
        if due:
            at = min(due)
            if bucket.due.get(key) != at:
                bucket.due[key] = at
                bucket.touch(key)
        elif bucket.due and bucket.due.pop(key, None) is not None:
            bucket.touch(key)
        event_time = 0 if before is None else before[EVENT_TIME]
        if newest is not None and changed:
            event_time = max(event_time, newest)
        entry = (clock.stream_time, clock.last_ms, clock.updated_ms, event_time, pickled)
        if entry != before:
            bucket.keys[key] = entry
            bucket.touch(key)

    def _step(
        self,
        call: Callable[[str, Any, Any, JoinerContext], Iterable[Emit | DeadLetter]],
        key: str,
        state: Any,
        argument: Any,
        records: Sequence[InputRecord],
    ) -> Any:
        """Run one joiner call on the key's state; hand out what it yields; return the state.

        ``call`` is the joiner's ``process`` (``argument``: the records) or ``advance``
        (``argument``: the event time to advance to).

        Returns None when the joiner raised (the outlet hears of it, with the records it was
        given): since the caller then stores nothing, the stored state stays as it was.
        """
        try:
            results = list(call(key, state, argument, self.joiner.context))
        except Exception as exc:
            self._failed(records, exc)
            return None
        emit, reject = self._emit, self._reject
        for result in results:
            if isinstance(result, Emit):
                emit(result)
            else:
                reject(result)
        return state


def _drop(bucket: Bucket, log: StashLog, key: str) -> None:
    """Forget a key: its state, its stashed values and its wake-up."""
    log.forget(key)
    forgotten = bucket.keys.pop(key, None) is not None
    if bucket.due.pop(key, None) is not None or forgotten:
        bucket.touch(key)


_EVENT_TIME_OF = attrgetter("event_time")
"""A record's event time, got in C: a generator over a key's records costs a resumption each."""
