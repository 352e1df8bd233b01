"""``daemon demo lookup``: clicks get their user's region, and clicks per region add up.

Ada moves from eu to us halfway through: her earlier clicks stay counted in eu, her later ones
count in us, because each click is joined with the region current when it happened and a
table update never rewrites earlier output.
"""

from __future__ import annotations

from typing import Any

from rich.table import Table

from daemon.demos import latest_by_key, replay_sample

REGIONS = [
    {"key": "ada", "value": {"user": "ada", "region": "eu"}, "timestamp": 1000},
    {"key": "bob", "value": {"user": "bob", "region": "us"}, "timestamp": 1000},
    # Ada moves: from here on her clicks count in us.
    {"key": "ada", "value": {"user": "ada", "region": "us"}, "timestamp": 5000},
]

CLICKS = [
    # (click id, user, clicks, time): Kafka keys are click ids, the join key is the user.
    ("c1", "ada", 3, 2000),
    ("c2", "bob", 1, 2500),
    ("c3", "ada", 2, 3000),
    ("c4", "eve", 4, 3500),  # eve has no region: counted under UNKNOWN (left mode's default)
    ("c5", "ada", 5, 6000),
    ("c6", "bob", 2, 7000),
]


def sample() -> dict[str, tuple[str, list[dict[str, Any]]]]:
    """The sample inputs as replay lines, with their files' names, by role."""
    clicks = [
        {"key": cid, "value": {"id": cid, "user": user, "clicks": n}, "timestamp": t}
        for cid, user, n, t in CLICKS
    ]
    return {"stream": ("clicks.jsonl", clicks), "table": ("user-regions.jsonl", REGIONS)}


def show(console: Any) -> None:
    """Replay the sample clicks and regions through ``lookup`` and print both outputs."""
    path, result = replay_sample(console, "clicks-per-region.toml", sample(), "the lookup pipeline")
    times = {cid: t for cid, _, _, t in CLICKS}
    enriched = Table(title=f"Enriched clicks ({path.name}: enriched-clicks)")
    for column in ("click", "at (ms)", "user", "clicks", "region"):
        enriched.add_column(column)
    for record in sorted(result.outputs, key=lambda r: times.get(r["key"], 0)):
        click, region = record["value"]["click"], record["value"]["region"] or {}
        enriched.add_row(
            record["key"],
            str(times.get(record["key"], "?")),
            click["user"],
            str(click["clicks"]),
            region.get("region", "-"),
        )
    console.print(enriched)
    totals = result.extra.get("totals", [])
    print_totals(console, totals, "clicks-per-region")
    console.print(
        f"{result.input_records} input records, {len(result.outputs)} enriched clicks, "
        f"{len(totals)} total updates, {len(result.dead_letters)} dead letters. Ada moved "
        "from eu to us at 5000 ms: her clicks before that stay counted in eu (5), the one "
        "after counts in us; eve has no region, so her click counts under UNKNOWN."
    )


def print_totals(
    console: Any, totals: list[dict[str, Any]], topic: str, *, when: bool = False
) -> None:
    """Print every change of a region's total, then the total per region now.

    With ``when``, the changes come in timestamp order, each with its timestamp.
    """
    updates = Table(title=f"Every change of a region's total ({topic})")
    for column in ("region", "clicks so far", *(["at"] if when else [])):
        updates.add_column(column)
    ordered = sorted(totals, key=lambda r: r["timestamp"]) if when else totals
    for record in ordered:
        cells = [record["key"], str(record["value"]["clicks"])]
        updates.add_row(*cells, *([str(record["timestamp"])] if when else []))
    console.print(updates)
    final = Table(title="Clicks per region now (what a compacted topic holds)")
    for column in ("region", "clicks"):
        final.add_column(column)
    for region_name, value in sorted(latest_by_key(totals).items()):
        final.add_row(region_name, str((value or {}).get("clicks", "-")))
    console.print(final)
