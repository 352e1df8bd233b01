"""The table joiner's logic alone, without Spark: updates, modes, retractions, tombstones."""

from __future__ import annotations

import doctest
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

import daemon.joiners.table as table_module
from daemon.joiners.table import Table, TableOptions
from daemon.model.config import load_pipeline_file
from daemon.plugin.joiner import Emit
from daemon.testing import JoinerHarness, by_key, run_joiner

KEYS = {"left": "k", "right": "k"}

Step = tuple[int, str, str | None]  # timestamp, role, name (None: a tombstone)


def lines(steps: list[Step], k: int = 1) -> dict[str, list[dict[str, Any]]]:
    """Replay lines per role; a tombstone carries the join key as its Kafka key."""
    inputs: dict[str, list[dict[str, Any]]] = {"left": [], "right": []}
    for t, role, v in steps:
        value = None if v is None else {"k": k, "v": v}
        inputs[role].append({"key": k, "value": value, "timestamp": t})
    return inputs


def shown(outputs: list[Emit] | list[Any]) -> list[str | None]:
    """Each output as "L - R" (a missing side as "null"), a tombstone as None."""
    result: list[str | None] = []
    for out in outputs:
        value = out.value if isinstance(out, Emit) else out
        if value is None:
            result.append(None)
        else:
            left = value["left"]["v"] if value["left"] else "null"
            right = value["right"]["v"] if value["right"] else "null"
            result.append(f"{left} - {right}")
    return result


def run(steps: list[Step], mode: str, batch_size: int | None = None) -> Any:
    return run_joiner(Table, lines(steps), keys=KEYS, options={"mode": mode}, batch_size=batch_size)


def test_docstring_example_runs() -> None:
    assert doctest.testmod(table_module).failed == 0


def test_modes_are_checked() -> None:
    assert TableOptions().mode == "inner"
    with pytest.raises(ValidationError, match="'inner', 'left' or 'outer'"):
        TableOptions(mode="full")


def test_inner_emits_each_update_while_both_sides_exist_and_retracts_once() -> None:
    steps: list[Step] = [
        (1, "left", "A"),  # alone: nothing
        (2, "left", "B"),  # several left updates before the first right one
        (3, "right", "a"),  # B - a
        (4, "right", "b"),  # B - b
        (5, "left", "C"),  # C - b
        (6, "left", None),  # the join stops holding: a tombstone
        (7, "right", None),  # nothing left to retract
        (8, "right", "c"),  # left missing: nothing
    ]
    result = run(steps, "inner")
    assert shown(by_key(result.outputs)["1"]) == ["B - a", "B - b", "C - b", None]
    assert result.states == {"1": {"left": None, "right": {"k": 1, "v": "c"}, "emitted": False}}


def test_left_emits_whenever_the_left_side_exists() -> None:
    steps: list[Step] = [
        (1, "right", "a"),  # no left side: nothing
        (2, "left", "A"),  # A - a
        (3, "right", None),  # A - null
        (4, "right", "b"),  # A - b
        (5, "left", None),  # tombstone
        (6, "right", "c"),  # nothing
    ]
    assert shown(run(steps, "left").outputs) == ["A - a", "A - null", "A - b", None]


def test_outer_emits_whenever_either_side_exists() -> None:
    steps: list[Step] = [
        (1, "right", "a"),  # null - a
        (2, "left", "A"),  # A - a
        (3, "left", None),  # null - a
        (4, "right", None),  # tombstone
        (5, "right", None),  # nothing: already absent
    ]
    result = run(steps, "outer")
    assert shown(result.outputs) == ["null - a", "A - a", "null - a", None]
    assert result.states == {}


def test_no_tombstone_for_a_join_that_never_held() -> None:
    steps: list[Step] = [(1, "left", "A"), (2, "left", None), (3, "right", None)]
    result = run(steps, "inner")
    assert result.outputs == []
    assert result.states == {}


def test_deleting_an_absent_side_changes_nothing() -> None:
    steps: list[Step] = [(1, "left", "A"), (2, "right", None), (3, "right", None)]
    assert shown(run(steps, "left").outputs) == ["A - null"]


def test_results_are_keyed_by_the_join_key_and_keys_are_independent() -> None:
    inputs = lines([(1, "left", "A"), (3, "right", "a")], k=1)
    other = lines([(2, "left", "X"), (4, "right", "x"), (5, "left", None)], k=2)
    both = {role: inputs[role] + other[role] for role in inputs}
    result = run_joiner(Table, both, keys=KEYS)
    assert {key: shown(values) for key, values in by_key(result.outputs).items()} == {
        "1": ["A - a"],
        "2": ["X - x", None],
    }
    assert all(out.source is not None for out in result.outputs)


