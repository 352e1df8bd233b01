"""The lookup joiner through `daemon replay`, the real broker and the real Spark engine.

Key spaces: space 0 is a scripted story checked by hand; spaces 1..N are random interleavings
of clicks and region updates of their own users, checked against the joiner's plain-Python
run (tests/unit/test_lookup_logic.py pins that run rule by rule). All run in one replay.

Kafka Streams documents the same rules for KStream-KTable joins (only stream records trigger
a join, against the table's current value; table updates emit nothing; ``join`` drops stream
records without a table value, ``leftJoin`` joins them with null) and, for KStream-GlobalKTable
joins, a lookup by a key mapped from the stream record without co-partitioning. It differs in
that its GlobalKTable is fully copied into every task while here both sides are shuffled by
the join key, and it joins on arrival order across partitions where enrichd orders each
key's micro-batch by event time.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from daemon.config import PipelineFile, load_pipeline_file
from daemon.demos import latest_by_key
from daemon.joiners.lookup import Lookup
from daemon.replay import ReplayResult, replay
from daemon.testing import by_key, replay_joiner, run_joiner

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "clicks-per-region.toml"
SCHEMAS = {
    "stream": ROOT / "schemas" / "click.avsc",
    "table": ROOT / "schemas" / "user_region.avsc",
}
KEYS = {"stream": "user", "table": "user"}
FIELDS = {"stream": "click", "table": "region"}
RANDOM_SPACES = 10


def click(cid: str, user: str | None, clicks: int, t: int) -> dict[str, Any]:
    """A click keyed in Kafka by its id: its join key (user) is a foreign key."""
    return {"key": cid, "value": {"id": cid, "user": user, "clicks": clicks}, "timestamp": t}


def region(user: str, name: str | None, t: int) -> dict[str, Any]:
    """A region update keyed by user; ``name`` None is a tombstone."""
    value = None if name is None else {"user": user, "region": name}
    return {"key": user, "value": value, "timestamp": t}


def scripted() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Space 0: ada before any region, across a move and a delete; bob's many clicks. Its
    regions (north, south) are its own, so their totals can be checked by hand."""
    clicks = [
        click("c0-1", "ada0", 1, 1),  # before any region: left mode's default
        click("c0-2", "ada0", 2, 3),  # north
        click("c0-3", "ada0", 4, 5),  # south: the update between two clicks
        click("c0-4", "ada0", 8, 7),  # after the tombstone: the default again
        *(click(f"c0-{n}", "bob0", 1, 4 + n) for n in range(5, 13)),  # north, many click ids
        click("c0-13", None, 1, 17),  # no user: dead letter
        {"key": "c0-14", "value": None, "timestamp": 18},  # stream tombstone: dead letter
    ]
    regions = [
        region("ada0", "north", 2),
        region("ada0", "south", 4),
        region("ada0", None, 6),
        region("bob0", "north", 8),
    ]
    return clicks, regions


