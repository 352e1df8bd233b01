"""The window joiner's logic alone, without Spark: pairs, edges, lateness, closing, idle time.

Records carry their event time in the field ``at``; the Kafka timestamp (``timestamp``) is
the arrival order, so a test can deliver records out of event-time order.
"""

from __future__ import annotations

import doctest
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

import daemon.joiners.window as window_module
from daemon.joiners.window import Window, WindowOptions
from daemon.model.config import load_pipeline_file
from daemon.plugin.joiner import Emit, JoinerContext
from daemon.testing import JoinerHarness, run_joiner

KEYS = {"left": "k", "right": "k"}
TIMES = {"left": "at", "right": "at"}


def rec(v: str, at: int, arrival: int, k: int = 1) -> dict[str, Any]:
    """A replay line: join key ``k``, name ``v``, event time ``at``, Kafka timestamp ``arrival``."""
    return {"key": k, "value": {"k": k, "v": v, "at": at}, "timestamp": arrival}


def in_order(role_lines: dict[str, list[tuple[str, int]]]) -> dict[str, list[dict[str, Any]]]:
    """Records that arrive in event-time order (arrival = event time), as in Kafka's tables."""
    return {role: [rec(v, at, at) for v, at in lines] for role, lines in role_lines.items()}


def names(outputs: list[Emit]) -> list[tuple[str | None, str | None]]:
    """Each output as (left name, right name), None for a null side."""
    return [
        (
            out.value["left"]["v"] if out.value["left"] else None,
            out.value["right"]["v"] if out.value["right"] else None,
        )
        for out in outputs
        if out.value is not None
    ]


def run(inputs: dict[str, list[dict[str, Any]]], **options: Any) -> Any:
    return run_joiner(Window, inputs, keys=KEYS, times=TIMES, options=options)


def harness(**options: Any) -> JoinerHarness:
    return JoinerHarness(Window, keys=KEYS, times=TIMES, options=options)


def test_docstring_example_runs() -> None:
    assert doctest.testmod(window_module).failed == 0


def test_options_take_a_window_or_both_sides_and_reject_the_rest() -> None:
    assert WindowOptions(window="10s").window == 10_000
    sided = Window(WindowOptions(window="10s", after="2s"), JoinerContext("t", {}))
    assert (sided.before, sided.after, sided.grace) == (10_000, 2_000, 0)
    assert WindowOptions.model_fields["idle_timeout"].default == 60_000
    with pytest.raises(ValidationError, match="give `window`"):
        WindowOptions(before="1s")
    with pytest.raises(ValidationError, match="greater than or equal to 0"):
        WindowOptions(window=-1)
    with pytest.raises(ValidationError, match="greater than 0"):
        WindowOptions(window="1s", idle_timeout="0ms")
    with pytest.raises(ValidationError, match="inner"):
        WindowOptions(window="1s", mode="full")
    with pytest.raises(ValidationError, match="Extra inputs"):
        WindowOptions(window="1s", size="1s")


def test_several_lefts_before_the_first_right_all_join_it_and_every_later_right() -> None:
    inputs = in_order({"left": [("A", 1), ("B", 2), ("C", 3)], "right": [("a", 4), ("b", 5)]})
    result = run(inputs, window="10ms")
    # The cartesian product, each pair once, emitted when its later record arrives.
    assert names(result.outputs) == [
        ("A", "a"),
        ("B", "a"),
        ("C", "a"),
        ("A", "b"),
        ("B", "b"),
        ("C", "b"),
    ]
    assert result.metrics["matched"] == 6
    assert all(out.key == "1" for out in result.outputs)
    assert [out.source.value["v"] for out in result.outputs] == ["a"] * 3 + ["b"] * 3


def test_window_edges_are_included_on_both_sides() -> None:
    # before = 3, after = 5: a right record at tR joins the left record at 100 iff
    # 97 <= tR <= 105.
    inputs = in_order(
        {"left": [("L", 100)], "right": [("96", 96), ("97", 97), ("105", 105), ("106", 106)]}
    )
    assert names(run(inputs, before="3ms", after="5ms").outputs) == [("L", "97"), ("L", "105")]
    symmetric = in_order({"left": [("L", 100)], "right": [(str(t), t) for t in (94, 95, 105, 106)]})
    assert names(run(symmetric, window="5ms").outputs) == [("L", "95"), ("L", "105")]


