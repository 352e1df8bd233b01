"""``daemon demo [NAME]``: one sample per built-in joiner, from sample data to a printed table.

Each demo is a module here with a ``show(console)`` function that writes its sample inputs,
replays them through its example pipeline on the embedded broker and prints what came out.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from daemon.errors import EnrichdError

if TYPE_CHECKING:
    from daemon.replay import ReplayResult

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
"""The example pipelines, package data of ``daemon`` (in a checkout, a link to ``examples/``)."""

DEMOS = {
    "comap": "tweets and users become tweet views (co-map with state)",
    "lookup": "clicks get their user's region; clicks per region add up (stream-table lookup)",
    "asof": "recommendations with the mood of the moment, corrected when a mood is late",
    "versioned": "a late region change repairs clicks already enriched (versioned lookup)",
}
"""Demo name -> what it shows; the module ``daemon.demos.NAME`` implements it."""


def example_file(name: str) -> Path:
    """A demo's pipeline file from the installed examples."""
    path = EXAMPLES / name
    if not path.exists():
        raise EnrichdError(f"{path} is missing; reinstall enrichd (its package data is incomplete)")
    return path


def latest_by_key(outputs: list[dict[str, Any]]) -> dict[str, dict[str, Any] | None]:
    """What a compacted topic keeps: the last value per key (None: deleted)."""
    latest: dict[str, dict[str, Any] | None] = {}
    for record in outputs:
        latest[record["key"]] = record["value"]
    return latest


def replay_sample(
    console: Any,
    example: str,
    inputs: Mapping[str, tuple[str, Sequence[Mapping[str, Any]]]],
    doing: str,
) -> tuple[Path, ReplayResult]:
    """Replay a demo's sample through its example pipeline, with a status line meanwhile.

    Args:
        console: the rich console to show the status on.
        example: the pipeline file's name in ``examples/``.
        inputs: per role, a file name and its replay lines.
        doing: what is at work, for the status line ("the comap pipeline").

    Returns:
        The example file's path and what the replay wrote.
    """
    # `daemon --help` lists the demos without loading replay's Kafka clients and pydantic.
    from daemon.model.config import load_pipeline_file
    from daemon.replay import replay

    path = example_file(example)
    file = load_pipeline_file(path)
    with tempfile.TemporaryDirectory(prefix="enrichd-demo-") as folder:
        files = {}
        for role, (name, lines) in inputs.items():
            files[role] = Path(folder) / name
            files[role].write_text("".join(json.dumps(line) + "\n" for line in lines), "utf-8")
        with console.status(f"embedded broker, Spark and {doing} at work..."):
            result = replay(file, files)
    return path, result
