"""``daemon demo``: from a fresh install to visible results in one command."""

from __future__ import annotations

import tempfile
from pathlib import Path


def demo() -> None:
    """Start the embedded broker, replay sample users and tweets through `comap`, show views."""
    from rich.console import Console
    from rich.table import Table

    from daemon.config import load_pipeline_file
    from daemon.demo import example_file, latest_by_key, write_sample
    from daemon.replay import replay

    console = Console()
    path = example_file()
    file = load_pipeline_file(path)
    with tempfile.TemporaryDirectory(prefix="enrichd-demo-") as folder:
        files = write_sample(Path(folder))
        with console.status("embedded broker, Spark and the comap pipeline at work..."):
            result = replay(file, files)
    emitted = Table(title=f"Every view emitted to tweet-views ({path.name})")
    for column in ("#", "tweet", "content", "author", "avatar", "caused by"):
        emitted.add_column(column)
    for n, record in enumerate(result.outputs, start=1):
        view = record["value"] or {}
        author = view.get("author") or {}
        cause = record["headers"].get("enrichd.source.topic", "").split(".replay-")[0]
        emitted.add_row(
            str(n),
            record["key"],
            (view.get("tweet") or {}).get("content", "(deleted)"),
            author.get("name", "-"),
            author.get("avatar") or "-",
            cause,
        )
    console.print(emitted)
    final = Table(title="Latest view per tweet (what a compacted topic holds)")
    for column in ("tweet", "content", "author"):
        final.add_column(column)
    for key, view in sorted(latest_by_key(result.outputs).items()):
        view = view or {}
        final.add_row(
            key,
            (view.get("tweet") or {}).get("content", "-"),
            (view.get("author") or {}).get("name", "-"),
        )
    console.print(final)
    console.print(
        f"{result.input_records} input records, {len(result.outputs)} views, "
        f"{len(result.dead_letters)} dead letters. Tweet 103's author never arrived, so it has "
        "no view yet; tweet 100 came before its author and was joined when Ada appeared."
    )
