"""``daemon reset`` and ``daemon rescale``: a checkpoint starts again, from chosen offsets.

How it works: both leave Spark's checkpoint files alone (editing them is not a supported way
to move a query). They make the pipeline's checkpoint new, with a seed
(:mod:`daemon.state.seed`) that says where each input partition starts and, when state is
kept, holds the state, portable, already dealt into the buckets the pipeline now has. The
old checkpoint's contents move aside into ``<checkpoint>.before-reset-<time>`` (or
``-rescale-``), to delete once the pipeline runs as wanted. All of it happens under the
checkpoint's lock (:mod:`daemon.pipeline.lock`): a running daemon makes both refuse, and no daemon
can start in the middle.

Every stage of the pipeline is handled: a joiner's second stage (lookup's running totals)
has a checkpoint of its own inside the first's, and reads the first stage's output. A reset
that drops the state starts it at the end of that output with empty state, so that what it
adds up from then on is the output of the records read again; one that keeps the state
leaves the second stage as it is. A rescale moves every stage's state.

A stage whose query chains several stateful operators (a lookup of several tables: one per
table, and the numbering) has a state per operator. Each operator's keys are moved into a
seed state of its own (:func:`~daemon.checkpoint.layout.seed_state`), which the same
operator of the new query takes in as its initial state.

A new checkpoint is a new query to Spark: its micro-batches count from 0 again, and the
output's exactly-once markers are kept per query (``daemon.sink.markers``), so nothing
of the old run's is taken for the new one's. The old query's marker groups are of no more
use, and :func:`forget_markers` deletes them from the cluster.
"""

from __future__ import annotations

import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from daemon.checkpoint import due_times
from daemon.checkpoint.batch_logs import last_committed, planned_batch, planned_past_commit
from daemon.checkpoint.due_times import NO_BATCH, DueTimes
from daemon.checkpoint.layout import (
    DOWNSTREAM,
    LOCK,
    SEED_STAGING,
    backup_folder,
    seed_folder,
    seed_state,
    staging_folder,
)
from daemon.errors import ConfigError
from daemon.kafka.admin import delete_groups, topic_ids
from daemon.kafka.names import legacy_marker_groups_of, marker_groups_of, reader_group
from daemon.model.config import PipelineConfig, PipelineFile
from daemon.model.constants import DEFAULT_ID_PREFIX
from daemon.model.wire import TOPIC_IDS
from daemon.operator.chain_step import operator_id, timer_label
from daemon.pipeline import written_by
from daemon.pipeline.checkpoint_shape import (
    buckets_of_shape,
    ran_continuous,
    recorded_shape,
    write_shape,
)
from daemon.pipeline.plan import PipelinePlan, client_conf, plan_pipeline
from daemon.private_paths import private_folder
from daemon.spark.session import default_setting
from daemon.state.export import committed_keys, seed_rows, seeded_keys
from daemon.state.leases import LeaseState
from daemon.state.positions import Target, positions
from daemon.state.reader import CheckpointState, query_id
from daemon.state.seed import SEED_SCHEMA, seed_of, seed_timers, write_seed

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


@dataclass
class StageChange:
    """What happens to one stage (streaming query) of the pipeline."""

    name: str
    checkpoint: Path
    before: dict[str, int] | None
    """Where the stage would go on reading: its last committed end offsets (or its seed's)."""
    after: dict[str, int] | None
    """Where it will start; None: it is left as it is."""
    state: str
    """What becomes of its state, in words."""
    keys: dict[int, DataFrame] = field(default_factory=dict)
    """Its state's keys, portable (``daemon.state.export``), per stateful operator of its
    query (numbered as Spark does: 0 is a one-joiner query's only one, a chain's last), when
    they move with it; empty: none do."""
    query_id: str | None = None
    """The id of the query the old checkpoint held, whose marker groups go with it."""
    topic_ids: dict[str, str] = field(default_factory=dict)
    """The ids of the topics ``after`` is of (none: the broker gives none)."""
    to_earliest: bool = False
    """It starts at the earliest offsets there are when it starts (a reset to earliest)."""
    operators: int = 1
    """How many stateful operators its query has (:func:`operators_of`)."""


