"""What a pipeline in continuous mode cannot do yet, each refused with one line.

A continuous pipeline runs its joiner's operators in a long batch's task
(:mod:`daemon.continuous`), and a joiner's second stage in a continuous query of its own. A
chain's operators (a lookup of several tables) hand records to each other inside the task,
so a chain runs in one lease; more are refused as the pipeline is planned, so ``daemon
validate`` says so before a start does.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

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
    if joiner.chain() is not None and pipe.leases > 1:
        problems.append(
            'mode = "continuous" runs a lookup of several tables in one lease (its tables\' '
            "operators hand records on inside the lease's task, each keyed by its own "
            f"table's key): set leases = 1, not {pipe.leases}"
        )
    return problems


def slot_problems(file: PipelineFile) -> list[str]:
    """Why the file's continuous pipelines would leave other queries no task slot.

    Each lease holds a slot for its whole long batch; a lease without one waits for another
    to end its long batch, and a micro-batch query without one waits for every lease. A
    joiner's second stage is a continuous query of its own, with as many leases. Known for a
    local master, and for a cluster's application capped by ``spark.cores.max``: else a
    cluster's slots are its workers' free cores when the application starts, which the file
    does not say.
    """
    leases = sum(pipe.leases * queries(pipe) for pipe in file.pipeline if pipe.continuous)
    slots = _task_slots(file)
    if not leases or slots is None:
        return []
    beside = any(not pipe.continuous for pipe in file.pipeline)
    needed = leases + (1 if beside else 0)
    if needed <= slots.tasks:
        return []
    others = " and a micro-batch pipeline's tasks" if beside else ""
    hold = (
        f"the continuous pipelines' {leases} lease(s) hold one each for whole long batches{others}"
    )
    cores = needed * slots.cpus_per_task
    if slots.local:
        return [
            f"[spark] master {file.spark.master!r} runs {slots.tasks} task(s) at once, and "
            f"{hold}: give it {cores} (local[{cores}]) or set fewer `leases`"
        ]
    return [
        f"[spark.conf] spark.cores.max {file.spark.conf[_CORES_MAX]!r} lets the application "
        f"run {slots.tasks} task(s) at once on the cluster, and {hold}: raise it to "
        f"{cores} or set fewer `leases`"
    ]


def queries(pipe: PipelineConfig) -> int:
    """The streaming queries ``pipe`` runs: its joiner's, and one for a second stage."""
    try:
        joiner = pipeline_joiner(pipe)
    except EnrichdError:  # its own line comes from the pipeline's checks
        return 1
    return 1 if joiner.downstream() is None else 2


_CORES_MAX = "spark.cores.max"
_TASK_CPUS = "spark.task.cpus"


@dataclass(frozen=True)
class _Slots:
    tasks: int
    """How many tasks run at once."""
    cpus_per_task: int
    """``spark.task.cpus``: the cores one task takes."""
    local: bool
    """Whether the master is local (else a cluster's application capped by its cores)."""


def _task_slots(file: PipelineFile) -> _Slots | None:
    """How many tasks the file's Spark runs at once; None: the file does not say.

    A local master's cores, or a cluster application's ``spark.cores.max``, over
    ``spark.task.cpus`` (a value that is no number is Spark's to refuse).
    """
    conf = file.spark.conf
    try:
        cpus = max(int(conf.get(_TASK_CPUS, "1")), 1)
        match = _LOCAL.match(file.spark.master.strip())
        if match is not None:
            cores = match.group(1) or "1"
            count = (os.cpu_count() or 1) if cores == "*" else int(cores)
            return _Slots(count // cpus, cpus, local=True)
        if _CORES_MAX in conf:
            return _Slots(int(conf[_CORES_MAX]) // cpus, cpus, local=False)
    except ValueError:
        return None
    return None
