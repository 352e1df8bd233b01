"""The table joiner through `daemon replay`, the real broker and the real Spark engine.

One replay per mode holds every scenario, each in its own join key:

- key 1: the example of Kafka Streams' join semantics page, compared with its documented
  results (see :data:`KAFKA_DOCUMENTED`);
- key 2: several left updates before the first right one, then more right updates;
- key 3: tombstones on both sides, and a tombstone for a side that is already absent;
- key 4: a left row that is deleted before any right row exists;
- keys 10..: seeded random updates and deletes, checked against the joiner's plain-Python
  run, which tests/unit/joiners/test_table.py pins rule by rule.

Tombstones carry the join key as their Kafka key (both roles are ``keyed_tombstones``).
Event time is the Kafka timestamp. The steps' timestamps give each key's order, the only
thing a table join reads from them; the replay re-times the steps so that the keys take
turns (see :func:`dealt`), and each of a capped run's few micro-batch boundaries then cuts
through every long key's history.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from daemon.joiners.table import Table
from daemon.model.config import load_pipeline_file
from daemon.replay import ReplayResult, replay
from daemon.testing import by_key, replay_joiner, run_joiner
from tests.unit.joiners.test_table import KAFKA_STEPS as LOGIC_STEPS

ROOT = Path(__file__).resolve().parents[2]
SCHEMAS = {
    "left": ROOT / "schemas" / "left_event.avsc",
    "right": ROOT / "schemas" / "right_event.avsc",
}
OUTPUT = ROOT / "schemas" / "joined_pair.avsc"
EXAMPLE = ROOT / "examples" / "table-join.toml"  # mode = "outer"
KEYS = {"left": "k", "right": "k"}
RANDOM_KEYS = range(10, 18)

Step = tuple[int, str, str | None]  # timestamp, role, name (None: a tombstone)

# Kafka Streams' "Join Semantics" wiki page, KTable-KTable join (the KIP-77 join semantics of
# 0.10.2 and newer, KTable cache off so that every result shows), one key, timestamp order:
KAFKA_STEPS: list[Step] = LOGIC_STEPS  # one transcription, shared with the logic tests
# ... and its documented output per input record (None: a tombstone):
KAFKA_DOCUMENTED: dict[str, list[str | None]] = {
    "inner": [None, None, None, "A-a", "B-a", "B-b", None, None, None, "C-c"]
    + [None, None, None, None, "D-d"],
    "left": [None, None, "A-null", "A-a", "B-a", "B-b", None, None, "C-null", "C-c"]
    + ["C-null", None, None, None, "D-d"],
    "outer": [None, None, "A-null", "A-a", "B-a", "B-b", "null-b", None, "C-null", "C-c"]
    + ["C-null", None, None, "null-d", "D-d"],
}
# enrichd emits the same, except the tombstones that retract nothing (where no result was
# out since the last tombstone, Kafka Streams still emits one):
ENRICHD_FOR_KAFKA_STEPS: dict[str, list[str | None]] = {
    "inner": ["A-a", "B-a", "B-b", None, "C-c", None, "D-d"],
    "left": ["A-null", "A-a", "B-a", "B-b", None, "C-null", "C-c", "C-null", None, "D-d"],
    "outer": ["A-null", "A-a", "B-a", "B-b", "null-b", None, "C-null", "C-c", "C-null", None]
    + ["null-d", "D-d"],
}


def line(k: int, t: int, v: str | None) -> dict[str, Any]:
    return {"key": k, "value": None if v is None else {"k": k, "v": v}, "timestamp": t}


def scripted() -> tuple[list[tuple[int, Step]], dict[str, dict[str, list[str | None]]]]:
    """The hand-checked keys 1..4 as (key, step), and their expected outputs per mode."""
    steps = [(1, step) for step in KAFKA_STEPS]
    steps += [(2, (100 + i, "left", v)) for i, v in enumerate("ABC")]
    steps += [(2, (103 + i, "right", v)) for i, v in enumerate("abc")]
    steps += [
        (3, (200, "left", "X")),
        (3, (201, "right", "x")),
        (3, (202, "right", None)),
        (3, (203, "right", None)),  # already absent: nothing
        (3, (204, "left", None)),
        (3, (205, "right", "y")),
    ]
    steps += [(4, (300, "left", "Q")), (4, (301, "left", None))]
    expected = {
        "inner": {
            "1": ENRICHD_FOR_KAFKA_STEPS["inner"],
            "2": ["C-a", "C-b", "C-c"],
            "3": ["X-x", None],
            "4": [],
        },
        "left": {
            "1": ENRICHD_FOR_KAFKA_STEPS["left"],
            "2": ["A-null", "B-null", "C-null", "C-a", "C-b", "C-c"],
            "3": ["X-null", "X-x", "X-null", None],
            "4": ["Q-null", None],
        },
        "outer": {
            "1": ENRICHD_FOR_KAFKA_STEPS["outer"],
            "2": ["A-null", "B-null", "C-null", "C-a", "C-b", "C-c"],
            "3": ["X-null", "X-x", "X-null", None, "null-y"],
            "4": ["Q-null", None],
        },
    }
    return steps, expected


def random_steps() -> list[tuple[int, Step]]:
    """Updates and deletes of both sides for keys 10.., in a seeded random order."""
    rng = random.Random(11)  # noqa: S311 - test data, not security
    steps = []
    for k in RANDOM_KEYS:
        for n in range(12):
            role = rng.choice(["left", "right"])
            name = None if rng.random() < 0.3 else f"{role[0]}{n}"
            steps.append((k, (1000 * k + n, role, name)))
    return steps


def dealt(steps: list[tuple[int, Step]]) -> list[tuple[int, Step]]:
    """The steps with new timestamps that take the keys in turn, each key's order kept: the
    n-th step of every key comes before the (n+1)-th step of any key."""
    keys = sorted({k for k, _ in steps})
    rank: dict[int, int] = {}
    out = []
    for k, (_, role, v) in sorted(steps, key=lambda s: s[1][0]):
        n = rank[k] = rank.get(k, -1) + 1
        out.append((k, (1 + n * len(keys) + keys.index(k), role, v)))
    return sorted(out, key=lambda s: s[1][0])


def inputs() -> tuple[dict[str, list[dict[str, Any]]], dict[str, dict[str, list[str | None]]]]:
    steps, expected = scripted()
    lines: dict[str, list[dict[str, Any]]] = {"left": [], "right": []}
    for k, (t, role, v) in dealt(steps + random_steps()):
        lines[role].append(line(k, t, v))
    return lines, expected


def quarter() -> int:
    """A cap that splits the replay into four micro-batches."""
    lines, _ = inputs()
    return -(-sum(map(len, lines.values())) // 4)


def shown(values: list[Any]) -> list[str | None]:
    return [
        None
        if value is None
        else f"{value['left']['v'] if value['left'] else 'null'}-"
        f"{value['right']['v'] if value['right'] else 'null'}"
        for value in values
    ]


def replay_table(mode: str, broker: Any, max_batch: int | None = None) -> ReplayResult:
    lines, _ = inputs()
    return replay_joiner(
        "table",
        lines,
        schemas=SCHEMAS,
        output_schema=OUTPUT,
        keys=KEYS,
        options={"mode": mode},
        max_batch=max_batch,
        bootstrap_servers=broker.bootstrap_servers,
    )


def check(result: ReplayResult, mode: str) -> dict[str, list[Any]]:
    lines, expected = inputs()
    got = by_key(result.outputs)
    for key, want in expected[mode].items():
        assert shown(got.get(key, [])) == want, f"key {key}"
    plain_run = run_joiner(
        Table, lines, keys=KEYS, options={"mode": mode}, schemas=SCHEMAS, output_schema=OUTPUT
    )
    plain = by_key(plain_run.outputs)
    for k in RANDOM_KEYS:
        assert got.get(str(k), []) == plain.get(str(k), []), f"key {k}"
    assert any(got.get(str(k)) for k in RANDOM_KEYS)
    assert result.dead_letters == []
    return got


def test_the_kafka_streams_comparison_is_a_filter_of_the_documented_results() -> None:
    """ENRICHD_FOR_KAFKA_STEPS is the documented list without tombstones that follow no result."""
    for mode, documented in KAFKA_DOCUMENTED.items():
        kept: list[str | None] = []
        for out in documented:
            if out is None and (not kept or kept[-1] is None):
                continue
            kept.append(out)
        assert kept == ENRICHD_FOR_KAFKA_STEPS[mode]
        assert kept[-1] == documented[-1]  # the same final row for the key


def test_inner_join_through_the_engine_and_independent_of_max_batch(
    broker: Any, spark: Any
) -> None:
    whole = replay_table("inner", broker)
    fourths = replay_table("inner", broker, max_batch=quarter())
    assert check(fourths, "inner") == check(whole, "inner")
    assert (whole.batches, fourths.batches) == (1, 4)
    # A retraction's provenance is the update that ended the join.
    key3 = [r for r in whole.outputs if r["key"] == "3"]
    assert key3[1]["value"] is None
    assert key3[1]["headers"]["enrichd.source.topic"].split(".")[1] == "right"


def test_left_join_through_the_engine(broker: Any, spark: Any) -> None:
    check(replay_table("left", broker), "left")


def test_outer_join_of_the_example_pipeline_through_replay(
    broker: Any, spark: Any, tmp_path: Path
) -> None:
    lines, _ = inputs()
    files = {}
    for role, role_lines in lines.items():
        files[role] = tmp_path / f"{role}.jsonl"
        files[role].write_text("".join(json.dumps(x) + "\n" for x in role_lines), "utf-8")
    result = replay(
        load_pipeline_file(EXAMPLE),
        files,
        max_batch=quarter(),
        bootstrap_servers=broker.bootstrap_servers,
    )
    check(result, "outer")
    assert result.batches == 4
