"""At a query's start: whether the checkpoint still says what the output holds.

Each task of a micro-batch commits a batch marker with its output (:mod:`daemon.sink.markers`).
Spark writes its offset and commit logs by renaming files it does not sync to disk, so a
host crash, a volume snapshot restored or a checkpoint copied from elsewhere can leave a
checkpoint *behind* its output: the logs lost batch N, whose transactions committed.
Started so, Spark would plan batch N again over other ranges, and the markers would make
its tasks skip writing it: the new ranges' extra records never written, the dropped ones
written again in N + 1. So before a query starts, the markers of its checkpoint's query are
read, and a marker of a batch past the checkpoint's last planned one stops the pipeline
(:class:`~daemon.errors.CheckpointDivergedError`). A replay of a batch the checkpoint still
plans is checked by its tasks, range by range (:mod:`daemon.sink.task_output`).

Markers can also be gone: the brokers drop the offsets of a group that committed nothing for
``offsets.retention.minutes`` (7 days by default), and a pipeline stopped that long finds
none. A checkpoint that committed batches and has none pending loses nothing by that: the
next batch is a new one. One with a batch planned but not committed (a crash, or a stop
that ran out of time, in the middle of it) cannot tell whether that batch's output was
written: running it could write it twice, skipping it could lose it. That stops the pipeline
too, and the operator chooses (docs/operations.md, "When the checkpoint and the output
disagree").
"""

from __future__ import annotations

import logging
from pathlib import Path

from daemon.checkpoint.batch_logs import last_committed, last_planned
from daemon.errors import CheckpointDivergedError
from daemon.sink.markers import Marker, describe, query_markers
from daemon.sink.spec import OutputSpec
from daemon.state.reader import query_id

log = logging.getLogger("enrichd.service")

_RECOVER = 'see docs/operations.md, "When the checkpoint and the output disagree"'


def check_markers(spec: OutputSpec, checkpoint: Path) -> dict[int, Marker]:
    """Refuse to start a checkpoint its output's markers say is behind; the markers read.

    Nothing is asked of the cluster for a new checkpoint, nor at least once (no markers).

    Raises:
        CheckpointDivergedError: a marker is ahead of the checkpoint, or the checkpoint has
            a batch pending and the markers are gone (see the module docstring).
        KafkaUnavailableError: the cluster would not list the marker groups.
    """
    query = query_id(checkpoint)
    planned = last_planned(checkpoint)
    if spec.delivery != "exactly_once" or query is None or planned is None:
        return {}
    found = query_markers(spec.client_conf, spec.id_prefix, spec.pipeline, query, spec.output_topic)
    ahead = sorted((marker.batch, task) for task, marker in found.items() if marker.batch > planned)
    if ahead:
        batch, task = ahead[-1]
        raise CheckpointDivergedError(
            f"pipeline {spec.pipeline!r}: checkpoint {checkpoint} ends at micro-batch "
            f"{planned}, but task {task}'s marker says micro-batch {batch} "
            f"({describe(found[task].share)}) is written to Kafka: the checkpoint was "
            "rewound (a host crash lost Spark's logs, a snapshot was restored, or it was "
            "copied from elsewhere), and running it would plan those batches again over other "
            f"input, skipping or duplicating records; {_RECOVER}"
        )
    committed = last_committed(checkpoint)
    if found or committed is None:
        return found
    if planned > committed:
        raise CheckpointDivergedError(
            f"pipeline {spec.pipeline!r}: micro-batch {planned} of checkpoint {checkpoint} was "
            "planned but not committed, and the cluster holds none of the pipeline's batch "
            "markers (the brokers drop them after offsets.retention.minutes, 7 days by "
            "default, of a pipeline stopped that long; or they were deleted): whether its "
            "output was written cannot be told, so running it could write it twice and "
            f"skipping it could lose it; {_RECOVER}"
        )
    log.warning(
        "pipeline %s: checkpoint %s committed micro-batches up to %d, but the cluster holds "
        "none of the pipeline's batch markers (dropped after the brokers' "
        "offsets.retention.minutes, or deleted); no batch was pending, so it goes on",
        spec.pipeline,
        checkpoint,
        committed,
        extra={"pipeline": spec.pipeline},
    )
    return found
