"""The asof joiner's logic in plain Python (daemon.testing), against a batch as-of join."""

from __future__ import annotations

import doctest
from collections.abc import Mapping, Sequence
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

import daemon.joiners.asof as asof_module
from daemon.joiners.asof import AsOf, AsOfState
from daemon.testing import JoinerHarness, by_key, run_joiner

KEYS = {"left": "who", "right": "who"}
TIMES = {"left": "t", "right": "t"}
ROLE_RANK = {"left": 0, "right": 1}


def line(who: str, t: int, arrival: int, **fields: Any) -> dict[str, Any]:
    """A replay line: event time ``t`` in the value, ``arrival`` as the Kafka timestamp."""
    return {"key": who, "value": {"who": who, "t": t, **fields}, "timestamp": arrival}


def arrival_order(inputs: Mapping[str, Sequence[Mapping[str, Any]]]) -> list[tuple[str, Any]]:
    """(role, line) in the order replay produces them: timestamp, role order, file order."""
    tagged = [
        (record["timestamp"], ROLE_RANK[role], i, role, record)
        for role, lines in inputs.items()
        for i, record in enumerate(lines)
    ]
    return [(role, record) for *_, role, record in sorted(tagged, key=lambda x: x[:3])]


def asof_batch(
    inputs: Mapping[str, Sequence[Mapping[str, Any]]],
    *,
    inclusive: bool = False,
    keys: Mapping[str, str] = KEYS,
    time: str = "t",
    left_id: str | None = None,
    fields: Mapping[str, str] | None = None,
) -> dict[str, dict[str, Any]]:
    """The batch as-of join over all inputs, written independently of the joiner.

    Per left identity (its last arrival wins): the right record of the same key with the
    greatest event time before (or at, if inclusive) the left event's; equal right event
    times: the last to arrive.
    """
    names = {"left": "left", "right": "right", **(fields or {})}
    ordered = arrival_order(inputs)
    rights = [
        (position, record["value"])
        for position, (role, record) in enumerate(ordered)
        if role == "right"
    ]
    result: dict[str, dict[str, Any]] = {}
    for role, record in ordered:
        if role != "left":
            continue
        value = record["value"]
        t = value[time]
        key = value[keys["left"]]
        identity = str(value[left_id]) if left_id else f"{key}@{t}"
        candidates = [
            (r[time], position, r)
            for position, r in rights
            if r[keys["right"]] == key and (r[time] <= t if inclusive else r[time] < t)
        ]
        best = max(candidates, key=lambda c: c[:2])[2] if candidates else None
        result[identity] = {names["left"]: value, names["right"]: best}
    return result


def latest(outputs: Sequence[Any]) -> dict[str, dict[str, Any]]:
    """The last value per output key without its revision number."""
    return {
        key: {k: v for k, v in values[-1].items() if k != "revision"}
        for key, values in by_key(outputs).items()
    }


def run(inputs: Mapping[str, Sequence[Mapping[str, Any]]], **options: Any) -> Any:
    batch_size = options.pop("batch_size", None)
    end = options.pop("end_of_input", True)
    return run_joiner(
        AsOf,
        inputs,
        keys=KEYS,
        times=TIMES,
        options=options,
        batch_size=batch_size,
        end_of_input=end,
    )


def test_docstring_example_runs() -> None:
    assert doctest.testmod(asof_module).failed == 0


def test_first_answer_is_immediate_with_null_right_when_none_known() -> None:
    result = run({"left": [line("ann", 20, 1, pick="tea")]})
    assert [(o.key, o.value) for o in result.outputs] == [
        ("ann@20", {"left": {"who": "ann", "t": 20, "pick": "tea"}, "right": None, "revision": 0})
    ]
    assert result.metrics["unmatched"] == 1


def test_strict_by_default_inclusive_on_request_at_equal_times() -> None:
    inputs = {
        "right": [line("ann", 5, 1, mood="calm"), line("ann", 10, 2, mood="glad")],
        "left": [line("ann", 10, 3)],
    }
    strict = run(inputs)
    inclusive = run(inputs, inclusive=True)
    assert [o.value["right"]["mood"] for o in strict.outputs] == ["calm"]
    assert [o.value["right"]["mood"] for o in inclusive.outputs] == ["glad"]


