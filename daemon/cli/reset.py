"""``daemon reset`` and ``daemon rescale``: a stopped pipeline starts again from chosen offsets."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Annotated

import typer

from daemon.cli.options import PipelineName, PipelinePath, Yes
from daemon.errors import EnrichdError
from daemon.secrets import redact

if TYPE_CHECKING:
    from daemon.model.config import PipelineConfig
    from daemon.pipeline.reset import Change

To = Annotated[
    str,
    typer.Option(
        "--to",
        help="earliest, latest, or a time (epoch ms, or ISO 8601 like 2026-11-20T09:00:00Z): "
        "each input partition starts at its first record at or after it.",
        show_default=False,
    ),
]
KeepState = Annotated[
    bool,
    typer.Option(
        "--keep-state", help="Keep the join state; the records read again apply on top of it."
    ),
]


class NothingChangedError(EnrichdError):
    """The operator declined: the checkpoint is as it was."""


def reset(
    pipeline_file: PipelinePath,
    to: To,
    pipeline: PipelineName = None,
    keep_state: KeepState = False,
    yes: Yes = False,
) -> None:
    """Make a stopped pipeline's next start read from --to, with its state dropped or kept.

    Refused while a daemon runs on the checkpoint. Prints what it changes and asks first.
    """
    # Late: Spark (the state reader's) loads when the command runs, not for `daemon --help`.
    from daemon.model.config import load_pipeline_file, pick_pipeline
    from daemon.pipeline.checkpoint_shape import ran_continuous, recorded_shape
    from daemon.pipeline.reset import reset_change
    from daemon.state.positions import parse_target
    from daemon.state.reader import state_session

    target = parse_target(to)
    file = load_pipeline_file(pipeline_file)
    pipe = pick_pipeline(file, pipeline)
    with _locked(pipe, fresh_allowed=True) as fresh:
        # A continuous checkpoint's leases keep where they stopped in their state.
        reads_state = not fresh and (keep_state or ran_continuous(recorded_shape(pipe)))
        spark = state_session(file) if reads_state else None
        change = reset_change(file, pipe, target, keep_state=keep_state, spark=spark)
        _confirm_and_apply(change, "Reset", yes)


def rescale(pipeline_file: PipelinePath, pipeline: PipelineName = None, yes: Yes = False) -> None:
    """Move a stopped pipeline's state into the file's buckets, partitions, mode and leases.

    That is ``state_buckets``, ``spark.sql.shuffle.partitions``, ``mode`` and ``leases``: the
    state moves into a new checkpoint laid out as the file now says, which reads on from
    where the old one stopped. Refused while a daemon runs on the checkpoint; asks first.
    """
    # Late: Spark (the state reader's) loads when the command runs, not for `daemon --help`.
    from daemon.model.config import load_pipeline_file, pick_pipeline
    from daemon.pipeline.checkpoint_shape import verify_checkpoint
    from daemon.pipeline.reset import layout_of, rescale_change
    from daemon.state.reader import state_session

    file = load_pipeline_file(pipeline_file)
    pipe = pick_pipeline(file, pipeline)
    with _locked(pipe, fresh_allowed=False):
        layout = layout_of(file, pipe, verify_checkpoint(pipe, any_layout=True))
        if layout[0] == layout[1]:
            typer.echo(f"pipeline {pipe.name!r}: nothing to rescale, the state is in {layout[1]}")
            return
        change = rescale_change(file, pipe, state_session(file), layout)
        _confirm_and_apply(change, "Rescale", yes)


@contextmanager
def _locked(pipe: PipelineConfig, *, fresh_allowed: bool) -> Iterator[bool]:
    """Hold the checkpoint's lock once its shape fits the pipeline; whether it is new.

    A checkpoint that does not exist yet is made only for a reset (its seed makes the
    pipeline's first start read from there), and removed again if the reset does not happen.
    """
    # Late: Spark (the state reader's) loads when the command runs, not for `daemon --help`.
    from daemon.pipeline.checkpoint_shape import NoCheckpointError, verify_checkpoint
    from daemon.pipeline.lock import held

    try:
        verify_checkpoint(pipe, any_layout=not fresh_allowed)
        fresh = False
    except NoCheckpointError:
        if not fresh_allowed:
            raise
        fresh = True
    with held(pipe.name, pipe.checkpoint):
        yield fresh


def _confirm_and_apply(change: Change, verb: str, yes: bool) -> None:
    # Late: Spark (the state reader's) loads when the command runs, not for `daemon --help`.
    from daemon.pipeline.reset import apply, forget_markers, summary_line

    for line in change.describe():
        typer.echo(line)
    if not yes and not typer.confirm(f"{verb}?"):
        raise NothingChangedError(f"{verb.lower()} cancelled; nothing changed")
    apply(change)
    typer.echo(summary_line(change))
    try:
        deleted = forget_markers(change)
    except EnrichdError as exc:  # the reset is done: the groups are only left over
        typer.echo(
            redact(
                f"warning: {exc}; the old checkpoint's marker groups are of no more use: "
                "delete them with kafka-consumer-groups --delete"
            ),
            err=True,
        )
        return
    if deleted:
        typer.echo(f"deleted the old checkpoint's marker groups: {', '.join(deleted)}")
