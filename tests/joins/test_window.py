"""The window joiner through `daemon replay`, the real broker and the real Spark engine.

One replay per mode holds every scenario, each in its own join key (stream time is per key):

- key 1: the example of Kafka Streams' join semantics page, compared with its documented
  results (see :data:`KAFKA_OUTER`);
- key 2: several left records before the first right record, then more right records;
- key 3: right records exactly at, and 1 ms past, both edges of a left record's window;
- key 4: records exactly at, and 1 ms past, the lateness limit (dead-lettered);
- key 5: a right record that arrives after the left one with an earlier event time;
- keys 10..: seeded random records, checked against the joiner's plain-Python run, which
  tests/unit/joiners/test_window.py pins rule by rule and against a reference model.

Event time comes from the field ``at``; the Kafka timestamp is the arrival order. The replay
deals the keys' arrivals out in turn, each key's own arrival order kept (see :func:`dealt`),
so each of a capped run's few micro-batch boundaries cuts through every long key's history.
The idle timeout is an hour, so processing-time wake-ups cannot fire during a slow replay:
the only time that moves without records here is the end of input.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from daemon.joiners.window import Window
from daemon.replay import ReplayResult
from daemon.testing import by_key, replay_joiner, run_joiner

ROOT = Path(__file__).resolve().parents[2]
SCHEMAS = {
    "left": ROOT / "schemas" / "left_event.avsc",
    "right": ROOT / "schemas" / "right_event.avsc",
}
OUTPUT = ROOT / "schemas" / "joined_pair.avsc"
KEYS = {"left": "k", "right": "k"}
TIMES = {"left": "at", "right": "at"}
OPTIONS = {"window": "10ms", "grace": "5ms", "idle_timeout": "1h"}
RANDOM_KEYS = range(10, 18)

Pair = tuple[str | None, str | None]


def rec(k: int, v: str, at: int, arrival: int | None = None) -> dict[str, Any]:
    """A replay line of key ``k`` named ``v`` at event time ``at``, arriving at ``arrival``."""
    return {
        "key": k,
        "value": {"k": k, "v": v, "at": at},
        "timestamp": at if arrival is None else arrival,
    }


# Kafka Streams' "Join Semantics" wiki page, improved left/outer stream-stream join (3.1 and
# newer): window 10, grace period 5, one key, records processed in timestamp order.
#   left:  1:null 3:A 5:B 7:null 9:C 12:null 15:D 30:E 45:F 75:G
#   right: 2:null 4:a 6:b 8:null 10:c 11:null 13:null 14:d 60:f
# Documented results (left and outer join; the inner join has the pairs only):
#   4: A-a  5: B-a  6: A-b B-b  9: C-a C-b  10: A-c B-c C-c  14: B-d C-d  15: D-b D-c D-d
#   45: E-null  60: F-null  75 (outer only): null-f
# Kafka Streams skips the null values; enrichd dead-letters them (UnroutableTombstone: a
# tombstone carries no join key and nothing to join). enrichd emits the same records in the
# same order, and G-null at the end of input (G's window closes after the table ends).
KAFKA_PAIRS: list[Pair] = [
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
KAFKA_LEFT: list[Pair] = [*KAFKA_PAIRS, ("E", None), ("F", None)]
KAFKA_OUTER: list[Pair] = [*KAFKA_LEFT, (None, "f")]
KAFKA_NULLS = {"left": [1, 7, 12], "right": [2, 8, 11, 13]}


def scripted() -> tuple[dict[str, list[dict[str, Any]]], dict[str, dict[str, list[Pair]]]]:
    """The hand-checked key spaces 1..5 and their expected outputs per mode."""
    left: list[dict[str, Any]] = []
    right: list[dict[str, Any]] = []
    # Key 1: Kafka Streams' example, with its null values as tombstones keyed 1.
    left += [rec(1, v, t) for v, t in [("A", 3), ("B", 5), ("C", 9), ("D", 15)]]
    left += [rec(1, v, t) for v, t in [("E", 30), ("F", 45), ("G", 75)]]
    right += [rec(1, v, t) for v, t in [("a", 4), ("b", 6), ("c", 10), ("d", 14), ("f", 60)]]
    for role, times in KAFKA_NULLS.items():
        lines = left if role == "left" else right
        lines += [{"key": 1, "value": None, "timestamp": t} for t in times]
    # Key 2: three left records before the first right record; a later right record that
    # is outside every window.
    left += [rec(2, "L1", 100), rec(2, "L2", 101), rec(2, "L3", 102)]
    right += [rec(2, "r1", 105), rec(2, "r2", 108), rec(2, "r3", 130)]
    # Key 3: E at 200 joins right records from 190 to 210, edges included.
    left += [rec(3, "E", 200)]
    right += [rec(3, f"r{t}", t) for t in (189, 190, 210, 211)]
    # Key 4: stream time 300; a record is on time while at + 10 + 5 >= 300.
    left += [rec(4, "L300", 300), rec(4, "L285", 285, 303), rec(4, "L284", 284, 304)]
    right += [rec(4, "r284", 284, 301), rec(4, "r285", 285, 302)]
    # Key 5: the right record arrives second but happened 8 ms earlier.
    left += [rec(5, "L", 400)]
    right += [rec(5, "r", 392, 401)]

    outer = {
        "1": [*KAFKA_OUTER, ("G", None)],
        "2": [(f"L{i}", f"r{j}") for j in (1, 2) for i in (1, 2, 3)] + [(None, "r3")],
        "3": [("E", "r190"), ("E", "r210"), (None, "r189"), (None, "r211")],
        "4": [("L285", "r285"), ("L300", None)],
        "5": [("L", "r")],
    }
    expected = {
        "outer": outer,
        "left": {k: [p for p in pairs if p[0] is not None] for k, pairs in outer.items()},
        "inner": {k: [p for p in pairs if None not in p] for k, pairs in outer.items()},
    }
    assert expected["left"]["1"] == [*KAFKA_LEFT, ("G", None)]
    assert expected["inner"]["1"] == KAFKA_PAIRS
    return {"left": left, "right": right}, expected


def random_spaces() -> dict[str, list[dict[str, Any]]]:
    """Records of keys 10.., mostly in event-time order with up to 20 ms of jitter: some join,
    some wait alone, a few are late."""
    rng = random.Random(7)  # noqa: S311 - test data, not security
    left: list[dict[str, Any]] = []
    right: list[dict[str, Any]] = []
    for k in RANDOM_KEYS:
        base = 1000 * k
        for n in range(14):
            lines = left if rng.random() < 0.5 else right
            at = base + 3 * n + rng.randint(0, 20)
            lines.append(rec(k, f"{k}-{n}", at, base + 100 + n))
    return {"left": left, "right": right}


def dealt(lines: dict[str, list[dict[str, Any]]]) -> dict[str, list[dict[str, Any]]]:
    """New arrival timestamps that take the keys in turn, each key's arrival order kept: the
    n-th arrival of every key comes before the (n+1)-th arrival of any key. Event times stay."""
    tagged = sorted(
        ((line["timestamp"], role, line) for role in lines for line in lines[role]),
        key=lambda t: t[0],
    )
    keys = sorted({line["key"] for _, _, line in tagged})
    rank: dict[int, int] = {}
    out: dict[str, list[dict[str, Any]]] = {role: [] for role in lines}
    for _, role, line in tagged:
        n = rank[line["key"]] = rank.get(line["key"], -1) + 1
        out[role].append({**line, "timestamp": 1 + n * len(keys) + keys.index(line["key"])})
    return out


def inputs() -> tuple[dict[str, list[dict[str, Any]]], dict[str, dict[str, list[Pair]]]]:
    script, expected = scripted()
    extra = random_spaces()
    both = dealt({role: script[role] + extra[role] for role in ("left", "right")})
    # Replay produces in timestamp order across inputs; keep each file in that order too.
    return {
        role: sorted(lines, key=lambda line: line["timestamp"]) for role, lines in both.items()
    }, expected


def quarter() -> int:
    """A cap that splits the replay into four micro-batches."""
    lines, _ = inputs()
    return -(-sum(map(len, lines.values())) // 4)


def pairs(values: list[Any]) -> list[Pair]:
    return [
        (value["left"] and value["left"]["v"], value["right"] and value["right"]["v"])
        for value in values
    ]


def replay_window(mode: str, broker: Any, max_batch: int | None = None) -> ReplayResult:
    lines, _ = inputs()
    return replay_joiner(
        "window",
        lines,
        schemas=SCHEMAS,
        output_schema=OUTPUT,
        keys=KEYS,
        times=TIMES,
        options={**OPTIONS, "mode": mode},
        max_batch=max_batch,
        bootstrap_servers=broker.bootstrap_servers,
    )


def check(result: ReplayResult, mode: str) -> dict[str, list[Any]]:
    """Scripted keys as expected, random keys as the plain-Python run, late records out."""
    lines, expected = inputs()
    got = by_key(result.outputs)
    for key, want in expected[mode].items():
        assert pairs(got.get(key, [])) == want, f"key {key}"
    plain = run_joiner(
        Window,
        lines,
        keys=KEYS,
        times=TIMES,
        options={**OPTIONS, "mode": mode},
        schemas=SCHEMAS,
        output_schema=OUTPUT,
    )
    plain_by_key = by_key(plain.outputs)
    for k in RANDOM_KEYS:
        assert got.get(str(k), []) == plain_by_key.get(str(k), []), f"key {k}"
    assert any(got.get(str(k)) for k in RANDOM_KEYS)  # the random keys did join

    def kind(d: dict[str, Any]) -> str:
        return str(d["headers"]["enrichd.error.class"])

    dead = sorted((d["key"], kind(d)) for d in result.dead_letters)
    assert dead == sorted(
        ((d.record.kafka_key or b"").decode(), d.kind) for d in plain.dead_letters
    )
    assert [c for k, c in dead if k == "1"] == ["UnroutableTombstone"] * 7
    key4 = [d for d in result.dead_letters if d["key"] == "4"]
    messages = sorted(d["headers"]["enrichd.error.message"] for d in key4)
    assert [m.split(": ")[0] for m in messages] == [
        "left record at event time 284 is 1 ms late",
        "right record at event time 284 is 1 ms late",
    ]
    assert all(kind(d) == "LateRecord" for d in key4)
    return got


def test_outer_join_through_the_engine_and_independent_of_max_batch(
    broker: Any, spark: Any
) -> None:
    whole = replay_window("outer", broker)
    fourths = replay_window("outer", broker, max_batch=quarter())
    got = check(whole, "outer")
    assert check(fourths, "outer") == got
    assert (whole.batches, fourths.batches) == (1, 4)

    # Provenance: a pair comes from its later record, a null result from its own record.
    def source_role(record: dict[str, Any]) -> str:
        return str(record["headers"]["enrichd.source.topic"].split(".")[1])

    key2 = [r for r in whole.outputs if r["key"] == "2"]
    assert [source_role(r) for r in key2[:3]] == ["right"] * 3  # r1 joined L1, L2, L3
    key4 = [r for r in whole.outputs if r["key"] == "4"]
    assert [source_role(r) for r in key4] == ["left", "left"]  # L285 - r285; L300 - null


@pytest.mark.parametrize("mode", ["inner", "left"])
def test_inner_and_left_joins_through_the_engine(mode: str, broker: Any, spark: Any) -> None:
    check(replay_window(mode, broker), mode)