def test_equal_right_event_times_the_later_arrival_wins() -> None:
    inputs = {
        "right": [line("ann", 5, 1, mood="calm"), line("ann", 5, 2, mood="tense")],
        "left": [line("ann", 9, 3)],
    }
    assert [o.value["right"]["mood"] for o in run(inputs).outputs] == ["tense"]


def test_late_right_corrects_at_the_next_rejoin_only_where_the_answer_changed() -> None:
    """Interval 100: a late mood at 15 changes ann@20 but not ann@12; the correction comes when
    stream time crosses 100, not when the mood arrives, and not again afterwards."""
    harness = JoinerHarness(AsOf, keys=KEYS, times=TIMES, options={"rejoin_interval": "100ms"})
    harness.feed(
        {
            "right": [line("ann", 10, 1, mood="calm")],
            "left": [line("ann", 12, 2), line("ann", 20, 3)],
        }
    )
    harness.feed({"right": [line("ann", 15, 4, mood="grumpy")]})
    before_timer = [(o.key, o.value["revision"]) for o in harness.run.outputs]
    harness.feed({"left": [line("ann", 130, 5)]})  # stream time 130 crosses 100: re-join
    harness.feed({"left": [line("ann", 240, 6)]})  # crosses 200: nothing changed any more
    harness.end()

    assert before_timer == [("ann@12", 0), ("ann@20", 0)]
    outputs = [(o.key, o.value["right"]["mood"], o.value["revision"]) for o in harness.run.outputs]
    assert outputs == [
        ("ann@12", "calm", 0),
        ("ann@20", "calm", 0),
        ("ann@130", "grumpy", 0),  # the record that moves stream time is applied first
        ("ann@20", "grumpy", 1),
        ("ann@240", "grumpy", 0),
    ]
    assert harness.run.metrics["revisions"] == 1


def test_left_id_names_the_event_and_a_missing_id_is_a_dead_letter() -> None:
    inputs = {
        "right": [line("ann", 1, 1, mood="calm")],
        "left": [line("ann", 5, 2, id=7), line("ann", 5, 3)],
    }
    result = run(inputs, left_id="id")
    assert [o.key for o in result.outputs] == ["7"]
    assert [(d.kind, d.record.offset) for d in result.dead_letters] == [("MissingId", 1)]


def test_a_changed_left_event_is_a_new_revision_and_a_resent_one_is_not() -> None:
    inputs = {
        "left": [
            line("ann", 5, 1, id=7, pick="tea"),
            line("ann", 5, 2, id=7, pick="tea"),  # re-sent unchanged
            line("ann", 5, 3, id=7, pick="coffee"),
        ]
    }
    result = run(inputs, left_id="id")
    assert [(o.value["left"]["pick"], o.value["revision"]) for o in result.outputs] == [
        ("tea", 0),
        ("coffee", 1),
    ]


def test_records_older_than_the_history_retention_are_dead_letters() -> None:
    inputs = {
        "right": [line("ann", 1000, 1, mood="calm"), line("ann", 400, 3, mood="old")],
        "left": [line("ann", 1500, 2), line("ann", 499, 4), line("ann", 500, 5)],
    }
    result = run(inputs, history_retention="1s", rejoin_horizon="1s")
    late = [(d.kind, d.record.role, d.record.event_time) for d in result.dead_letters]
    assert late == [("LateRecord", "right", 400), ("LateRecord", "left", 499)]
    assert "history_retention" in result.dead_letters[0].reason
    # At the retention boundary a left event is still answered, with what preceded it.
    assert latest(result.outputs)["ann@500"]["right"] is None
    assert result.metrics == {"matched": 1, "unmatched": 1, "late_right": 1, "late_left": 1}


