"""What a pipeline in continuous mode cannot do yet, each refused with one line.

A continuous pipeline runs one joiner operator in a long batch's task
(:mod:`daemon.continuous`), and a joiner's second stage in a continuous query of its own. A
joiner that needs more than that (a chain of operators in one query) is refused as the
pipeline is planned, so ``daemon validate`` says so before a start does.
"""

from __future__ import annotations

import os
import re

from daemon.errors import EnrichdError
from daemon.model.config import PipelineConfig, PipelineFile
from daemon.plugin.configured import pipeline_joiner
from daemon.plugin.joiner import Joiner

_LOCAL = re.compile(r"^local(?:\[(\d+|\*)(?:,\d+)?\])?$")
"""A local master: ``local``, ``local[N]``, ``local[*]``, ``local[N,F]``."""


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
    return problems


def slot_problems(file: PipelineFile) -> list[str]:
    """Why the file's continuous pipelines would leave other queries no task slot.

    Each lease holds a slot for its whole long batch; a lease without one waits for another
    to end its long batch, and a micro-batch query without one waits for every lease. A
    joiner's second stage is a continuous query of its own, with as many leases. Known for a
    local master only: a cluster's slots are its workers'.
    """
    leases = sum(pipe.leases * queries(pipe) for pipe in file.pipeline if pipe.continuous)
    match = _LOCAL.match(file.spark.master.strip())
    if not leases or match is None:
        return []
    cores = match.group(1) or "1"
    slots = (os.cpu_count() or 1) if cores == "*" else int(cores)
    beside = any(not pipe.continuous for pipe in file.pipeline)
    needed = leases + (1 if beside else 0)
    if needed <= slots:
        return []
    others = " and a micro-batch pipeline's tasks" if beside else ""
    return [
        f"[spark] master {file.spark.master!r} runs {slots} task(s) at once, and the "
        f"continuous pipelines' {leases} lease(s) hold one each for whole long batches"
        f"{others}: give it {needed} (local[{needed}]) or set fewer `leases`"
    ]


def queries(pipe: PipelineConfig) -> int:
    """The streaming queries ``pipe`` runs: its joiner's, and one for a second stage."""
    try:
        joiner = pipeline_joiner(pipe)
    except EnrichdError:  # its own line comes from the pipeline's checks
        return 1
    return 1 if joiner.downstream() is None else 2
