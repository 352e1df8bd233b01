"""The lookup joiner through `daemon replay`, the real broker and the real Spark engine.

Key spaces: space 0 is a scripted story checked by hand; spaces 1..N are random interleavings
of clicks and region updates of their own users, checked against the joiner's plain-Python
run (tests/unit/joiners/test_lookup.py pins that run rule by rule). All run in one replay, the
spaces' records taking turns in time (each space's own order kept), so each boundary of a
capped run's few micro-batches cuts through every space's story.

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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from daemon.demos import latest_by_key
from daemon.joiners.lookup import Lookup
from daemon.model.config import PipelineFile, load_pipeline_file
from daemon.replay import ReplayResult, replay
from daemon.testing import JoinerRun, by_key, replay_joiner, run_joiner

ROOT = Path(__file__).resolve().parents[2]
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
    """Every space's clicks and regions, re-timed so that the spaces take turns: the n-th
    record of every space comes before the (n+1)-th record of any space. Event time is the
    Kafka timestamp, and each space's own order stays, so the rules above hold as written."""
    spaces = [scripted(), *(random_space(space) for space in range(1, RANDOM_SPACES + 1))]
    clicks: list[dict[str, Any]] = []
    regions: list[dict[str, Any]] = []
    for space, (c, r) in enumerate(spaces):
        tagged = [(line["timestamp"], clicks, line) for line in c]
        tagged += [(line["timestamp"], regions, line) for line in r]
        for n, (_, role, line) in enumerate(sorted(tagged, key=lambda x: x[0])):
            role.append({**line, "timestamp": 1 + n * len(spaces) + space})
    return sorted(clicks, key=lambda x: x["timestamp"]), sorted(
        regions, key=lambda x: x["timestamp"]
    )


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


@dataclass(frozen=True)
class LeftRuns:
    """The left-mode example over every space: the joiner's plain-Python run, an uncapped
    replay and a replay whose first stage runs four micro-batches."""

    logic: JoinerRun
    whole: ReplayResult
    fourths: ReplayResult


@pytest.fixture(scope="module")
def left_runs(
    example: PipelineFile, broker: Any, spark: Any, tmp_path_factory: pytest.TempPathFactory
) -> LeftRuns:
    """One pair of replays read by the tests below."""
    clicks, regions = all_spaces()
    logic = run_joiner(
        Lookup,
        {"stream": clicks, "table": regions},
        keys=KEYS,
        fields=FIELDS,
        options=example.pipeline[0].options,
        schemas=SCHEMAS,
    )
    quarter = -(-(len(clicks) + len(regions)) // 4)
    tmp = tmp_path_factory.mktemp("lookup")
    whole = run(example, tmp, clicks, regions, broker)
    fourths = run(example, tmp, clicks, regions, broker, max_batch=quarter)
    return LeftRuns(logic, whole, fourths)


def totals_in_click_order(logic: JoinerRun) -> dict[str, list[tuple[int, int]]]:
    """Per region, (click timestamp, running total) of its joined clicks in timestamp order."""
    running: dict[str, int] = {}
    sequences: dict[str, list[tuple[int, int]]] = {}
    for out in sorted(logic.outputs, key=lambda o: o.source.timestamp if o.source else 0):
        assert out.value is not None and out.source is not None
        name = out.value["region"]["region"]
        running[name] = running.get(name, 0) + out.value["click"]["clicks"]
        sequences.setdefault(name, []).append((out.source.timestamp, running[name]))
    return sequences


def totals_written(result: ReplayResult) -> dict[str, list[tuple[int, int]]]:
    """Per region, (timestamp, total) of each total the replay wrote, in output order."""
    seen: dict[str, list[tuple[int, int]]] = {}
    for record in result.extra["totals"]:
        assert record["value"]["region"] == record["key"]
        seen.setdefault(record["key"], []).append((record["timestamp"], record["value"]["clicks"]))
    return seen


def test_left_lookup_foreign_keys_and_totals_in_every_batching(left_runs: LeftRuns) -> None:
    logic, whole, fourths = left_runs.logic, left_runs.whole, left_runs.fourths

    # The engine gives what the joiner's logic gives, whatever the micro-batching.
    assert by_key(whole.outputs) == by_key(fourths.outputs) == by_key(logic.outputs)
    # Batches of both stages: one each uncapped; capped, four of the first stage and more
    # than one of the second, which reads the enriched clicks with the same cap.
    assert whole.batches == 1 + 1
    assert fourths.batches >= 4 + 2
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
    for result in (whole, fourths):
        assert sorted(
            (d["key"], d["headers"]["enrichd.error.class"]) for d in result.dead_letters
        ) == [("c0-13", "MissingKey"), ("c0-14", "UnroutableTombstone")]

    # The totals: clicks per region, each joined click counting once where it was joined,
    # the total it moves carrying the click's timestamp.
    expected = totals_in_click_order(logic)
    assert len(expected) > 3  # the random spaces' regions too, not only space 0's
    # Uncapped, the second stage applies each region's clicks in one micro-batch, in
    # timestamp order: the running sum in click-timestamp order, total by total.
    assert totals_written(whole) == expected
    # Capped: the same clicks move the same totals to the same final values. The order of
    # the intermediate totals can differ (docs/semantics.md says why): the first stage
    # writes a micro-batch grouped by key, so the enriched topic is not in time order.
    for region, written in totals_written(fourths).items():
        assert sorted(t for t, _ in written) == [t for t, _ in expected[region]]
        assert written[-1][1] == expected[region][-1][1]
    assert set(totals_written(fourths)) == set(expected)
    # Ada's move: her 2 clicks joined in the north stay there (with bob's 8), her later 4
    # count in the south.
    for result in (whole, fourths):
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
        bootstrap_servers=broker.bootstrap_servers,
        **kw,
    )
    assert by_key(engine.outputs) == by_key(logic.outputs)
    names = region_names(engine.outputs)
    assert "c0-1" not in names and "c0-4" not in names  # before any region; after the delete
    assert names["c0-2"] == ["north"] and names["c0-3"] == ["south"]
    assert all(r["value"]["region"] is not None for r in engine.outputs)
    assert engine.dead_letters == []
