"""The processor's side of a call: the engine core over the call's records, what it keeps of a
key's state, data before expired timers, and the timers its counts rows report.

The engine's path through Spark is covered by ``tests/joins/test_lookup.py`` and
``tests/joins/test_engine_time.py``; here the processor runs on an in-memory stand-in for its
state handle (``processor_calls.py``). How it keeps a bucket is ``test_bucket_store.py``'s.
"""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

from daemon.joiners.window import Window, WindowOptions
from daemon.model.wire import OutputRow
from daemon.operator.processor import JoinerProcessor
from daemon.operator.state_format import EVENT_TIME
from daemon.plugin.joiner import JoinerContext, JoinerOptions
from tests.unit.operator.processor_calls import (
    BUCKET,
    INPUTS,
    NOW,
    Clock,
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


def test_a_replay_that_counts_nothing_still_reports_its_timers() -> None:
    processor, _ = processor_on(window_plan())
    processor.output = SimpleNamespace(skipped=True)  # type: ignore[assignment]
    processor.plan.joiner.context.count("matched")
    call(processor, [event(0, 1, 1)])
    assert [json.loads(row.value) for row in processor._counts()] == [
        {"timers": {"7": NOW + 60_000}}
    ]