def test_state_stays_bounded_and_evicted_events_stop_changing() -> None:
    """A long stream of one key: a mood and a recommendation every 100 ms for 500 s. Right
    history stays within retention plus one record, left events within horizon plus one
    interval; a mood arriving late (within retention) for an evicted recommendation changes
    nothing, while one for a still-kept recommendation corrects it."""
    harness = JoinerHarness(
        AsOf,
        keys=KEYS,
        times=TIMES,
        options={"history_retention": "3s", "rejoin_horizon": "1s", "rejoin_interval": "500ms"},
    )
    arrival = 0
    sizes = []
    for step in range(0, 5000, 50):
        lefts, rights = [], []
        for i in range(step, step + 50):
            arrival += 1
            rights.append(line("ann", i * 100, arrival, mood=f"m{i}"))
            arrival += 1
            lefts.append(line("ann", i * 100 + 50, arrival))
        harness.feed({"right": rights, "left": lefts})
        state: AsOfState = harness.run.states["ann"]
        sizes.append((len(state.right_times), len(state.left)))
    assert max(r for r, _ in sizes) <= 3000 // 100 + 1 + 5  # + one interval between timers
    assert max(n for _, n in sizes) <= (1000 + 500) // 100 + 1
    assert sizes[-1][1] >= 1000 // 100  # the horizon's events are really kept

    stream_time = 4999 * 100 + 50
    before = len(harness.run.outputs)
    harness.feed(
        {
            "right": [
                line("ann", stream_time - 2550, arrival + 1, mood="late-evicted"),
                line("ann", stream_time - 20, arrival + 2, mood="late-kept"),
            ]
        }
    )
    harness.end()
    revised = [(o.key, o.value["right"]["mood"]) for o in harness.run.outputs[before:]]
    assert revised == [(f"ann@{stream_time}", "late-kept")]
    assert harness.run.dead_letters == []
    assert harness.run.states == {}


def test_processing_time_rejoin_by_wakeup_then_eviction_ends_wakeups() -> None:
    harness = JoinerHarness(
        AsOf,
        keys=KEYS,
        times=TIMES,
        options={
            "rejoin_on": "processing_time",
            "rejoin_interval": "1s",
            "rejoin_horizon": "3s",
            "history_retention": "3s",
        },
    )
    harness.feed({"right": [line("ann", 10, 1, mood="calm")], "left": [line("ann", 20, 2)]})
    assert harness.joiner.wakeup_ms(harness.run.states["ann"]) == 1000
    # A late mood: no re-join until the timer fires.
    harness.feed({"right": [line("ann", 15, 3, mood="grumpy")]})
    assert len(harness.run.outputs) == 1
    harness.wait(999)
    assert len(harness.run.outputs) == 1
    harness.wait(1)  # a quiet second: the wake-up re-joins
    assert [(o.value["right"]["mood"], o.value["revision"]) for o in harness.run.outputs] == [
        ("calm", 0),
        ("grumpy", 1),
    ]
    harness.wait(10_000)  # stream time moves on with quiet time: the event leaves the horizon
    state: AsOfState = harness.run.states["ann"]
    assert state.left == {} and harness.joiner.wakeup_ms(state) is None
    assert len(harness.run.outputs) == 2


def test_processing_time_rejoin_when_arrival_times_cross_an_interval() -> None:
    inputs = {
        "right": [line("ann", 10, 1, mood="calm"), line("ann", 15, 3, mood="grumpy")],
        "left": [line("ann", 20, 2), line("ann", 21, 1500)],
    }
    result = run(inputs, rejoin_on="processing_time", rejoin_interval="1s", end_of_input=False)
    assert [(o.key, o.value["right"]["mood"], o.value["revision"]) for o in result.outputs] == [
        ("ann@20", "calm", 0),
        ("ann@21", "grumpy", 0),
        ("ann@20", "grumpy", 1),  # the arrival at 1500 crossed 1000 ms: re-join
    ]


def test_options_are_checked() -> None:
    options = AsOf.Options.model_validate({"history_retention": "2h", "rejoin_horizon": "2h"})
    assert options.history_retention == options.rejoin_horizon == 7_200_000  # type: ignore[attr-defined]
    with pytest.raises(ValidationError, match="must not exceed history_retention"):
        AsOf.Options.model_validate({"history_retention": "1m", "rejoin_horizon": "2m"})
    with pytest.raises(ValidationError, match="rejoin_on"):
        AsOf.Options.model_validate({"rejoin_on": "wall_clock"})
    with pytest.raises(ValidationError, match="greater than 0"):
        AsOf.Options.model_validate({"rejoin_interval": 0})