def test_a_record_is_late_once_its_own_window_and_grace_have_passed() -> None:
    # before = 2, after = 10, grace = 0; stream time 100 from the left record L.
    # A right record's window reaches `before` past it: 98 + 2 >= 100 is on time, 97 is not.
    # A left record's window reaches `after` past it: 90 + 10 >= 100 is on time, 89 is not.
    inputs = {
        "left": [rec("L", 100, 1), rec("L90", 90, 4), rec("L89", 89, 5)],
        "right": [rec("r98", 98, 2), rec("r97", 97, 3)],
    }
    result = run(inputs, before="2ms", after="10ms")
    assert names(result.outputs) == [("L", "r98"), ("L90", "r98")]
    late = [(d.record.value["v"], d.kind) for d in result.dead_letters]
    assert late == [("r97", "LateRecord"), ("L89", "LateRecord")]
    reason = result.dead_letters[0].reason
    assert "1 ms late" in reason and "stream time is 100" in reason
    assert result.metrics["late"] == 2


def test_out_of_order_records_within_the_window_join_even_without_grace() -> None:
    inputs = {"left": [rec("L", 100, 1)], "right": [rec("r", 95, 2)]}
    assert names(run(inputs, window="10ms").outputs) == [("L", "r")]


def test_a_late_record_neither_joins_nor_moves_stream_time() -> None:
    inputs = {
        "left": [rec("L", 100, 1), rec("old", 10, 2), rec("L2", 25, 4)],
        "right": [rec("r", 15, 3)],
    }
    result = run(inputs, window="10ms", grace="76ms")
    # `old` (10 + 10 + 76 < 100) is late and not kept, so `r` at 15 (15 + 10 + 76 >= 100)
    # does not join it; L2 at 25 is on time and joins `r`.
    assert [d.record.value["v"] for d in result.dead_letters] == ["old"]
    assert names(result.outputs) == [("L2", "r")]


def test_each_mode_emits_its_unmatched_records_once_their_windows_close() -> None:
    inputs = in_order(
        {"left": [("A", 1), ("C", 200)], "right": [("b", 100), ("c", 205)]},
    )
    assert names(run(inputs, window="10ms", mode="inner").outputs) == [("C", "c")]
    assert names(run(inputs, window="10ms", mode="left").outputs) == [("A", None), ("C", "c")]
    assert names(run(inputs, window="10ms", mode="outer").outputs) == [
        ("A", None),
        (None, "b"),
        ("C", "c"),
    ]


def test_unmatched_waits_until_no_on_time_partner_can_arrive() -> None:
    # window 10, grace 5: E at 30 closes once stream time passes 30 + 10 + 10 + 5 = 55.
    # At stream time 55 a right record at 40 (E's window edge) is still on time
    # (40 + 10 + 5 >= 55) and joins E, so emitting "E - null" earlier would be spurious.
    waits = harness(window="10ms", grace="5ms", mode="left")
    waits.feed({"left": [rec("E", 30, 1)]})
    waits.feed({"right": [rec("x", 55, 2)]})
    assert waits.run.outputs == []
    waits.feed({"right": [rec("r40", 40, 3)]})
    assert names(waits.run.outputs) == [("E", "r40")]
    waits.end()
    assert names(waits.run.outputs) == [("E", "r40")]  # matched: never also "E - null"

    closes = harness(window="10ms", grace="5ms", mode="left")
    closes.feed({"left": [rec("E", 30, 1)]})
    closes.feed({"right": [rec("x", 56, 2)]})
    assert names(closes.run.outputs) == [("E", None)]
    closes.feed({"right": [rec("r40", 40, 3)]})  # now 1 ms late: E's null result stands
    assert [d.kind for d in closes.run.dead_letters] == ["LateRecord"]
    assert names(closes.run.outputs) == [("E", None)]


