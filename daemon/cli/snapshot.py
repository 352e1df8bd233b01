"""``daemon snapshot`` and ``daemon restore``: keep a stopped pipeline's state, put it back."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from daemon.cli.options import PipelineName, PipelinePath, Yes
from daemon.cli.reset import NothingChangedError
from daemon.model.sizes import in_words

To = Annotated[
    Path,
    typer.Option(
        "--to",
        help="A new (or empty) folder for the snapshot: on a volume of its own, say.",
        show_default=False,
    ),
]
From = Annotated[
    Path,
    typer.Option("--from", help="The folder `daemon snapshot` wrote.", show_default=False),
]


def snapshot(pipeline_file: PipelinePath, to: To, pipeline: PipelineName = None) -> None:
    """Copy what a stopped pipeline's last committed micro-batch needs into a folder.

    The checkpoint's files that its state and offsets need, with a manifest of their sizes
    and checksums, for `daemon restore` (before an upgrade, say). Refused while a daemon runs
    on the checkpoint.
    """
    # Late: the pipeline file's models load when the command runs, not for `daemon --help`.
    from daemon.model.config import load_pipeline_file, pick_pipeline
    from daemon.pipeline.checkpoint_shape import verify_checkpoint
    from daemon.pipeline.lock import held
    from daemon.pipeline.snapshot import take

    file = load_pipeline_file(pipeline_file)
    pipe = pick_pipeline(file, pipeline)
    verify_checkpoint(pipe, any_layout=True)  # a pipeline that never ran gets no folder made
    with held(pipe.name, pipe.checkpoint):
        manifest = take(pipe, to)
    typer.echo(
        f"pipeline {pipe.name!r}: snapshot of {manifest.describe()} in {to}: "
        f"{len(manifest.files)} files, {in_words(manifest.size)}"
    )


def restore(
    pipeline_file: PipelinePath,
    from_: From,
    pipeline: PipelineName = None,
    yes: Yes = False,
) -> None:
    """Put a snapshot in place of a stopped pipeline's checkpoint.

    Every file is checked against the snapshot's manifest first. The checkpoint's contents
    move aside; the next start reads on from the snapshot's micro-batch and writes the
    output of the batches after it again. Refused while a daemon runs on the checkpoint;
    asks first.
    """
    # Late: the pipeline file's models load when the command runs, not for `daemon --help`.
    from daemon.model.config import load_pipeline_file, pick_pipeline
    from daemon.pipeline import snapshot as snapshots
    from daemon.pipeline.lock import held

    file = load_pipeline_file(pipeline_file)
    pipe = pick_pipeline(file, pipeline)
    manifest = snapshots.read_manifest(from_)
    snapshots.check_fits(pipe, manifest)
    with held(pipe.name, pipe.checkpoint):
        typer.echo(f"pipeline {pipe.name!r}, checkpoint {pipe.checkpoint}:")
        typer.echo(f"  restores {manifest.describe()} from {from_}")
        typer.echo("  the next start reads on from there and writes later batches' output again")
        if any(Path(pipe.checkpoint).iterdir()):
            typer.echo("  the checkpoint's contents move aside, beside it")
        if not yes and not typer.confirm("Restore?"):
            raise NothingChangedError("restore cancelled; nothing changed")
        backup = snapshots.restore(pipe, manifest)
    kept = "" if backup is None else f"; the old checkpoint is in {backup}"
    typer.echo(f"pipeline {pipe.name!r}: restored {manifest.describe()}{kept}")
