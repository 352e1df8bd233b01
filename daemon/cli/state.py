"""``daemon state``: a pipeline's join state, read from its checkpoint, as JSON."""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Annotated, Any

import typer

from daemon.cli.options import PipelineName, PipelinePath
from daemon.errors import ConfigError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from daemon.state.reader import CheckpointState
    from daemon.state.seed import Seed
    from daemon.state.show import Expiry

Key = Annotated[
    str | None,
    typer.Option("--key", help="A join key, as text: print everything its state holds."),
]
Summary = Annotated[
    bool, typer.Option("--summary", help="Print keys, bytes and event times per bucket.")
]


class NoStateError(ConfigError):
    """The checkpoint holds no state for what was asked."""


def state(
    pipeline_file: PipelinePath,
    pipeline: PipelineName = None,
    key: Key = None,
    summary: Summary = False,
) -> None:
    """Print one join key's state, or a summary of all of it, as JSON (read only).

    Reads the state the pipeline's checkpoint committed last, whether the pipeline is
    stopped or running.
    """
    # Late: Spark (the state reader's) loads when the command runs, not for `daemon --help`.
    from daemon.checkpoint.batch_logs import last_committed
    from daemon.model.config import load_pipeline_file, pick_pipeline
    from daemon.pipeline import checkpoint_shape as shapes
    from daemon.plugin.configured import pipeline_joiner
    from daemon.state.leases import LeaseState
    from daemon.state.reader import CheckpointState, operator_ids, state_session
    from daemon.state.seed import seed_of
    from daemon.state.show import Expiry

    if (key is None) == (not summary):
        raise ConfigError("give either --key KEY or --summary")
    file = load_pipeline_file(pipeline_file)
    pipe = pick_pipeline(file, pipeline)
    shape = shapes.verify_checkpoint(pipe)
    batch = last_committed(pipe.checkpoint)
    seed = seed_of(pipe.checkpoint)
    kind = "long batch" if pipe.continuous else "micro-batch"
    if batch is None and (seed is None or not seed.has_state):
        raise NoStateError(
            f"pipeline {pipe.name!r}: checkpoint {pipe.checkpoint} has committed no "
            f"{kind} yet, so it holds no state"
        )
    # The joiner's TTL says which stored keys it no longer sees (expired, not yet dropped).
    joiner = pipeline_joiner(pipe)
    expiry = Expiry(joiner.state_ttl_ms(), int(time.time() * 1000))
    spark = state_session(file)
    head: dict[str, Any] = {"pipeline": pipe.name, "checkpoint": str(pipe.checkpoint)}
    head.update(_of_batch(batch, pipe.continuous))
    chain = joiner.chain()
    if chain is not None:
        # One operator per table, each with its own state (and the numbering one); in a
        # seed not yet applied, each operator's own too.
        names = [stage.table for stage in chain.stages] + ["numbering"] * (chain.last is not None)
        buckets = shapes.buckets_of_shape(shape)
        # Each operator's keys expire by its own table's TTL (the numbering's never).
        joiners = [stage.joiner for stage in chain.stages] + [chain.last] * (chain.last is not None)
        expiries = [Expiry(j.state_ttl_ms(), expiry.now_ms) for j in joiners if j is not None]
        operators: dict[str, Any] = {}
        for (name, operator), expires in zip(operator_ids(names).items(), expiries, strict=True):
            found_here: CheckpointState | Seed
            if batch is not None and pipe.continuous:  # its lease holds every operator's
                found_here = LeaseState(spark, pipe.checkpoint, batch).of_operator(operator)
            elif batch is not None:
                found_here = CheckpointState(spark, pipe.checkpoint, batch, operator)
            else:
                assert seed is not None  # noqa: S101 - checked above
                found_here = seed.of_operator(operator)
            if key is not None:
                operators[name] = _key(spark, found_here, key, buckets, expires)
            else:
                operators[name] = _summary(spark, found_here, expires)
        if key is not None and not any(operators.values()):
            raise NoStateError(
                f"pipeline {pipe.name!r}: no state for key {key!r} in any operator of "
                f"checkpoint {pipe.checkpoint} ({kind} {batch})"
            )
        typer.echo(json.dumps({**head, "operators": operators}, indent=2))
        return
    if batch is not None and pipe.continuous:  # its leases hold the buckets
        found: CheckpointState | Seed = LeaseState(spark, pipe.checkpoint, batch)
    elif batch is not None:
        found = CheckpointState(spark, pipe.checkpoint, batch)
    else:
        assert seed is not None  # noqa: S101 - checked above
        found = seed
    if key is not None:
        shown = _key(spark, found, key, shapes.buckets_of_shape(shape), expiry)
        if shown is None:
            raise NoStateError(
                f"pipeline {pipe.name!r}: no state for key {key!r} in checkpoint "
                f"{pipe.checkpoint} ({kind} {batch}); the key was never joined, or its "
                "state emptied or expired"
            )
        typer.echo(json.dumps({**head, **shown}, indent=2))
    else:
        typer.echo(json.dumps({**head, **_summary(spark, found, expiry)}, indent=2))


def _of_batch(batch: int | None, continuous: bool) -> dict[str, Any]:
    """What the output's head says of the state's batch: its number, or that it is a seed's."""
    if batch is None:
        return {
            "micro_batch": None,
            "seeded": "by daemon reset or rescale; the next start takes it in",
        }
    return {"long_batch" if continuous else "micro_batch": batch}


def _key(
    spark: SparkSession, found: CheckpointState | Seed, key: str, buckets: int, expiry: Expiry
) -> dict[str, Any] | None:
    # Late: Spark (the state reader's) loads when the command runs, not for `daemon --help`.
    from daemon.model.record_route import bucket_of
    from daemon.state.reader import CheckpointState
    from daemon.state.show import key_view, seeded_key_view

    label = bucket_of(key, buckets)
    if isinstance(found, CheckpointState):
        stored = found.bucket(label)
        return None if stored is None else key_view(stored, key, expiry)
    rows = found.state_frame(spark).where(f"bucket = {label}").selectExpr("inline(keys)")
    entries = rows.where(rows.key == key).collect()
    return seeded_key_view(label, key, bytes(entries[0].entry), expiry) if entries else None


def _summary(spark: SparkSession, found: CheckpointState | Seed, expiry: Expiry) -> dict[str, Any]:
    # Late: Spark (the state reader's) loads when the command runs, not for `daemon --help`.
    from daemon.state.reader import CheckpointState
    from daemon.state.show import bucket_summary, seeded_bucket_summary, summary

    if isinstance(found, CheckpointState):
        return summary(bucket_summary(stored, size, expiry) for stored, size in found.sizes())
    rows = found.state_frame(spark).toLocalIterator()
    return summary(
        seeded_bucket_summary(row.bucket, [bytes(item.entry) for item in row.keys], expiry)
        for row in rows
    )
