"""What ``daemon verify --mode`` changes beyond the pipelines' settings: who runs, and where.

Each continuous query's lease holds a task slot of the child's local Spark for its whole long
batch, so the child gets one slot a query (two for a pipeline with a second stage).
"""

from __future__ import annotations

from daemon.pipeline.continuous_checks import queries
from daemon.verify.plan import VerifiedPipeline

MICRO_BATCH_SLOTS = 2
"""The child's ``local[N]`` for micro-batch pipelines: each query's tasks take turns."""


def slots(pipelines: list[VerifiedPipeline]) -> int:
    """The child's local task slots: one per continuous lease, else :data:`MICRO_BATCH_SLOTS`."""
    leases = sum(
        pipe.config.leases * queries(pipe.config) for pipe in pipelines if pipe.config.continuous
    )
    return max(MICRO_BATCH_SLOTS, leases)
