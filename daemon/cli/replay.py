"""``daemon replay``: run a pipeline over recorded inputs and print its outputs."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from daemon.cli.options import Verbose, show_spark_output
from daemon.errors import ConfigError


def _parse_inputs(pairs: list[str]) -> dict[str, Path]:
    files: dict[str, Path] = {}
    for pair in pairs:
        role, sep, path = pair.partition("=")
        if not sep or not role or not path:
            raise ConfigError(
                f"--input {pair!r}: write ROLE=FILE.jsonl, e.g. --input one=users.jsonl"
            )
        files[role] = Path(path)
    return files


def _write_lines(records: list[dict[str, Any]], target: Path | None) -> None:
    lines = "".join(json.dumps(r, sort_keys=True, default=str) + "\n" for r in records)
    if target is None:
        sys.stdout.write(lines)
    else:
        target.write_text(lines, encoding="utf-8")


def replay(
    pipeline_file: Annotated[Path, typer.Argument(help="The pipeline file (TOML).")],
    inputs: Annotated[
        list[str], typer.Option("--input", "-i", help="ROLE=FILE.jsonl, once per input.")
    ],
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="Write outputs here, not stdout.")
    ] = None,
    dead_letters: Annotated[
        Path | None, typer.Option("--dead-letters", help="Write dead-letter records here.")
    ] = None,
    max_batch: Annotated[
        int | None, typer.Option("--max-batch", min=1, help="Cap on records per micro-batch.")
    ] = None,
    pipeline: Annotated[
        str | None, typer.Option("--pipeline", help="Which pipeline, if the file has several.")
    ] = None,
    verbose: Verbose = False,
) -> None:
    """Run a pipeline end to end over recorded inputs and print its outputs as JSON lines."""
    show_spark_output(verbose)
    # When the command runs: `daemon --help` and other commands load neither rich's progress
    # nor replay's Kafka clients and pipeline models.
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    # When the command runs: `daemon --help` and other commands load neither rich's progress
    # nor replay's Kafka clients and pipeline models.
    from daemon.model.config import load_pipeline_file
    from daemon.replay import replay as run_replay

    file = load_pipeline_file(pipeline_file)
    files = _parse_inputs(inputs)
    console = Console(stderr=True)
    with Progress(
        TextColumn("[bold]replay[/bold] records joined"),
        BarColumn(),
        MofNCompleteColumn(),
        console=console,
        transient=True,
    ) as bar:
        task = bar.add_task("replay", total=None)
        result = run_replay(
            file,
            files,
            pipeline=pipeline,
            max_batch=max_batch,
            progress=lambda done, total: bar.update(task, completed=done, total=total),
        )
    _write_lines(result.outputs, output)
    if dead_letters is not None:
        _write_lines(result.dead_letters, dead_letters)
    console.print(
        f"replayed {result.input_records} records in {result.batches} micro-batches: "
        f"{len(result.outputs)} outputs, {len(result.dead_letters)} dead letters"
    )
