"""What a pipeline in continuous mode cannot do yet, each refused with one line.

A continuous pipeline runs one joiner operator in a long batch's task
(:mod:`daemon.continuous`), which reads its inputs in arrival order. A joiner that needs more
than that is refused as the pipeline is planned, so ``daemon validate`` says so before a start
does.
"""

from __future__ import annotations

from daemon.model.config import PipelineConfig
from daemon.plugin.joiner import Joiner


def continuous_problems(pipe: PipelineConfig, joiner: Joiner) -> list[str]:
    """Why ``joiner`` cannot run in ``pipe``'s continuous mode (micro-batch mode: none)."""
    if not pipe.continuous:
        return []
    problems = []
    if joiner.chain() is not None:
        problems.append(
            'mode = "continuous" runs one joiner operator; a lookup of several tables runs '
            'its tables in a chain of them: run it in mode = "micro_batch" for now'
        )
    stage = joiner.downstream()
    if stage is not None:
        problems.append(
            f'mode = "continuous" runs one stage; joiner {pipe.joiner!r} writes output '
            f'{stage.output!r} in a second stage: run it in mode = "micro_batch" for now'
        )
    bootstrapped = sorted(joiner.bootstrap_roles())
    if bootstrapped:
        problems.append(
            'mode = "continuous" reads its inputs in arrival order; `bootstrap` '
            f"({', '.join(bootstrapped)}) reads a table to its end first: run it in "
            'mode = "micro_batch" for now'
        )
    return problems
