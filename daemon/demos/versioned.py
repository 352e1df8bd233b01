"""``daemon demo versioned``: a late region change repairs clicks already enriched.

The ``lookup`` of ``examples/clicks-per-region-versioned.toml`` keeps each user's region
history and joins a click with the region its user was in when the click happened. Ada's move
to us reaches Kafka half a second late, within the one-second grace: her click waiting in
grace is joined with us at once. Bob's move to eu reaches Kafka three seconds late: his click
of 7000 ms was answered us already, and is revised to eu; its clicks move from the us total to
the eu total.
"""

from __future__ import annotations

from typing import Any

from rich.table import Table

from daemon.demos import replay_sample
from daemon.demos.lookup import print_totals

# (user, region, valid since, reached Kafka at), in milliseconds.
REGIONS = [
    ("ada", "eu", 1000, 1000),
    ("bob", "us", 1000, 1000),
    ("ada", "us", 5000, 5500),  # 0.5 s late: within the grace, so no click sees eu after 5000
    ("bob", "eu", 6000, 9000),  # 3 s late: bob's click at 7000 was answered us, and is revised
]

CLICKS = [
    # (click id, user, clicks, time): each reaches Kafka when it happens.
    ("c1", "ada", 3, 2000),
    ("c2", "bob", 1, 2500),
    ("c3", "ada", 2, 3000),
    ("c4", "eve", 4, 3500),  # eve has no region: counted under UNKNOWN (left mode's default)
    ("c5", "ada", 5, 5200),  # waits in grace until ada's time passes 6200: the us row is in
    ("c6", "ada", 1, 6500),
    ("c7", "bob", 2, 7000),  # out with us once bob's time passes 8000 (c8); revised at 9000
    ("c8", "bob", 1, 8500),
]


def sample() -> dict[str, tuple[str, list[dict[str, Any]]]]:
    """The sample inputs as replay lines, with their files' names, by role.

    A record's Kafka timestamp is when it reached Kafka.
    """
    clicks = [
        {"key": cid, "value": {"id": cid, "user": user, "clicks": n, "at": t}, "timestamp": t}
        for cid, user, n, t in CLICKS
    ]
    regions = [
        {"key": user, "value": {"user": user, "region": name, "since": since}, "timestamp": t}
        for user, name, since, t in REGIONS
    ]
    return {
        "stream": ("timed-clicks.jsonl", clicks),
        "table": ("region-changes.jsonl", regions),
    }


def show(console: Any) -> None:
    """Replay the sample through the versioned ``lookup`` example and print what it wrote."""
    path, result = replay_sample(
        console, "clicks-per-region-versioned.toml", sample(), "the versioned lookup"
    )

    def order(record: dict[str, Any]) -> tuple[int, int]:
        return record["value"]["click"]["at"], record["value"]["revision"]

    log = Table(title=f"Every answer written to revised-clicks ({path.name})")
    columns = ("click", "user", "clicked at", "clicks", "region then", "revision", "written at")
    for column in columns:
        log.add_column(column)
    for record in sorted(result.outputs, key=order):
        view = record["value"]
        click, region = view["click"], view["region"] or {}
        log.add_row(
            record["key"],
            click["user"],
            str(click["at"]),
            str(click["clicks"]),
            region.get("region", "-"),
            str(view["revision"]),
            str(record["timestamp"]),
        )
    console.print(log)
    totals = result.extra.get("totals", [])
    print_totals(console, totals, "clicks-per-region-revised", when=True)
    console.print(
        f"{result.input_records} input records, {len(result.outputs)} answers, "
        f"{len(totals)} total updates, {len(result.dead_letters)} dead letters. Ada's move to "
        "us reached Kafka 0.5 s late, within the 1 s grace: c5 waited and was joined with us "
        "at once. Bob's move to eu (valid from 6000 ms) reached Kafka only at 9000 ms: c7 "
        "had been answered us, so it was revised to eu (revision 1), and its 2 clicks moved "
        "from the us total to the eu total."
    )