@dataclass
class Change:
    """Everything a reset or rescale does, to show before doing it."""

    pipe: PipelineConfig
    verb: str
    """``reset`` or ``rescale``."""
    stages: list[StageChange] = field(default_factory=list)
    client_conf: dict[str, str] = field(default_factory=dict)
    """The cluster's client settings, to delete the old marker groups."""
    id_prefix: str = DEFAULT_ID_PREFIX
    """``[kafka] id_prefix``: what the marker groups' names start with."""
    backup: Path = field(init=False)

    def __post_init__(self) -> None:
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        self.backup = backup_folder(self.pipe.checkpoint, self.verb, stamp)

    def describe(self) -> list[str]:
        """Lines saying what will change."""
        lines = [f"pipeline {self.pipe.name!r}, checkpoint {self.pipe.checkpoint}:"]
        for stage in self.stages:
            lines.append(f"  {stage.name}: {stage.state}")
            if stage.after is None:
                continue
            for name, offset in sorted(stage.after.items()):
                was = "-" if stage.before is None else str(stage.before.get(name, "-"))
                lines.append(f"    {name}: {was} -> {offset}")
        lines.append(f"  the checkpoint's contents move to {self.backup}")
        return lines


def committed_state(
    spark: SparkSession, name: str, checkpoint: Path, *, continuous: bool
) -> CheckpointState | None:
    """The state a stage's checkpoint committed last, as its mode laid it out (None: none)."""
    batch = last_committed(checkpoint)
    if batch is None:
        return None
    if continuous:  # its leases hold the buckets, and where they stopped
        return LeaseState(spark, checkpoint, batch, pipeline=name)
    return CheckpointState(spark, checkpoint, batch)


def committed_or_seeded(
    checkpoint: Path, committed: CheckpointState | None = None
) -> dict[str, int] | None:
    """Where a stage would go on reading: its last committed end offsets, or its seed's.

    ``committed``: the stage's :func:`committed_state`, needed for a continuous checkpoint,
    whose offset log holds no offsets (its leases keep them).
    """
    if isinstance(committed, LeaseState):
        return committed.ends()
    batch = last_committed(checkpoint)
    if batch is not None:
        return planned_batch(checkpoint, batch).ends
    seed = seed_of(checkpoint)
    return None if seed is None else dict(seed.offsets)


def read_topic_ids(checkpoint: Path) -> dict[str, str]:
    """The ids of the topics a stage's :func:`committed_or_seeded` offsets are of (if known)."""
    batch = last_committed(checkpoint)
    if batch is not None:
        sources = planned_batch(checkpoint, batch).sources
        return dict(((sources[0] if sources else None) or {}).get(TOPIC_IDS) or {})
    seed = seed_of(checkpoint)
    return {} if seed is None else dict(seed.topic_ids)


def state_keys(
    spark: SparkSession,
    checkpoint: Path,
    buckets: int,
    committed: CheckpointState | None,
    operators: int = 1,
) -> dict[int, DataFrame]:
    """The stage's state, portable, dealt into ``buckets``, per stateful operator.

    Empty when the stage holds none.

    Args:
        spark: the session to read with.
        checkpoint: the stage's checkpoint.
        buckets: the new count of state buckets.
        committed: the stage's :func:`committed_state`.
        operators: how many stateful operators its query has (:func:`operators_of`).
    """
    if committed is not None:
        return {
            operator: committed_keys(
                committed if operator == 0 else committed.of_operator(operator), buckets
            )
            for operator in range(operators)
        }
    seed = seed_of(checkpoint)
    if seed is None:
        return {}
    seeds = (seed.of_operator(operator) for operator in range(operators))
    return {
        found.operator: seeded_keys(found.state_frame(spark), buckets)
        for found in seeds
        if found.has_state
    }


def operators_of(stage: PipelinePlan) -> int:
    """How many stateful operators a stage's query has: one per chained operator, else one."""
    return len(stage.chain) or 1


def _each_operator(what: str, operators: int) -> str:
    """What becomes of a stage's state, in words, saying that a chain's moves per operator."""
    if operators == 1:
        return what
    return f"{what}, each of its {operators} operators' into its own"


def refuse_unfinished(pipe: PipelineConfig, checkpoint: Path) -> None:
    """Refuse to move state past a micro-batch that was planned but not committed.

    Its output may have been written already (its Kafka transaction committed just before a
    crash); a restart on the same checkpoint knows that and writes nothing again, a new one
    would not.

    Raises:
        ConfigError: the checkpoint's last micro-batch was planned but never committed.
    """
    batch = planned_past_commit(checkpoint)
    if batch is not None:
        raise ConfigError(
            f"pipeline {pipe.name!r}: micro-batch {batch} in checkpoint {checkpoint} was "
            "planned but not committed (the daemon stopped in the middle of it); run the "
            "daemon until it has caught up, stop it, then try again"
        )