def test_kafka_streams_documented_stream_stream_join() -> None:
    """Kafka Streams' "Join Semantics" wiki page, improved left/outer stream-stream join
    (3.1 and newer), example with a window of 10 and a grace period of 5, one key, records
    processed in timestamp order. Documented facts:

    inputs  left:  1:null 3:A 5:B 7:null 9:C 12:null 15:D 30:E 45:F 75:G
            right: 2:null 4:a 6:b 8:null 10:c 11:null 13:null 14:d 60:f
    outputs (left join and outer join, per input record):
            4: A-a   5: B-a   6: A-b B-b   9: C-a C-b   10: A-c B-c C-c   14: B-d C-d
            15: D-b D-c D-d   45: E-null   60: F-null   75 (outer only): null-f
    Null values are skipped by Kafka Streams; the inner join gives the same pairs.

    enrichd gives the same records in the same order, plus G-null at the end of input
    (G's window closes after the table ends), and dead-letters the seven null values
    instead of skipping them. The moments differ: enrichd emits a null result once no
    on-time partner can arrive (t + before + after + grace), Kafka Streams at
    t + after + grace, so E-null comes with f at 60 instead of F at 45.
    """
    left = [("A", 3), ("B", 5), ("C", 9), ("D", 15), ("E", 30), ("F", 45), ("G", 75)]
    right = [("a", 4), ("b", 6), ("c", 10), ("d", 14), ("f", 60)]
    nulls = {"left": [1, 7, 12], "right": [2, 8, 11, 13]}
    kafka_pairs = [
        ("A", "a"),
        ("B", "a"),
        ("A", "b"),
        ("B", "b"),
        ("C", "a"),
        ("C", "b"),
        ("A", "c"),
        ("B", "c"),
        ("C", "c"),
        ("B", "d"),
        ("C", "d"),
        ("D", "b"),
        ("D", "c"),
        ("D", "d"),
    ]
    kafka_left = [*kafka_pairs, ("E", None), ("F", None)]
    kafka_outer = [*kafka_left, (None, "f")]

    for mode, kafka in (("inner", kafka_pairs), ("left", kafka_left), ("outer", kafka_outer)):
        steps = harness(window="10ms", grace="5ms", mode=mode)
        moments: list[tuple[int, tuple[str | None, str | None]]] = []
        lines = sorted(
            [(t, role, v) for role, rs in (("left", left), ("right", right)) for v, t in rs]
            + [(t, role, None) for role, ts in nulls.items() for t in ts]
        )
        for t, role, v in lines:
            before = len(steps.run.outputs)
            value = None if v is None else {"k": 1, "v": v, "at": t}
            steps.feed({role: [{"key": 1, "value": value, "timestamp": t}]})
            moments += [(t, pair) for pair in names(steps.run.outputs[before:])]
        before = len(steps.run.outputs)
        steps.end()
        at_end = names(steps.run.outputs[before:])

        ours = [pair for _, pair in moments] + at_end
        assert ours == kafka + ([] if mode == "inner" else [("G", None)])
        assert [d.kind for d in steps.run.dead_letters] == ["UnroutableTombstone"] * 7
        if mode != "inner":
            assert (60, ("E", None)) in moments and (75, ("F", None)) in moments


def test_state_stays_bounded_and_empties_when_windows_close() -> None:
    # One record per ms, alternating sides; window 10, grace 5: a record is kept until
    # stream time passes t + 25, so at most 26 records are ever held.
    steps = harness(window="10ms", grace="5ms", mode="outer")
    most = 0
    for t in range(1, 2001):
        role = "left" if t % 2 else "right"
        steps.feed({role: [rec(str(t), t, t)]})
        most = max(most, len(steps.run.states["1"]["held"]))
    assert most == 26
    assert steps.run.metrics["evicted"] == 2000 - 26
    steps.end()
    assert steps.run.states == {}


def test_idle_timeout_closes_the_windows_of_a_quiet_key_then_forgets_it() -> None:
    steps = harness(window="10s", idle_timeout="1m", mode="left")
    steps.feed({"left": [rec("A", 1_000, 1)]})
    assert steps.joiner.wakeup_ms(steps.run.states["1"]) == 60_000
    steps.wait(59_999)
    assert steps.run.outputs == []
    # After a minute of quiet the key's stream time is 1 000 + 60 000, past A's 21 000.
    steps.wait(1)
    assert names(steps.run.outputs) == [("A", None)]
    assert steps.run.states == {}


def test_a_quiet_key_with_a_long_window_closes_after_enough_idle_periods() -> None:
    steps = harness(window="1m", idle_timeout="1m", mode="left")
    steps.feed({"left": [rec("A", 0, 1)]})
    steps.wait(120_000)  # stream time 120 000: A is kept until it passes 120 000
    assert steps.run.outputs == []
    steps.wait(60_000)
    assert names(steps.run.outputs) == [("A", None)]


def test_a_key_whose_windows_closed_keeps_its_stream_time_until_idle() -> None:
    steps = harness(window="10ms", idle_timeout="1m")
    steps.feed({"left": [rec("A", 0, 1)], "right": [rec("b", 100, 2)]})
    steps.feed({"right": [rec("c", 200, 3)]})
    state = steps.run.states["1"]
    assert [h.record.value["v"] for h in state["held"]] == ["c"] and state["time"] == 200
    steps.feed({"left": [rec("old", 5, 4)]})  # judged against stream time 200: late
    assert [d.record.value["v"] for d in steps.run.dead_letters] == ["old"]
    steps.wait(60_000)
    assert steps.run.states == {}


def test_wakeup_is_asked_only_while_the_key_holds_something() -> None:
    joiner = Window(WindowOptions(window="1s", idle_timeout="30s"), JoinerContext("t", {}))
    assert joiner.wakeup_ms(joiner.initial_state()) is None
    assert joiner.is_empty(joiner.initial_state())


def test_output_fields_follow_the_inputs_field_names() -> None:
    result = run_joiner(
        Window,
        in_order({"left": [("o", 1)], "right": [("p", 2)]}),
        keys=KEYS,
        times=TIMES,
        options={"window": "5ms"},
        fields={"left": "order", "right": "payment"},
    )
    assert [(out.key, sorted(out.value)) for out in result.outputs] == [("1", ["order", "payment"])]


