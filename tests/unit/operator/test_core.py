"""The engine core's apply loop, on its own: no Spark, a bucket and a stash log in memory.

A recording joiner notes every call the core makes (``process`` with the records in the
order given, ``advance`` with the time), so each test reads the loop's decisions directly:
apply order, data before end of input, records after the end, state TTL, ticks, failures.
The same loop under Spark is checked by the joiner tests through ``daemon replay``, and
``tests/joins/test_micro_batches.py`` and ``tests/joins/test_comap.py`` run one interleaving
through both.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterable, Sequence
from typing import Any, ClassVar

import pytest

from daemon.operator.core import AFTER_END_OF_INPUT, EXPIRED, EngineCore, JoinerFailure
from daemon.operator.stash_log import MemoryChunks, StashLog
from daemon.operator.state_format import (
    ENTRY_OVERHEAD,
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
    JoinerOptions,
    input_record,
)
from daemon.plugin.stash import Stash

NOW = 1_700_000_000_000


class RecorderOptions(JoinerOptions):
    state_ttl: int | None = None
    wakeup: int | None = None
    fail_on: str | None = None
    """A value that makes ``process`` raise."""


class Recorder(Joiner):
    """Keeps every value it is given; emits each as it comes and ``("end", n)`` when advanced."""

    name = "recorder"
    description = "records the core's calls"
    roles: ClassVar[tuple[str, ...]] = ("left", "right")
    Options = RecorderOptions

    def __init__(self, options: JoinerOptions, context: JoinerContext) -> None:
        super().__init__(options, context)
        self.calls: list[tuple[str, str, Any]] = []

    def initial_state(self) -> dict[str, Any]:
        return {"seen": []}

    def process(
        self, key: str, state: Any, records: Sequence[InputRecord], ctx: JoinerContext
    ) -> Iterable[Emit | DeadLetter]:
        values = [r.value["v"] if r.value else None for r in records]
        self.calls.append(("process", key, values))
        if self.options.fail_on in values:  # type: ignore[attr-defined]
            raise ValueError("no")
        state["seen"].extend(values)
        for record, value in zip(records, values, strict=True):
            if value == "reject":
                yield DeadLetter(record, "not wanted", "Refused")
            else:
                yield Emit(key, {"v": value}, record)

    def advance(self, key: str, state: Any, to: int, ctx: JoinerContext) -> Iterable[Emit]:
        self.calls.append(("advance", key, to))
        if to == END_OF_TIME:
            yield Emit(key, {"v": ("end", len(state["seen"]))})

    def wakeup_ms(self, state: Any) -> int | None:
        return self.options.wakeup  # type: ignore[attr-defined, no-any-return]

    def is_empty(self, state: Any) -> bool:
        return state["seen"] == ["forget"]


class Outlet:
    def __init__(self) -> None:
        self.emits: list[Emit] = []
        self.rejected: list[DeadLetter] = []
        self.failures: list[JoinerFailure] = []

    def rows(self, results: Sequence[Emit | DeadLetter]) -> list[Emit | DeadLetter]:
        return list(results)

    def send(self, rows: Sequence[Emit | DeadLetter]) -> None:
        for row in rows:
            (self.emits if isinstance(row, Emit) else self.rejected).append(row)  # type: ignore[arg-type]

    def failed(self, failure: JoinerFailure) -> None:
        self.failures.append(failure)


class Bench:
    """A core over one bucket, stored back after every step as the processor stores it."""

    def __init__(self, **options: Any) -> None:
        self.joiner = Recorder(RecorderOptions(**options), JoinerContext("p", {}))
        self.outlet = Outlet()
        self.core = EngineCore(self.joiner, self.outlet)
        self.bucket = Bucket()
        self.chunks = MemoryChunks()

    def apply(
        self, batch: dict[str, list[InputRecord]], ended: Iterable[str] = (), now: int = NOW
    ) -> None:
        log = StashLog(self.chunks, self.bucket.stash)
        ends = set(ended)
        parts = [(key, records, key in ends) for key, records in batch.items()]
        self.core.apply(self.bucket, log, parts, now)
        log.flush(self.bucket.keys)

    def tick(self, now: int) -> None:
        log = StashLog(self.chunks, self.bucket.stash)
        self.core.tick(self.bucket, log, now)
        log.flush(self.bucket.keys)

    def state(self, key: str) -> Any:
        entry = self.bucket.keys[key]
        return StashLog(self.chunks, self.bucket.stash).loads(key, entry[STATE])

    def values(self) -> list[Any]:
        return [emit.value["v"] if emit.value else None for emit in self.outlet.emits]


class FailingAdvance(Recorder):
    """Its ``advance`` changes the state and yields, then raises."""

    def advance(self, key: str, state: Any, to: int, ctx: JoinerContext) -> Iterable[Emit]:
        state["seen"].append("half way")
        yield Emit(key, {"v": "before the raise"})
        raise RuntimeError("advance")


def failing_advance(**options: Any) -> Bench:
    """A bench whose joiner is :class:`FailingAdvance`."""
    bench = Bench(**options)
    bench.joiner = FailingAdvance(RecorderOptions(**options), JoinerContext("p", {}))
    bench.core = EngineCore(bench.joiner, bench.outlet)
    return bench


def rec(value: str, event_time: int, role: str = "left", offset: int = 0, key: str = "k") -> Any:
    return input_record(role, key, {"v": value}, event_time, role, 0, offset, None, event_time)


def test_the_core_and_the_test_kit_load_without_spark() -> None:
    probe = (
        "import sys; import daemon.operator.core, daemon.testing; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'pyspark'))"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert loaded == "[]"


def test_a_keys_records_are_applied_in_apply_order_then_its_end_of_input() -> None:
    bench = Bench()
    # Given out of order: time, then role order (left before right), then offset.
    batch = [rec("c", 20), rec("b", 10, "right"), rec("a", 10, "left", 5), rec("a0", 10, "left")]
    bench.apply({"k": batch}, ended={"k"})

    assert bench.joiner.calls == [
        ("process", "k", ["a0", "a", "b", "c"]),
        ("advance", "k", END_OF_TIME),
    ]
    assert bench.values() == ["a0", "a", "b", "c", ("end", 4)]
    # The ended key stays, as its clock at the end of time.
    assert bench.bucket.keys["k"][STREAM_TIME] == END_OF_TIME


def test_a_record_after_its_keys_end_of_input_is_flushed_at_once_and_counted() -> None:
    bench = Bench()
    bench.apply({"k": [rec("a", 10)]}, ended={"k"})
    bench.joiner.calls.clear()

    bench.apply({"k": [rec("late", 5, offset=1)]}, now=NOW + 1)

    assert bench.joiner.calls == [("process", "k", ["late"]), ("advance", "k", END_OF_TIME)]
    assert bench.values()[-2:] == ["late", ("end", 2)]
    assert bench.joiner.context.metrics == {AFTER_END_OF_INPUT: 1}


def test_an_end_of_input_alone_advances_a_new_key_and_keeps_its_end() -> None:
    bench = Bench()
    bench.apply({"k": []}, ended={"k"})
    assert bench.joiner.calls == [("advance", "k", END_OF_TIME)]
    assert bench.state("k") == {"seen": []}  # kept: empty, but its end must stay final
    assert bench.bucket.keys["k"][STREAM_TIME] == END_OF_TIME


def test_an_empty_state_is_dropped() -> None:
    bench = Bench()
    bench.apply({"k": [rec("forget", 1)]})
    assert bench.bucket.keys == {}


def test_state_ttl_starts_a_key_afresh_and_its_timer_drops_it() -> None:
    bench = Bench(state_ttl=1_000)
    bench.apply({"k": [rec("a", 1)]})
    assert bench.bucket.keys["k"][UPDATED_MS] == NOW
    assert bench.bucket.due == {"k": NOW + 1_000}

    bench.apply({"k": [rec("b", 2, offset=1)]}, now=NOW + 999)  # still alive: joined
    assert bench.state("k") == {"seen": ["a", "b"]}
    bench.apply({"k": [rec("c", 3, offset=2)]}, now=NOW + 999 + 1_000)  # expired: afresh
    assert bench.state("k") == {"seen": ["c"]}
    # Expired, it was flushed first (advanced to the end), then forgotten, and counted.
    assert bench.values()[-2:] == [("end", 2), "c"]
    assert bench.joiner.context.metrics == {EXPIRED: 1}

    bench.tick(NOW + 999 + 2_000)  # the TTL timer: flushed, then dropped
    assert bench.bucket.keys == {} and bench.bucket.due == {}
    advances = [call for call in bench.joiner.calls if call[0] == "advance"]
    assert advances == [("advance", "k", END_OF_TIME)] * 2
    assert bench.joiner.context.metrics == {EXPIRED: 2}


def test_a_record_that_changes_no_state_does_not_renew_its_ttl() -> None:
    """A lookup's stream record reads the table row: the row's TTL runs on from its write,
    and the bucket is not written for it."""

    class Reading(Recorder):
        def wakes_up(self) -> bool:
            return False  # a clock kept for wake-ups would change the entry itself

        def process(
            self, key: str, state: Any, records: Sequence[InputRecord], ctx: JoinerContext
        ) -> Iterable[Emit | DeadLetter]:
            for record in records:
                if record.value and record.value["v"] != "read":
                    state["seen"].append(record.value["v"])
                yield Emit(key, {"v": list(state["seen"])}, record)

    bench = Bench(state_ttl=1_000)
    bench.joiner = Reading(RecorderOptions(state_ttl=1_000), JoinerContext("p", {}))
    bench.core = EngineCore(bench.joiner, bench.outlet)
    bench.apply({"k": [rec("row", 1)]})
    bench.bucket.touched.clear()
    bench.apply({"k": [rec("read", 2, offset=1)]}, now=NOW + 600)
    assert bench.bucket.keys["k"][UPDATED_MS] == NOW and bench.bucket.due == {"k": NOW + 1_000}
    assert not bench.bucket.touched
    bench.apply({"k": [rec("read", 3, offset=2)]}, now=NOW + 1_000)  # expired: no row
    emitted = [emit.value["v"] for emit in bench.outlet.emits]
    assert emitted == [["row"], ["row"], ("end", 1), []]  # flushed at expiry, then afresh


def test_an_ended_key_is_not_flushed_again_when_it_expires() -> None:
    bench = Bench(state_ttl=1_000)
    bench.apply({"k": [rec("a", 1)]}, ended={"k"})
    bench.tick(NOW + 1_000)
    assert bench.bucket.keys == {}
    assert [call for call in bench.joiner.calls if call[0] == "advance"] == [
        ("advance", "k", END_OF_TIME)
    ]


def test_an_expired_key_whose_flush_fails_is_told_and_dropped_all_the_same() -> None:
    bench = failing_advance(state_ttl=1_000)
    bench.apply({"k": [rec("a", 1)]})
    bench.tick(NOW + 1_000)
    failures = [(f.key, f.call, f.records) for f in bench.outlet.failures]
    assert failures == [("k", "advance at the end of input", ())]
    assert bench.values() == ["a"]  # what the failed flush yielded is not sent
    assert bench.bucket.keys == {} and bench.bucket.due == {}
    assert bench.joiner.context.metrics == {EXPIRED: 1}


def test_a_key_stored_without_a_ttl_counts_its_ttl_from_its_next_update() -> None:
    bench = Bench()
    bench.apply({"k": [rec("a", 1)]})
    assert bench.bucket.keys["k"][UPDATED_MS] == 0  # not known
    bench.core = EngineCore(bench.joiner, bench.outlet)
    bench.core.ttl_ms = 1_000  # the pipeline gets a state_ttl
    bench.apply({"k": [rec("b", 2, offset=1)]}, now=NOW + 10_000)
    assert bench.state("k") == {"seen": ["a", "b"]}


def test_a_tick_advances_due_keys_by_the_quiet_processing_time_in_key_order() -> None:
    bench = Bench(wakeup=100)
    bench.apply({"b": [rec("x", 1_000, key="b")], "a": [rec("y", 5_000, key="a")]})
    bench.apply({"c": [rec("z", 9_000, key="c")]}, now=NOW + 50)
    assert bench.bucket.due == {"a": NOW + 100, "b": NOW + 100, "c": NOW + 150}
    bench.joiner.calls.clear()

    bench.tick(NOW + 120)  # c is not due yet

    assert bench.joiner.calls == [("advance", "a", 5_120), ("advance", "b", 1_120)]
    assert bench.bucket.keys["a"][LAST_MS] == NOW + 120
    assert bench.bucket.due["a"] == NOW + 220 and bench.bucket.due["c"] == NOW + 150


def test_a_failing_joiner_leaves_the_state_and_tells_the_outlet() -> None:
    bench = Bench(fail_on="boom")
    bench.apply({"k": [rec("a", 1)]})
    records = [rec("boom", 2, offset=1), rec("b", 3, offset=2)]
    bench.apply({"k": records}, now=NOW + 1)

    (failure,) = bench.outlet.failures
    assert (failure.key, failure.call, failure.records, str(failure.error)) == (
        "k",
        "process",
        records,
        "no",
    )
    assert (
        failure.reason("p")
        == "joiner 'recorder' of plugin 'p' raised ValueError('no') in process of key 'k'"
    )
    assert bench.state("k") == {"seen": ["a"]}


def test_dead_letters_and_stashes_go_through() -> None:
    bench = Bench()
    bench.apply({"k": [rec("reject", 1)]})
    assert [letter.kind for letter in bench.outlet.rejected] == ["Refused"]

    class Stashing(Recorder):
        def initial_state(self) -> dict[str, Any]:
            return {"seen": [], "kept": Stash()}

        def process(
            self, key: str, state: Any, records: Sequence[InputRecord], ctx: JoinerContext
        ) -> Iterable[Emit | DeadLetter]:
            for record in records:
                state["kept"][record.offset] = record.value
            return super().process(key, state, records, ctx)

    bench.joiner = Stashing(RecorderOptions(), JoinerContext("p", {}))
    bench.core = EngineCore(bench.joiner, bench.outlet)
    bench.apply({"s": [rec("a", 1, key="s"), rec("b", 2, offset=1, key="s")]})
    bench.apply({"s": [rec("c", 3, offset=2, key="s")]})
    assert dict(bench.state("s")["kept"]) == {0: {"v": "a"}, 1: {"v": "b"}, 2: {"v": "c"}}
    assert bench.bucket.stash.live == 3


@pytest.mark.parametrize("ended", [False, True])
def test_a_failing_advance_is_told_with_its_time_and_the_keys_clock_goes_on(ended: bool) -> None:
    bench = failing_advance(wakeup=100)
    bench.apply({"k": [rec("a", 1)]})
    if ended:
        bench.apply({"k": []}, ended={"k"}, now=NOW + 1)
        assert bench.bucket.keys["k"][STREAM_TIME] == END_OF_TIME  # the end landed all the same
        call = "advance at the end of input"
    else:
        bench.tick(NOW + 100)
        assert bench.bucket.keys["k"][LAST_MS] == NOW + 100
        assert bench.bucket.due == {"k": NOW + 200}  # it wakes up again, as it asks
        call = "advance at event time 101"
    assert [(f.key, f.call, f.records) for f in bench.outlet.failures] == [("k", call, ())]
    assert bench.values() == ["a"]  # what it yielded before it raised is not sent
    assert bench.state("k") == {"seen": ["a"]}  # and what it did to the state is gone


def test_the_bucket_knows_what_its_entries_grew_by_as_the_core_changes_them() -> None:
    """What a long batch counts of the state it holds (daemon.continuous.held_buckets): the
    entries' bytes as they are now, however often each changed, none once dropped."""

    def held(bench: Bench) -> int:
        return sum(entry_bytes(key, entry) for key, entry in bench.bucket.keys.items())

    bench = Bench(state_ttl=1_000)
    bench.apply({"a": [rec("x" * 100, 1, key="a")], "b": [rec("y", 1, key="b")]})
    assert bench.bucket.grown == held(bench) > 100 + 2 * ENTRY_OVERHEAD
    for step in range(1, 6):  # "a" changed five times: its entry replaced, not added up
        bench.apply({"a": [rec("z", 1 + step, key="a", offset=step)]}, now=NOW + step)
    assert bench.bucket.grown == held(bench)
    bench.tick(NOW + 2_000)  # both expired: dropped, their bytes given back
    assert bench.bucket.keys == {} and bench.bucket.grown == 0