def reset_change(
    file: PipelineFile,
    pipe: PipelineConfig,
    target: Target,
    *,
    keep_state: bool,
    spark: SparkSession | None,
) -> Change:
    """What ``daemon reset`` would do (nothing is changed yet)."""
    conf = client_conf(file)
    plan = plan_pipeline(file, pipe, conf)
    stages = plan.stages()
    change = Change(pipe, "reset", client_conf=conf, id_prefix=file.kafka.id_prefix)
    for number, stage in enumerate(stages):
        checkpoint = Path(stage.config.checkpoint)
        old_query = query_id(checkpoint)
        topics = sorted({spec.topic for spec in stage.source.inputs})
        committed = None
        if spark is not None and number == 0:
            continuous = ran_continuous(recorded_shape(pipe))
            committed = committed_state(spark, pipe.name, checkpoint, continuous=continuous)
        if isinstance(committed, LeaseState):  # shown only: the reset chooses the start
            before: dict[str, int] | None = committed.least_ends()
        else:
            before = committed_or_seeded(checkpoint, committed)
        if number == 0:
            keys = {}
            what = "state dropped"
            if keep_state:
                refuse_unfinished(pipe, checkpoint)
                assert spark is not None  # noqa: S101 - the command starts it for --keep-state
                operators = operators_of(stage)
                keys = state_keys(spark, checkpoint, pipe.state_buckets, committed, operators)
                what = _each_operator("state kept", operators)
            after = positions(conf, topics, target, reader_group(file.kafka.id_prefix))
            stage_change = StageChange(
                stage.config.name,
                checkpoint,
                before,
                after,
                what,
                keys,
                old_query,
                topic_ids(conf, topics),
                to_earliest=target == "earliest",
                operators=operators_of(stage),
            )
            change.stages.append(stage_change)
        elif keep_state:
            change.stages.append(
                StageChange(stage.config.name, checkpoint, before, None, "left as it is")
            )
        else:
            after = positions(conf, topics, "latest", reader_group(file.kafka.id_prefix))
            what = "state dropped; reads the first stage's output from its end"
            ids = topic_ids(conf, topics)
            change.stages.append(
                StageChange(
                    stage.config.name,
                    checkpoint,
                    before,
                    after,
                    what,
                    query_id=old_query,
                    topic_ids=ids,
                )
            )
    return change


PARTITIONS = "spark.sql.shuffle.partitions"


def layout_of(file: PipelineFile, pipe: PipelineConfig, shape: dict[str, Any]) -> tuple[str, str]:
    """The checkpoint's state layout and the file's, in words (equal: nothing to rescale).

    A checkpoint made by another pyspark minor version (:mod:`daemon.pipeline.written_by`)
    differs by that alone: rescaling moves its state into a checkpoint this pyspark makes.
    """
    partitions = file.spark.conf.get(PARTITIONS, default_setting(PARTITIONS))
    batch = last_committed(pipe.checkpoint)
    was = partitions
    if batch is not None:  # Spark keeps the count the checkpoint began with
        was = planned_batch(pipe.checkpoint, batch).conf.get(PARTITIONS, "?")
    old = f"{buckets_of_shape(shape)} buckets over {was} shuffle partitions"
    new = f"{pipe.state_buckets} buckets over {partitions} shuffle partitions"
    if ran_continuous(shape) or pipe.continuous:  # the mode and leases are the layout too
        old += _mode_words(shape.get("mode", "micro_batch"), shape.get("leases", 1))
        new += _mode_words(pipe.mode, pipe.leases)
    spark = written_by.spark_mismatch(shape)
    if spark is not None:  # the state moves into a checkpoint of this pyspark's own
        old, new = f"{old} of pyspark {spark[0]}", f"{new} of pyspark {spark[1]}"
    return old, new


def _mode_words(mode: str, leases: int) -> str:
    if mode == "continuous":
        return f" in continuous mode, {leases} lease{'s' * (leases != 1)}"
    return " in micro-batch mode"