Record = tuple[str, int, int]  # role, key, event time


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[list[Record], dict[str, Any]]:
    records = draw(
        st.lists(
            st.tuples(
                st.sampled_from(["left", "right"]),
                st.integers(1, 2),
                st.integers(0, 60),
            ),
            max_size=30,
        )
    )
    options: dict[str, Any] = {
        "before": draw(st.integers(0, 8)),
        "after": draw(st.integers(0, 8)),
        "grace": draw(st.integers(0, 8)),
        "mode": draw(st.sampled_from(["inner", "left", "outer"])),
    }
    return records, options


def reference(
    records: list[Record], options: dict[str, Any]
) -> tuple[set[tuple[str, str]], set[str], set[str]]:
    """The join by definition: late verdicts in arrival order, then every pair of on-time
    records within the window, and the on-time records without a partner, per mode."""
    before, after, grace = options["before"], options["after"], options["grace"]
    stream_time: dict[int, int] = {}
    on_time, late = [], set()
    for n, (role, key, t) in enumerate(records):
        reach = after if role == "left" else before
        if key in stream_time and t + reach + grace < stream_time[key]:
            late.add(f"{role}{n}")
            continue
        stream_time[key] = max(stream_time.get(key, t), t)
        on_time.append((f"{role}{n}", role, key, t))
    pairs = {
        (lid, rid)
        for lid, lrole, lkey, lt in on_time
        for rid, rrole, rkey, rt in on_time
        if lrole == "left" and rrole == "right" and lkey == rkey and lt - before <= rt <= lt + after
    }
    paired = {name for pair in pairs for name in pair}
    shown = {"inner": (), "left": ("left",), "outer": ("left", "right")}[options["mode"]]
    unmatched = {name for name, role, _, _ in on_time if role in shown and name not in paired}
    return pairs, unmatched, late


@settings(max_examples=300, deadline=None)
@given(scenarios())
def test_every_pair_once_no_early_nulls_for_any_batching(
    scenario: tuple[list[Record], dict[str, Any]],
) -> None:
    records, options = scenario
    keep = options["before"] + options["after"] + options["grace"]
    pairs, unmatched, late = reference(records, options)
    inputs: dict[str, list[dict[str, Any]]] = {"left": [], "right": []}
    arrival: dict[str, list[int]] = {"left": [], "right": []}
    for n, (role, key, t) in enumerate(records):
        inputs[role].append(
            {"key": key, "value": {"k": key, "v": f"{role}{n}", "at": t}, "timestamp": n + 1}
        )
        arrival[role].append(n)

    seen = []
    for batch_size in (None, 1, 4):
        result = run_joiner(
            Window, inputs, keys=KEYS, times=TIMES, options=options, batch_size=batch_size
        )
        got = [
            (
                out.key,
                out.value["left"] and out.value["left"]["v"],
                out.value["right"] and out.value["right"]["v"],
            )
            for out in result.outputs
        ]
        seen.append(sorted(got, key=lambda out: out[0]))  # the order within a key is defined
        emitted_pairs = [(lv, rv) for _, lv, rv in got if lv and rv]
        assert len(emitted_pairs) == len(set(emitted_pairs))  # each pair exactly once
        assert set(emitted_pairs) == pairs
        assert {lv or rv for _, lv, rv in got if not (lv and rv)} == unmatched
        assert len([1 for _, lv, rv in got if not (lv and rv)]) == len(unmatched)
        assert {d.record.value["v"] for d in result.dead_letters} == late
        assert result.states == {}
    assert seen[0] == seen[1] == seen[2]

    # Fed one record per micro-batch: a null result appears only once stream time has passed
    # its record's event time + before + after + grace.
    steps = harness(**options)
    stream_time: dict[int, int] = {}
    for n, (role, key, t) in enumerate(records):
        count = len(steps.run.outputs)
        steps.feed({role: [inputs[role][arrival[role].index(n)]]})
        if f"{role}{n}" not in late:
            stream_time[key] = max(stream_time.get(key, t), t)
        for out in steps.run.outputs[count:]:
            if out.value["left"] is None or out.value["right"] is None:
                lonely = out.value["left"] or out.value["right"]
                assert stream_time[lonely["k"]] > lonely["at"] + keep


def test_the_example_pipeline_is_a_valid_window_join() -> None:
    example = Path(__file__).resolve().parents[3] / "examples" / "window-join.toml"
    (pipeline,) = load_pipeline_file(example).pipeline
    assert pipeline.joiner == "window"
    options = WindowOptions(**pipeline.options)
    assert (options.window, options.grace, options.mode) == (10_000, 2_000, "left")