def random_space(space: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Clicks and region changes (tombstones too) of two users, in a seeded random order."""
    rng = random.Random(space)  # noqa: S311 - test data, not security
    clicks: list[dict[str, Any]] = []
    regions: list[dict[str, Any]] = []
    t = space * 100
    for _ in range(12):
        t += 1
        user = f"u{space}-{rng.choice('ab')}"
        if rng.random() < 0.6:
            clicks.append(click(f"c{space}-{len(clicks)}", user, rng.randint(1, 9), t))
        else:
            regions.append(region(user, rng.choice(["eu", "us", "apac", None]), t))
    return clicks, regions


def all_spaces() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    clicks, regions = scripted()
    for space in range(1, RANDOM_SPACES + 1):
        c, r = random_space(space)
        clicks += c
        regions += r
    return clicks, regions


def write_jsonl(path: Path, lines: list[dict[str, Any]]) -> Path:
    import json

    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def example() -> PipelineFile:
    return load_pipeline_file(EXAMPLE)


def run(
    file: PipelineFile, tmp: Path, clicks: list, regions: list, broker: Any, **kw: Any
) -> ReplayResult:
    files = {
        "stream": write_jsonl(tmp / "clicks.jsonl", clicks),
        "table": write_jsonl(tmp / "regions.jsonl", regions),
    }
    return replay(file, files, bootstrap_servers=broker.bootstrap_servers, **kw)


def region_names(outputs: Any) -> dict[str, list[str | None]]:
    """Each click id's joined region names (None: joined with a null table side)."""
    return {
        cid: [None if v["region"] is None else v["region"]["region"] for v in values]
        for cid, values in by_key(outputs).items()
    }


def test_left_lookup_foreign_keys_and_totals_in_every_batching(
    example: PipelineFile, broker: Any, spark: Any, tmp_path: Path
) -> None:
    clicks, regions = all_spaces()
    options = example.pipeline[0].options
    logic = run_joiner(
        Lookup,
        {"stream": clicks, "table": regions},
        keys=KEYS,
        fields=FIELDS,
        options=options,
        schemas=SCHEMAS,
    )

    whole = run(example, tmp_path, clicks, regions, broker)
    fours = run(example, tmp_path, clicks, regions, broker, max_batch=4)

    # The engine gives what the joiner's logic gives, whatever the micro-batching.
    assert by_key(whole.outputs) == by_key(fours.outputs) == by_key(logic.outputs)
    assert fours.batches > whole.batches
    # Space 0 by hand: the default before any region and after the delete; an update
    # between two clicks moves only the later one.
    names = region_names(whole.outputs)
    assert [names[f"c0-{n}"] for n in (1, 2, 3, 4)] == [
        ["UNKNOWN"],
        ["north"],
        ["south"],
        ["UNKNOWN"],
    ]
    assert all(names[f"c0-{n}"] == ["north"] for n in range(5, 13))
    # Foreign key: bob0's clicks are keyed by click id and were read from both partitions of
    # the clicks topic, while his region sits in one partition of the regions topic, and all
    # of them were joined: no co-partitioning needed.
    bob_partitions = {
        r["headers"]["enrichd.source.partition"]
        for r in whole.outputs
        if r["value"]["click"]["user"] == "bob0"
    }
    assert bob_partitions == {"0", "1"}
    # Bad input: the click without a user and the stream tombstone, once per replay.
    for result in (whole, fours):
        assert sorted(
            (d["key"], d["headers"]["enrichd.error.class"]) for d in result.dead_letters
        ) == [("c0-13", "MissingKey"), ("c0-14", "UnroutableTombstone")]

    # The totals: clicks per region, each joined click counting where it was joined.
    expected: dict[str, int] = {}
    for value in (out.value for out in logic.outputs):
        assert value is not None
        name = value["region"]["region"]
        expected[name] = expected.get(name, 0) + value["click"]["clicks"]
    for result in (whole, fours):
        totals = result.extra["totals"]
        # Every joined click has clicks > 0, so it changes one total once: one record each.
        assert len(totals) == len(logic.outputs)
        assert {k: v["clicks"] for k, v in latest_by_key(totals).items()} == expected
        # Every joined click (all have clicks > 0) moved its region's total once, upward.
        for name, values in by_key(totals).items():
            sums = [v["clicks"] for v in values]
            assert sums == sorted(set(sums))
            joined_here = [o for o in logic.outputs if o.value["region"]["region"] == name]  # type: ignore[index]
            assert len(sums) == len(joined_here)
    # Ada's move: her 2 clicks joined in the north stay there (with bob's 8), her later 4
    # count in the south.
    for result in (whole, fours):
        final = latest_by_key(result.extra["totals"])
        assert (final["north"], final["south"]) == (
            {"region": "north", "clicks": 10},
            {"region": "south", "clicks": 4},
        )


def test_inner_lookup_drops_clicks_without_a_region(broker: Any, spark: Any) -> None:
    clicks, regions = all_spaces()
    clicks = [c for c in clicks if c["value"] is not None and c["value"]["user"] is not None]
    kw: dict[str, Any] = {"keys": KEYS, "fields": FIELDS, "options": {"mode": "inner"}}
    logic = run_joiner(Lookup, {"stream": clicks, "table": regions}, schemas=SCHEMAS, **kw)
    engine = replay_joiner(
        "lookup",
        {"stream": clicks, "table": regions},
        schemas=SCHEMAS,
        output_schema=ROOT / "schemas" / "enriched_click.avsc",
        max_batch=5,
        bootstrap_servers=broker.bootstrap_servers,
        **kw,
    )
    assert by_key(engine.outputs) == by_key(logic.outputs)
    names = region_names(engine.outputs)
    assert "c0-1" not in names and "c0-4" not in names  # before any region; after the delete
    assert names["c0-2"] == ["north"] and names["c0-3"] == ["south"]
    assert all(r["value"]["region"] is not None for r in engine.outputs)
    assert engine.dead_letters == []
