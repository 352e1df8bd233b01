"""``daemon demo [NAME]``: one sample per built-in joiner, from sample data to a printed table.

Each demo is a module here with a ``show(console)`` function that writes its sample inputs,
replays them through its example pipeline on the embedded broker and prints what came out.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from daemon.errors import EnrichdError

EXAMPLES = Path(__file__).resolve().parent.parent.parent / "examples"

DEMOS = {
    "comap": "tweets and users become tweet views (co-map with state)",
    "lookup": "clicks get their user's region; clicks per region add up (stream-table lookup)",
    "asof": "recommendations with the mood of the moment, corrected when a mood is late",
    "versioned": "a late region change repairs clicks already enriched (versioned lookup)",
}
"""Demo name -> what it shows; the module ``daemon.demos.NAME`` implements it."""


def example_file(name: str) -> Path:
    """A demo's pipeline file from ``examples/``."""
    path = EXAMPLES / name
    if not path.exists():
        raise EnrichdError(f"{path} is missing; run the demo from a source checkout")
    return path


def latest_by_key(outputs: list[dict[str, Any]]) -> dict[str, dict[str, Any] | None]:
    """What a compacted topic keeps: the last value per key (None: deleted)."""
    latest: dict[str, dict[str, Any] | None] = {}
    for record in outputs:
        latest[record["key"]] = record["value"]
    return latest
