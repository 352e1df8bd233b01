"""``daemon demo lookup``: clicks get their user's region, and clicks per region add up.

Ada moves from eu to us halfway through: her earlier clicks stay counted in eu, her later ones
count in us, because each click is joined with the region current when it happened and a
table update never rewrites earlier output.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

from daemon.demos import example_file, latest_by_key

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


def write_sample(folder: Path) -> dict[str, Path]:
    """Write the sample inputs as replay files; return them by role."""
    clicks = [
        {"key": cid, "value": {"id": cid, "user": user, "clicks": n}, "timestamp": t}
        for cid, user, n, t in CLICKS
    ]
    files = {"stream": folder / "clicks.jsonl", "table": folder / "user-regions.jsonl"}
    for role, lines in (("stream", clicks), ("table", REGIONS)):
        files[role].write_text("".join(json.dumps(line) + "\n" for line in lines), "utf-8")
    return files


def show(console: Any) -> None:
    """Replay the sample clicks and regions through ``lookup`` and print both outputs."""
    from rich.table import Table

    from daemon.config import load_pipeline_file
    from daemon.replay import replay

    path = example_file("clicks-per-region.toml")
    file = load_pipeline_file(path)
    with tempfile.TemporaryDirectory(prefix="enrichd-demo-") as folder:
        files = write_sample(Path(folder))
        with console.status("embedded broker, Spark and the lookup pipeline at work..."):
            result = replay(file, files)
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
    updates = Table(title="Every change of a region's total (clicks-per-region)")
    for column in ("region", "clicks so far"):
        updates.add_column(column)
    for record in totals:
        updates.add_row(record["key"], str(record["value"]["clicks"]))
    console.print(updates)
    final = Table(title="Clicks per region now (what a compacted topic holds)")
    for column in ("region", "clicks"):
        final.add_column(column)
    for region_name, value in sorted(latest_by_key(totals).items()):
        final.add_row(region_name, str((value or {}).get("clicks", "-")))
    console.print(final)
    console.print(
        f"{result.input_records} input records, {len(result.outputs)} enriched clicks, "
        f"{len(totals)} total updates, {len(result.dead_letters)} dead letters. Ada moved "
        "from eu to us at 5000 ms: her clicks before that stay counted in eu (5), the one "
        "after counts in us; eve has no region, so her click counts under UNKNOWN."
    )