def test_updates_apply_in_event_time_order_within_a_micro_batch() -> None:
    # Event time from the field `at`: the left update at 1 is older than the one at 2,
    # though it arrives later; the key's latest left value is B either way.
    inputs = {
        "left": [
            {"key": 1, "value": {"k": 1, "v": "B", "at": 2}, "timestamp": 1},
            {"key": 1, "value": {"k": 1, "v": "A", "at": 1}, "timestamp": 2},
        ],
        "right": [{"key": 1, "value": {"k": 1, "v": "a", "at": 3}, "timestamp": 3}],
    }
    times = {"left": "at", "right": "at"}
    result = run_joiner(Table, inputs, keys=KEYS, times=times)
    assert shown(result.outputs) == ["B - a"]


# Kafka Streams' "Join Semantics" wiki page, KTable-KTable join table (the KIP-77 join
# semantics of 0.10.2 and newer, with the KTable cache off so that every result shows): one
# key, records processed in timestamp order. Inputs (ts:value, null = tombstone):
#   left:  1:null 3:A 5:B 7:null 9:C 12:null 15:D
#   right: 2:null 4:a 6:b 8:null 10:c 11:null 13:null 14:d
KAFKA_STEPS: list[Step] = [
    (1, "left", None),
    (2, "right", None),
    (3, "left", "A"),
    (4, "right", "a"),
    (5, "left", "B"),
    (6, "right", "b"),
    (7, "left", None),
    (8, "right", None),
    (9, "left", "C"),
    (10, "right", "c"),
    (11, "right", None),
    (12, "left", None),
    (13, "right", None),
    (14, "right", "d"),
    (15, "left", "D"),
]
# The documented output per input record (None: a tombstone), per join.
KAFKA_DOCUMENTED: dict[str, list[str | None]] = {
    "inner": [
        *(None, None, None),
        *("A - a", "B - a", "B - b"),
        *(None, None, None),
        "C - c",
        *(None, None, None, None),
        "D - d",
    ],
    "left": [
        *(None, None),
        *("A - null", "A - a", "B - a", "B - b"),
        *(None, None),
        *("C - null", "C - c", "C - null"),
        *(None, None, None),
        "D - d",
    ],
    "outer": [
        *(None, None),
        *("A - null", "A - a", "B - a", "B - b", "null - b"),
        None,
        *("C - null", "C - c", "C - null"),
        *(None, None),
        *("null - d", "D - d"),
    ],
}


def without_idle_tombstones(outputs: list[str | None]) -> list[str | None]:
    """Drop each tombstone that retracts nothing (no result since the last tombstone)."""
    kept: list[str | None] = []
    for out in outputs:
        if out is None and (not kept or kept[-1] is None):
            continue
        kept.append(out)
    return kept


@pytest.mark.parametrize("mode", ["inner", "left", "outer"])
def test_kafka_streams_documented_table_table_join(mode: str) -> None:
    """enrichd emits Kafka Streams' documented results, without the tombstones that retract
    nothing (Kafka emits one for every update that leaves no result, even where no result
    existed); so a compacted output topic ends with the same content."""
    result = run(KAFKA_STEPS, mode)
    ours = shown(result.outputs)
    assert ours == without_idle_tombstones(KAFKA_DOCUMENTED[mode])
    assert ours[-1] == KAFKA_DOCUMENTED[mode][-1] == "D - d"
    assert result.dead_letters == []
    for batch_size in (1, 4):
        assert shown(run(KAFKA_STEPS, mode, batch_size=batch_size).outputs) == ours


def test_the_example_pipeline_is_a_valid_table_join() -> None:
    example = Path(__file__).resolve().parents[3] / "examples" / "table-join.toml"
    (pipeline,) = load_pipeline_file(example).pipeline
    assert pipeline.joiner == "table"
    assert TableOptions(**pipeline.options).mode == "outer"
    assert set(pipeline.inputs) == set(Table.roles)


@pytest.mark.parametrize(
    ("mode", "before", "after"),
    [("inner", ["A - a"], []), ("outer", ["A - null", "A - a"], ["null - b"])],
)
def test_an_expired_key_forgets_both_sides_and_retracts_nothing(
    mode: str, before: list[str | None], after: list[str | None]
) -> None:
    """Expiry writes nothing; a later update finds the other side absent, as after a
    tombstone, with no result of its own out there to retract."""
    kit = JoinerHarness(Table, keys=KEYS, options={"mode": mode, "state_ttl": "1s"})
    kit.feed(lines([(1, "left", "A"), (2, "right", "a")]))
    kit.wait(1_000)
    assert shown(kit.run.outputs) == before and kit.run.states == {}
    kit.feed(lines([(3, "right", "b")]))
    assert shown(kit.run.outputs) == [*before, *after]
    assert kit.run.metrics["expired"] == 1
