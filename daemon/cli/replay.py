"""``daemon replay``: run a pipeline over recorded inputs and print its outputs."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from daemon.cli.options import Verbose, show_spark_output
from daemon.errors import ConfigError

if TYPE_CHECKING:
    from daemon.replay import ReplayResult


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


def _lines(records: list[dict[str, Any]], output: str | None = None) -> str:
    """JSON lines of ``records``, each with the ``output`` it was read from, when given."""
    named = records if output is None else [{"output": output, **r} for r in records]
    return "".join(json.dumps(r, sort_keys=True, default=str) + "\n" for r in named)


def write_outputs(result: ReplayResult, output: Path | None, output_dir: Path | None) -> None:
    """Write every output's records as JSON lines, each naming its output.

    Args:
        result: what the replay read back.
        output: one file for every output's lines, the main output's first; None: stdout
            (unless ``output_dir``).
        output_dir: a folder for one file per output, ``NAME.jsonl`` (an output with no
            records gets an empty file, so that a missing file is never taken for one).
    """
    by_output = result.by_output()
    if output_dir is not None:
        output_dir.mkdir(parents=True, exist_ok=True)
        for name, records in by_output.items():
            (output_dir / f"{name}.jsonl").write_text(_lines(records, name), encoding="utf-8")
        if output is None:
            return
    text = "".join(_lines(records, name) for name, records in by_output.items())
    if output is None:
        sys.stdout.write(text)
    else:
        output.write_text(text, encoding="utf-8")


def summary(result: ReplayResult) -> str:
    """The replay's last line: records, micro-batches, and each output's count by name."""
    counts = ", ".join(f"{name} {len(records)}" for name, records in result.by_output().items())
    return (
        f"replayed {result.input_records} records in {result.batches} micro-batches: "
        f"{counts}; {len(result.dead_letters)} dead letters"
    )


def replay(
    pipeline_file: Annotated[Path, typer.Argument(help="The pipeline file (TOML).")],
    inputs: Annotated[
        list[str], typer.Option("--input", "-i", help="ROLE=FILE.jsonl, once per input.")
    ],
    output: Annotated[
        Path | None,
        typer.Option("--output", "-o", help="Write every output's lines here, not stdout."),
    ] = None,
    output_dir: Annotated[
        Path | None,
        typer.Option("--output-dir", help="Write each output to DIR/NAME.jsonl, not stdout."),
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
    """Run a pipeline end to end over recorded inputs and print its outputs as JSON lines.

    Each line names its output (``"output": "output"`` for the main one, else the secondary
    output's name, such as ``totals``); the last line on stderr counts each output's records.
    """
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
    write_outputs(result, output, output_dir)
    if dead_letters is not None:
        dead_letters.write_text(_lines(result.dead_letters), encoding="utf-8")
    console.print(summary(result), highlight=False, soft_wrap=True)
