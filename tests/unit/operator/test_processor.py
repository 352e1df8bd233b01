"""The processor's side of a call: the engine core over the call's records, what it keeps of a
key's state, data before expired timers, and the timers its counts rows report.

The engine's path through Spark is covered by ``tests/joins/test_lookup.py`` and
``tests/joins/test_engine_time.py``; here the processor runs on an in-memory stand-in for its
state handle (``processor_calls.py``). How it keeps a bucket is ``test_bucket_store.py``'s.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

from daemon.joiners.lookup import Lookup, LookupOptions
from daemon.joiners.window import Window, WindowOptions
from daemon.model.headers import ERROR_EXCEPTION, unpack
from daemon.model.latency import compact
from daemon.model.wire import OutputRow
from daemon.operator.processor import JoinerProcessor
from daemon.operator.state_format import EVENT_TIME
from daemon.plugin.joiner import JoinerContext, JoinerOptions
from tests.unit.operator.processor_calls import (
    BUCKET,
    INPUTS,
    NOW,
    Clock,
    Handle,
    Regions,
    call,
    click,
    codec,
    event,
    plan_of,
    processor_on,
    region_update,
    stored_bucket,
    window_plan,
)

_WINDOW_CODECS = {"left": "left_event", "right": "right_event"}
_LOOKUP_CODECS = {"stream": "click", "table": "user_region"}


def test_a_key_remembers_the_newest_event_time_that_changed_its_state() -> None:
    processor, state = processor_on()
    call(processor, [region_update("ada", "north", 10)])
    call(processor, [click("ada", 30)])  # reads the table value, changes nothing
    assert state.value is not None
    assert stored_bucket(processor.handle).keys["ada"][EVENT_TIME] == 10

    call(processor, [region_update("ada", "south", 20), click("ada", 40)])
    assert state.value is not None
    assert stored_bucket(processor.handle).keys["ada"][EVENT_TIME] == 40


def test_data_and_an_expired_timer_in_one_micro_batch_apply_the_data_first() -> None:
    """Spark's Python runner hands a task's data to the processor before its expired timers
    (pyspark.sql.streaming.stateful_processor_util: PROCESS_TIMER after PROCESS_DATA). A key
    quiet past its idle timeout that gets a record in the same micro-batch as the timer is
    then not woken: the record joins as it would have in an earlier micro-batch, where the
    timer would not have fired at all."""
    context = JoinerContext(pipeline="p", fields={"left": "left", "right": "right"})
    joiner = Window(WindowOptions(window=10_000, idle_timeout=60_000, mode="left"), context)
    codecs = {"left": "left_event", "right": "right_event"}
    processor, _ = processor_on(
        plan_of(joiner, codecs, "joined_pair", (("left", "lefts"), ("right", "rights")))
    )
    call(processor, [event(0, 1, 1_000)])

    later = NOW + 61_000  # the key's timer is due
    joined = call(processor, [event(1, 1, 1_500)], now=later)
    woken: list[tuple[Any, ...]] = []
    processor._wake_up(BUCKET, Clock(later), woken.append)

    pairs = codec("joined_pair")
    assert [pairs.decode(OutputRow._make(row).value) for row in joined] == [
        {"left": {"k": 1, "v": "e", "at": 1_000}, "right": {"k": 1, "v": "e", "at": 1_500}}
    ]
    assert woken == []  # not a null result for the left record, nor the right one late


def test_a_key_whose_state_is_back_to_a_new_keys_is_dropped_by_default() -> None:
    context = JoinerContext(pipeline="p", fields={"stream": "click", "table": "region"})
    joiner = Regions(JoinerOptions(), context)
    codecs = {"stream": "click", "table": "user_region"}
    processor, state = processor_on(plan_of(joiner, codecs, "enriched_click", INPUTS))
    call(processor, [region_update("ada", "north", 1), region_update("bob", "south", 1)])

    call(processor, [region_update("ada", "", 2)])  # ada's state is {"region": None} again

    assert state.value is not None
    assert set(stored_bucket(processor.handle).keys) == {"bob"}


def _reported_timers(processor: JoinerProcessor) -> list[dict[str, int | None]]:
    """The timers the counts rows of the calls since the last ones report."""
    return [json.loads(row.value)["timers"] for row in processor._counts()]


def test_each_call_reports_the_timer_its_bucket_holds_after_it() -> None:
    processor, _ = processor_on(window_plan())
    call(processor, [event(0, 1, 1)])
    assert _reported_timers(processor) == [{"7": NOW + 60_000}]
    processor._wake_up(BUCKET, Clock(NOW + 60_000), [].append)  # key 1 is woken, and gone
    assert _reported_timers(processor) == [{"7": None}]
    assert _reported_timers(processor) == []  # nothing since


def test_a_replay_that_counts_nothing_still_reports_its_timers_and_once_that_it_replayed() -> None:
    processor, _ = processor_on(window_plan())
    processor.output = SimpleNamespace(skipped=True)  # type: ignore[assignment]
    processor.plan.joiner.context.count("matched")
    call(processor, [event(0, 1, 1)])
    assert [json.loads(row.value) for row in processor._counts()] == [
        {"timers": {"7": NOW + 60_000}, "replayed": 1}
    ]
    call(processor, [event(0, 1, 2)])  # the task's next call: its replay was told already
    assert [json.loads(row.value) for row in processor._counts()] == [
        {"timers": {"7": NOW + 60_000}}
    ]


def _written() -> Any:
    """The task's output as the counts read it: open, not a replay (its rows go to the test)."""
    return SimpleNamespace(skipped=False, records={}, dead_letters={})


