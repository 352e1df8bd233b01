"""What ``daemon verify --mode`` changes beyond the pipelines' settings: who runs, and where.

A continuous pipeline refuses some joiners' pipelines (a second stage, a chain:
:func:`daemon.pipeline.continuous_checks.continuous_problems`): verify leaves those out with a
line each, as the child would refuse to start them. Each continuous pipeline's lease holds a
task slot of the child's local Spark for its whole long batch, so the child gets one slot a
pipeline.
"""

from __future__ import annotations

from daemon.errors import EnrichdError
from daemon.pipeline.continuous_checks import continuous_problems
from daemon.plugin.configured import pipeline_joiner
from daemon.verify.plan import VerifiedPipeline, VerifyOptions

MICRO_BATCH_SLOTS = 2
"""The child's ``local[N]`` for micro-batch pipelines: each query's tasks take turns."""


def refused_joiners(
    pipelines: list[VerifiedPipeline], options: VerifyOptions
) -> tuple[list[VerifiedPipeline], list[str]]:
    """The pipelines the mode runs, and a line for each it refuses.

    Raises:
        EnrichdError: the mode refuses every joiner asked for: nothing would be verified.
    """
    kept, skipped = [], []
    for pipe in pipelines:
        problems = continuous_problems(pipe.config, pipeline_joiner(pipe.config))
        if problems:
            skipped.append(f"{pipe.joiner}: not verified in {options.mode} mode: {problems[0]}")
        else:
            kept.append(pipe)
    if not kept:
        raise EnrichdError("; ".join(skipped))
    return kept, skipped


def slots(pipelines: list[VerifiedPipeline]) -> int:
    """The child's local task slots: one per continuous lease, else :data:`MICRO_BATCH_SLOTS`."""
    leases = sum(pipe.config.leases for pipe in pipelines if pipe.config.continuous)
    return max(MICRO_BATCH_SLOTS, leases)
