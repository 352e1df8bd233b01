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

A joiner call is all or nothing. What a call yields is checked (:class:`Emit` or
:class:`DeadLetter`, an output the joiner has, a text key) and made into what the caller
writes, and the key's new state is pickled, before any of it is sent; a call that raises, or
whose yields or state fail those steps, sends nothing and leaves the key's stored state as it
was: the outlet hears of it as a :class:`JoinerFailure` (the engine dead-letters its records
as ``JoinerFailed``; an ``advance``, which has no records, becomes one dead letter of its
own). A failed ``advance`` moves the key's clock all the same: a wake-up's key wakes up again
when its joiner says, and a failed end of input still ends the key's input.

What the core leaves to its caller: where the bucket lives and when the timer fires (Spark's
state store and timers in :class:`~daemon.operator.processor.JoinerProcessor`, a dict and a
hand-moved clock in :class:`daemon.testing.JoinerHarness`), decoding the input, and writing
what comes out, through an :class:`Outlet`. Nothing here imports Spark.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Any, Protocol

from daemon.operator.stash_log import StashLog
from daemon.operator.state_format import (
    EVENT_TIME,
    LAST_MS,
    STATE,
    STREAM_TIME,
    UPDATED_MS,
    Bucket,
    entry_bytes,
)
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
    """Where the core hands what a joiner call yields (the caller writes it)."""

    def rows(self, results: Sequence[Emit | DeadLetter]) -> Sequence[Any]:
        """What a call's yields become for the caller (rows to write), none of them sent yet.

        Raises:
            Exception: a yield the caller cannot write (a value the output schema refuses
                without a record to dead-letter instead, say): the call fails as a whole.
        """

    def send(self, rows: Sequence[Any]) -> None:
        """Write the rows of a call that completed."""

    def failed(self, failure: JoinerFailure) -> None:
        """A call failed: nothing it yielded is sent, and the key's state stays as it was."""


@dataclass(frozen=True)
class JoinerFailure:
    """A joiner call that raised, or whose yields or state broke the joiner contract.

    Attributes:
        joiner: the joiner's name.
        key: the join key.
        call: which call: ``process``, ``advance at event time T``, ``advance at the end
            of input``.
        records: the records the call was given (none for ``advance``).
        error: what was raised (a :class:`ContractBreach` for a broken contract).
    """

    joiner: str
    key: str
    call: str
    records: Sequence[InputRecord] = field(default=(), repr=False)
    error: Exception = field(default_factory=Exception)

    def reason(self, plugin: str | None = None) -> str:
        """One line naming the joiner (and its plugin), the call, the key and the error.

        Example:
            >>> JoinerFailure("mine", "42", "process", (), RuntimeError("boom")).reason("p")
            "joiner 'mine' of plugin 'p' raised RuntimeError('boom') in process of key '42'"
        """
        who = f"joiner {self.joiner!r}" + ("" if plugin is None else f" of plugin {plugin!r}")
        where = f"{self.call} of key {self.key!r}"
        if isinstance(self.error, ContractBreach):
            return f"{who} broke the joiner contract in {where}: {self.error}"
        return f"{who} raised {self.error!r} in {where}"