class _LateFailingWindow(Window):
    """The window joiner, whose ``advance`` raises after it yielded what it yields."""

    def advance(self, key: str, state: Any, to: int, ctx: JoinerContext) -> Iterator[Any]:
        yield from super().advance(key, state, to, ctx)
        raise RuntimeError("tick")


def test_a_failing_advance_is_one_dead_letter_keyed_by_its_join_key_and_is_counted() -> None:
    context = JoinerContext(pipeline="p", fields={"left": "left", "right": "right"})
    joiner = _LateFailingWindow(WindowOptions(window=10_000, idle_timeout=60_000), context)
    inputs = (("left", "lefts"), ("right", "rights"))
    handle = Handle()
    processor, _ = processor_on(plan_of(joiner, _WINDOW_CODECS, "joined_pair", inputs), handle)
    processor.output = _written()
    call(processor, [event(0, 1, 1)])
    list(processor._counts())
    sent: list[tuple[Any, ...]] = []

    processor._wake_up(BUCKET, Clock(NOW + 60_000), sent.append)

    reason = (
        "joiner 'window' of plugin 'enrichd' raised RuntimeError('tick') in advance at event "
        "time 60001 of key '1'"
    )
    # Only the dead letter: the records the joiner yielded before it raised are not sent.
    (letter,) = sent
    assert letter[:9] == ("out.dlq", b"1", None, None, None, None, None, "JoinerFailed", reason)
    # No input record to take headers from: only why, with the exception as KIP-1034 has it.
    headers = dict(unpack(letter.headers))
    assert headers[ERROR_EXCEPTION] == b"RuntimeError"
    (counts,) = [json.loads(row.value) for row in processor._counts()]
    assert (counts["failed_calls"], counts["failures"]) == (1, [reason])
    # The key keeps its state, and wakes up again (a Kafka Streams punctuator goes on too).
    bucket = stored_bucket(handle)
    assert list(bucket.keys) == ["1"] and bucket.due["1"] > NOW + 60_000


class _Fragile(Lookup):
    """lookup, except that a click of 'boom' raises once the click's output is yielded."""

    def process(self, key: str, state: Any, records: Any, ctx: JoinerContext) -> Iterator[Any]:
        yield from super().process(key, state, records, ctx)
        if any(record.value and record.value["user"] == "boom" for record in records):
            raise RuntimeError("boom")


def test_a_failing_process_sends_nothing_it_yielded_and_stamps_only_what_was_sent() -> None:
    context = JoinerContext(pipeline="p", fields={"stream": "click", "table": "region"})
    joiner = _Fragile(LookupOptions(mode="left"), context)
    processor, _ = processor_on(plan_of(joiner, _LOOKUP_CODECS, "enriched_click", INPUTS))
    processor.output = _written()

    sent = call(processor, [region_update("ada", "north", 10), click("ada", 11), click("boom", 12)])

    assert [(row[0], row[7]) for row in sent] == [("out", None), ("out.dlq", "JoinerFailed")]
    assert sent[1][6] == 2  # the offset of boom's click, with its original bytes
    (counts,) = [json.loads(row.value) for row in processor._counts()]
    assert counts["failed_calls"] == 1 and "'boom'" in counts["failures"][0]
    # The output's source timestamp is stamped; boom's yielded output never was.
    assert counts["stamps"] == {"out": compact([11])}