# Random arrival orders: several keys, left and right events with event times 0..200 ms,
# arriving in any order; re-join every 30 ms of stream time; nothing late, nothing evicted.
event = st.tuples(st.sampled_from(["ann", "bob"]), st.integers(0, 20))
streams = st.tuples(
    st.lists(event, max_size=8), st.lists(event, max_size=8), st.randoms(use_true_random=False)
)


def shuffled(
    lefts: list[tuple[str, int]], rights: list[tuple[str, int]], rng: Any
) -> dict[str, list[dict[str, Any]]]:
    tagged = [("left", who, t * 10, n) for n, (who, t) in enumerate(lefts)]
    tagged += [("right", who, t * 10, n) for n, (who, t) in enumerate(rights)]
    rng.shuffle(tagged)
    inputs: dict[str, list[dict[str, Any]]] = {"left": [], "right": []}
    for arrival, (role, who, t, n) in enumerate(tagged, start=1):
        inputs[role].append(line(who, t, arrival, n=n))
    return inputs


LONG = {"history_retention": "1h", "rejoin_horizon": "1h", "rejoin_interval": "30ms"}


@settings(max_examples=300, deadline=None)
@given(streams=streams, inclusive=st.booleans())
def test_latest_revision_equals_the_batch_asof_join(streams: Any, inclusive: bool) -> None:
    inputs = shuffled(*streams)
    result = run(inputs, inclusive=inclusive, **LONG)
    assert latest(result.outputs) == asof_batch(inputs, inclusive=inclusive)
    assert result.states == {} and result.dead_letters == []


@settings(max_examples=200, deadline=None)
@given(streams=streams)
def test_first_answers_use_only_what_had_arrived_and_revisions_mark_changes(streams: Any) -> None:
    inputs = shuffled(*streams)
    outputs = by_key(run(inputs, **LONG).outputs)
    ordered = arrival_order(inputs)
    for position, (role, record) in enumerate(ordered):
        if role != "left":
            continue
        known = {"left": [record], "right": [r for ro, r in ordered[:position] if ro == "right"]}
        first = asof_batch(known)
        identity = next(iter(first))
        history = outputs[identity]
        if history[0]["left"] == record["value"]:  # the identity's first event
            assert history[0] == {**first[identity], "revision": 0}
    for history in outputs.values():
        assert [h["revision"] for h in history] == list(range(len(history)))
        pairs = [(h["left"], h["right"]) for h in history]
        assert all(a != b for a, b in zip(pairs, pairs[1:], strict=False))


@settings(max_examples=100, deadline=None)
@given(streams=streams, batch_size=st.integers(1, 5))
def test_outputs_do_not_depend_on_micro_batching(streams: Any, batch_size: int) -> None:
    inputs = shuffled(*streams)
    assert by_key(run(inputs, batch_size=batch_size, **LONG).outputs) == by_key(
        run(inputs, **LONG).outputs
    )


def test_an_expired_key_rejoins_its_kept_events_a_last_time_and_starts_afresh() -> None:
    """The history kept past the retention (the one current at its boundary) and the stream
    time would stay for ever; with a TTL they go, after a last re-join, as at the end."""
    harness = JoinerHarness(
        AsOf, keys=KEYS, times=TIMES, options={"rejoin_interval": "1h", "state_ttl": "1s"}
    )
    harness.feed({"right": [line("ann", 10, 1, mood="calm")], "left": [line("ann", 20, 2)]})
    harness.feed({"right": [line("ann", 15, 3, mood="grumpy")]})  # no re-join due yet
    harness.wait(1_000)
    outputs = [(o.key, o.value["right"]["mood"], o.value["revision"]) for o in harness.run.outputs]
    assert outputs == [("ann@20", "calm", 0), ("ann@20", "grumpy", 1)]
    assert harness.run.states == {} and harness.run.metrics["expired"] == 1
    harness.feed({"left": [line("ann", 5, 4)]})  # older than the old stream time: afresh
    assert harness.run.outputs[-1].value["right"] is None and harness.run.dead_letters == []