class ContractBreach(Exception):  # noqa: N818 - what the joiner did, not an error of ours
    """What a joiner call yielded, or left as its state, cannot be written or stored."""


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
        stage = joiner.downstream()
        retractions = () if stage is None or stage.retractions is None else (stage.retractions,)
        self.outputs = frozenset((None, *joiner.outputs, *retractions))
        """The outputs an :class:`Emit` may name: the main one (None), the joiner's own, and
        the engine-made one of retractions a revising joiner writes for its second stage."""
        self._rows = outlet.rows
        self._send = outlet.send
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
        if records:
            if ended:
                joiner.context.count(AFTER_END_OF_INPUT, len(records))
            ordered = apply_order(records, joiner.roles, joiner.order)
            newest = max(map(_EVENT_TIME_OF, records))
            moved = clock
            if self.wakes:
                moved = KeyClock(max(clock.stream_time, newest), now, clock.updated_ms)
            if self._call(bucket, log, key, moved, state, now, _PROCESS, ordered, records, newest):
                clock = moved
            elif end_of_input or ended:
                clock, state = self.load(bucket, log, key, now)  # as stored: the call's is gone
            else:
                return
        if end_of_input or (ended and records):
            clock.stream_time = END_OF_TIME
            if not self._call(bucket, log, key, clock, state, now, _ADVANCE, END_OF_TIME, ()):
                self._clock_only(bucket, log, key, clock, now)  # its input has ended all the same

    def tick(self, bucket: Bucket, log: StashLog, now: int) -> None:
        """Processing time is ``now``: advance every key due by then, or drop it past its TTL.

        A due key's event time moves on by the processing time since its last record or
        wake-up. Keys go in key order. A key whose ``advance`` fails keeps its state and
        wakes up again when its joiner says.
        """
        for key in sorted(k for k, at in bucket.due.items() if at <= now):
            clock, state = self.load(bucket, log, key, now)
            if key not in bucket.keys:  # outlived its TTL
                continue
            clock.stream_time = min(clock.stream_time + max(now - clock.last_ms, 0), END_OF_TIME)
            clock.last_ms = now
            if not self._call(bucket, log, key, clock, state, now, _ADVANCE, clock.stream_time, ()):
                self._clock_only(bucket, log, key, clock, now)

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
            self._expire(bucket, log, key, clock, state, now)
        return KeyClock(), self.joiner.initial_state()

    def _expire(
        self, bucket: Bucket, log: StashLog, key: str, clock: KeyClock, state: Any, now: int
    ) -> None:
        """Drop a key past its TTL, after flushing what its joiner holds back.

        An ended key was flushed by its end of input already. A flush that fails is
        dead-lettered as any failed ``advance`` is, and the key is dropped all the same: its
        state ran out.
        """
        if clock.stream_time != END_OF_TIME:
            clock.stream_time = END_OF_TIME
            self._call(bucket, log, key, clock, state, now, _ADVANCE, END_OF_TIME, ())
        _drop(bucket, log, key)
        self.joiner.context.count(EXPIRED)

    def _call(
        self,
        bucket: Bucket,
        log: StashLog,
        key: str,
        clock: KeyClock,
        state: Any,
        now: int,
        which: str,
        argument: Any,
        records: Sequence[InputRecord],
        newest: int | None = None,
    ) -> bool:
        """Run one joiner call on the key's state; if it completes, send its yields and store.

        ``which`` is :data:`_PROCESS` (``argument``: the records in apply order) or
        :data:`_ADVANCE` (``argument``: the event time to advance to). The call's yields are
        checked and made into rows, and the state it leaves pickled, before anything is sent
        or stored (see the module docstring).

        Returns:
            False when the call failed: the outlet heard of it, with the records it was
            given, and nothing was sent or stored.
        """
        joiner = self.joiner
        call: Callable[[str, Any, Any, JoinerContext], Iterable[Emit | DeadLetter] | None] = (
            joiner.process if which is _PROCESS else joiner.advance
        )
        try:
            results = call(key, state, argument, joiner.context)
            if results is None:
                raise ContractBreach("it returned None, not the Emits and DeadLetters it yields")
            results = list(results)
            self._check(results)
            rows = self._rows(results)
            settled = self._settle(log, clock, state, now)
        except Exception as exc:
            self._failed(JoinerFailure(joiner.name, key, _named(which, argument), records, exc))
            return False
        self._send(rows)
        self._keep(bucket, log, key, clock, settled, now, newest)
        return True

    def _check(self, results: list[Any]) -> None:
        """Raise :class:`ContractBreach` at the first yield the engine cannot write."""
        outputs = self.outputs
        for result in results:
            if isinstance(result, Emit):
                key, source = result.key, result.source
                if result.output not in outputs:
                    declared = ", ".join(sorted(repr(name) for name in outputs if name)) or "none"
                    raise ContractBreach(
                        f"it emitted to output {result.output!r}, which it does not declare "
                        f"(its outputs: {declared})"
                    )
                if key is not None and not isinstance(key, str | bytes):
                    raise ContractBreach(
                        f"it emitted the key {key!r} ({type(key).__name__}): a key is a str, "
                        "bytes or None"
                    )
                if source is not None and not isinstance(source, InputRecord):
                    raise ContractBreach(
                        f"it emitted a source of type {type(source).__name__}, not an InputRecord"
                    )
            elif not isinstance(result, DeadLetter):
                raise ContractBreach(
                    f"it yielded {_shown(result)} ({type(result).__name__}), not an Emit or "
                    "a DeadLetter"
                )
            elif not isinstance(result.record, InputRecord):
                raise ContractBreach(
                    f"it dead-lettered a {type(result.record).__name__}, not an InputRecord"
                )

    def _settle(self, log: StashLog, clock: KeyClock, state: Any, now: int) -> _Settled:
        """What storing the key's state takes: when its joiner next wakes it, and its pickle.

        None: the state is empty, and the key is to be dropped. Asks the joiner
        (:meth:`Joiner.is_empty`, :meth:`Joiner.wakeup_ms`), so it runs inside the call.
        """
        joiner = self.joiner
        # An ended key with nothing left stays, as its clock, so that its end stays final.
        if joiner.is_empty(state) and clock.stream_time != END_OF_TIME:
            return None
        due = None
        if self.wakes and (wakeup := joiner.wakeup_ms(state)) is not None:
            due = now + max(wakeup, 1)
        try:
            # Last: what a stash holds goes into the log as it is pickled.
            pickled = log.dumps(state)
        except Exception as exc:
            raise ContractBreach(
                f"its state cannot be pickled ({type(exc).__name__}: {exc}); keep only "
                "picklable values in it"
            ) from exc
        return due, pickled

    def _keep(
        self,
        bucket: Bucket,
        log: StashLog,
        key: str,
        clock: KeyClock,
        settled: _Settled,
        now: int,
        newest: int | None = None,
    ) -> None:
        """Keep a key's new state and clock (``newest``: its records' newest event time).

        The key's ``event_time`` moves to ``newest``, and its TTL starts again, only if the
        state changed: a record that leaves the state as it was (a lookup's stream record)
        leaves the entry, and so the bucket's bytes, as they were.
        """
        if settled is None:
            _drop(bucket, log, key)
            return
        due, pickled = settled
        before = bucket.keys.get(key)
        changed = before is None or before[STATE] != pickled
        if self.ttl_ms is not None:
            # Renewed by a change only: a record that read the state leaves its TTL running.
            if changed or not clock.updated_ms:
                clock.updated_ms = now
            expiry = clock.updated_ms + self.ttl_ms
            due = expiry if due is None else min(due, expiry)
        if due is not None:
            if bucket.due.get(key) != due:
                bucket.due[key] = due
                bucket.touch(key)
        elif bucket.due and bucket.due.pop(key, None) is not None:
            bucket.touch(key)
        event_time = 0 if before is None else before[EVENT_TIME]
        if newest is not None and changed:
            event_time = max(event_time, newest)
        entry = (clock.stream_time, clock.last_ms, clock.updated_ms, event_time, pickled)
        if entry != before:
            bucket.keys[key] = entry
            bucket.grown += entry_bytes(key, entry) - entry_bytes(key, before)
            bucket.touch(key)

    def _clock_only(
        self, bucket: Bucket, log: StashLog, key: str, clock: KeyClock, now: int
    ) -> None:
        """After a failed ``advance``: the key's stored state again, with its clock moved on.

        So a woken key wakes up again when its joiner says, and an ended key stays ended. If
        the joiner fails on its stored state too (``is_empty``, ``wakeup_ms``), the key stays
        as stored, without a wake-up until its next record.
        """
        _, state = self.load(bucket, log, key, now)  # the failed call may have changed it
        try:
            settled = self._settle(log, clock, state, now)
        except Exception:
            if bucket.due.pop(key, None) is not None:
                bucket.touch(key)
            return
        self._keep(bucket, log, key, clock, settled, now)


_Settled = tuple[int | None, bytes] | None
"""A state ready to store: the time its joiner next wakes its key (None: never) and its
pickle; None
for a state that is empty (its key is dropped)."""

_PROCESS = "process"
_ADVANCE = "advance"


def _named(which: str, argument: Any) -> str:
    """The call as a failure names it: ``process``, ``advance at event time T``, ..."""
    if which is _PROCESS:
        return "process"
    if argument == END_OF_TIME:
        return "advance at the end of input"
    return f"advance at event time {argument}"


def _shown(value: Any) -> str:
    """A value for a message: its repr, cut to a line's worth."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _drop(bucket: Bucket, log: StashLog, key: str) -> None:
    """Forget a key: its state, its stashed values and its wake-up."""
    log.forget(key)
    forgotten = bucket.keys.pop(key, None)
    bucket.grown -= entry_bytes(key, forgotten)
    if bucket.due.pop(key, None) is not None or forgotten is not None:
        bucket.touch(key)


_EVENT_TIME_OF = attrgetter("event_time")
"""A record's event time, got in C: a generator over a key's records costs a resumption each."""