def rescale_change(
    file: PipelineFile, pipe: PipelineConfig, spark: SparkSession, layout: tuple[str, str]
) -> Change:
    """What ``daemon rescale`` would do: every stage's state into the file's layout."""
    conf = client_conf(file)
    plan = plan_pipeline(file, pipe, conf)
    stages = plan.stages()
    change = Change(pipe, "rescale", client_conf=conf, id_prefix=file.kafka.id_prefix)
    continuous = ran_continuous(recorded_shape(pipe))  # one stage: a second is refused there
    for stage in stages:
        checkpoint = Path(stage.config.checkpoint)
        refuse_unfinished(pipe, checkpoint)
        committed = committed_state(spark, pipe.name, checkpoint, continuous=continuous)
        before = committed_or_seeded(checkpoint, committed)
        operators = operators_of(stage)
        keys = state_keys(spark, checkpoint, pipe.state_buckets, committed, operators)
        what = f"state moved from {layout[0]} into {layout[1]}"
        what = f"{_each_operator(what, operators)}; reads on where it stopped"
        old_query = query_id(checkpoint)
        # The ids its offsets were read with, not today's: a topic created again since the
        # last run is then told at the next start.
        ids = read_topic_ids(checkpoint)
        seed = seed_of(checkpoint)
        change.stages.append(
            StageChange(
                stage.config.name,
                checkpoint,
                before,
                before or {},
                what,
                keys,
                old_query,
                ids,
                to_earliest=seed is not None and seed.to_earliest,
                operators=operators,
            )
        )
    return change


def apply(change: Change) -> None:
    """Do what ``change`` says; the caller holds the checkpoint's lock.

    The new seeds' state is written first, inside the checkpoint; only then do the old
    contents move aside and the seeds take their place, so a failure while writing the state
    leaves the checkpoint as it was.
    """
    folder = Path(change.pipe.checkpoint)
    staging = staging_folder(folder)
    shutil.rmtree(staging, ignore_errors=True)
    timers: dict[int, dict[int, int]] = {}
    for number, stage in enumerate(change.stages):
        for operator, keys in sorted(stage.keys.items()):
            staged = staging / str(number) / seed_state(operator)
            seed_rows(keys).write.parquet(str(staged))
            written = keys.sparkSession.read.schema(SEED_SCHEMA).parquet(str(staged))
            # Each operator's under the labels its own reports use, which replace them.
            place = operator_id(operator, stage.operators)
            timers.setdefault(number, {}).update(
                (timer_label(place, stage.operators, bucket), ms)
                for bucket, ms in seed_timers(written).items()
            )
    kept = {LOCK, SEED_STAGING}
    if any(stage.after is None for stage in change.stages):
        kept.add(DOWNSTREAM)  # a second stage left as it is
    private_folder(change.backup, what="the checkpoint's backup")
    for entry in sorted(folder.iterdir()):
        if entry.name not in kept:
            entry.rename(change.backup / entry.name)
    for number, stage in enumerate(change.stages):
        if stage.after is None:
            continue
        seed = seed_folder(stage.checkpoint)
        write_seed(
            seed,
            stage.after,
            change.verb,
            topic_ids=stage.topic_ids,
            to_earliest=stage.to_earliest,
        )
        for operator in sorted(stage.keys):
            staged = staging / str(number) / seed_state(operator)
            if staged.exists():
                staged.rename(seed / seed_state(operator))
        if number in timers:  # when the seeded keys are due, for the query's clock
            due_times.write(stage.checkpoint, DueTimes(NO_BATCH, timers[number]))
    shutil.rmtree(staging, ignore_errors=True)
    write_shape(change.pipe)


def forget_markers(change: Change) -> list[str]:
    """Delete the marker groups of the queries ``change`` replaced; the groups deleted.

    Called once :func:`apply` is done: the new checkpoint is a new query, with groups of its
    own (see the module docstring).

    Raises:
        KafkaUnavailableError: the cluster would not list or delete them.
    """
    replaced = [
        layout(change.id_prefix, stage.name, stage.query_id)
        for stage in change.stages
        if stage.after is not None and stage.query_id is not None
        for layout in (marker_groups_of, legacy_marker_groups_of)
    ]
    return delete_groups(change.client_conf, replaced)


def summary_line(change: Change) -> str:
    """What was done, in one line."""
    return (
        f"pipeline {change.pipe.name!r}: the next `daemon run` starts from the seed in "
        f"{change.pipe.checkpoint}; the old checkpoint is in {change.backup}"
    )
