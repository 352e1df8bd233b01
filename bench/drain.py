"""Sustained throughput of continuous mode against micro-batch mode: a backlog drained.

comap's throughput workload (:mod:`bench.workloads`: the users, then the tweets, produced
before either contender starts) read by the example pipeline through ``daemon run``'s
service, in micro-batch mode (:func:`bench.enrichd.run_enrichd`) and with ``mode =
"continuous"``, alternately, on the same topics. Both are timed the same way, from the
service's start to the pipeline having read every record: the micro-batch run's last batch
ending, the continuous run's lag group (which the daemon commits from its task's reports,
about once a second) reaching the topics' ends. A continuous run also counts the long batches
its held state ended early (the daemon's log lines). A continuous drain takes any pipeline
(:data:`Pipeline`): ``python -m bench nway --continuous`` drains the shop's one-table and
three-table lookups with it (:mod:`bench.nway`).

Each drain runs in a fresh process of its own (:func:`in_process`, spawned as
:class:`bench.spawned.Child`), which starts its own Spark session and stops it at the end, so
that its peak memory is the service's alone: sampled over that process's tree
(:class:`bench.resources.PeakMemory`: the process, which runs the service, its JVM and its
Python workers) from the session's start to the service's stop. In the benchmark's process
a drain's JVM kept the heap the drains before it had grown and the Python workers were
reused: peaks rose from run to run (micro-batch's from 2,441 to 4,024 MiB over three runs of
one command), and the process held the backlogs it had produced. The price is a JVM start
and cold Python workers per drain, outside the timed part but for the workers' first
batch, as in a service that has just started."""

from __future__ import annotations

import logging
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from bench import tuning
from bench.enrichd import configure, run_enrichd, serving
from bench.latency import group_at
from bench.resources import PeakMemory, Peaks
from bench.spawned import Child
from bench.workloads import Topics
from daemon.model.config import DEFAULT_MAX_RECORDS_PER_BATCH

DRAIN_TIMEOUT_S = 3600.0
"""The longest a drain's process may take, its start included: a bound on a hang."""


@dataclass(frozen=True)
class Drained:
    """One contender's run: records read over seconds from the service's start."""

    mode: str
    records: int
    seconds: float
    peaks: Peaks
    ended_early: int = 0
    """Long batches that ended early because their held state passed its budget."""
    output_topic: str = ""
    dead_letter_topic: str = ""
    """The pipeline's topics, for the caller to count what it wrote (continuous mode)."""

    @property
    def rate(self) -> float:
        """Records a second, end to end."""
        return self.records / self.seconds


Pipeline = Callable[[Path], tuple[Any, Any]]
"""A drain's pipeline: ``(file, pipe)`` over the backlog, with its checkpoint (and any file
it needs) in the fresh folder it is given. Picklable (a module's function, or a
:func:`functools.partial` of one): the drain's own process makes it."""


def drain(
    mode: str,
    servers: str,
    topics: Topics,
    ends: dict[str, int],
    records: int,
    batches: Any = None,
    here: bool = False,
) -> Drained:
    """One drain of comap's backlog in ``mode`` ("micro_batch", or "continuous" with
    ``batches``), in a fresh process of its own (:func:`in_process`), or with ``here`` in
    this one, on its Spark session (the smoke's: no JVM start of its own, and a peak memory
    that is this process's, not the service's alone).

    Raises:
        RuntimeError: the drain failed, or its process ended or hung without a result.
    """
    if mode == "micro_batch":
        job = partial(micro_batches, servers, topics, ends, records)
    else:
        job = partial(continuous, partial(comap_pipeline, servers, topics), ends, records, batches)
    return job() if here else in_process(job, f"{mode} drain")


def in_process(job: Callable[[], Drained], name: str) -> Drained:
    """``job()`` (picklable) in a fresh process of its own with this process's tuning; its
    result.

    Raises:
        RuntimeError: the drain failed, or its process ended or hung without a result.
    """
    child = Child(_drain_here, (job, tuning.current()), name=name)
    try:
        (drained,) = child.expect("drained", DRAIN_TIMEOUT_S)
    finally:
        child.stop()
    result: Drained = drained
    return result


def _drain_here(
    job: Callable[[], Drained], settings: tuning.Tuning, orders: Any, reports: Any
) -> None:
    """A drain's process: the drain, then its result reported and the session stopped (with
    it the JVM, before the next drain's process starts its own)."""
    from pyspark.sql import SparkSession

    tuning.apply(settings)
    try:
        result = job()
    finally:
        session = SparkSession.getActiveSession()
        if session is not None:
            session.stop()
    reports.put(("drained", result))


def micro_batches(servers: str, topics: Topics, ends: dict[str, int], records: int) -> Drained:
    """The pipeline in micro-batch mode (the default cap) over the backlog, in this process
    (:func:`drain` runs it in a fresh one)."""
    result = run_enrichd(servers, topics, ends, records, DEFAULT_MAX_RECORDS_PER_BATCH, 3600.0)
    seconds = result.batches[-1].ended - result.query_started
    return Drained("micro_batch", records, seconds, result.peaks)


def comap_pipeline(servers: str, topics: Topics, folder: Path) -> tuple[Any, Any]:
    """comap's example pipeline over ``topics`` (the default cap), its checkpoint in
    ``folder``: a :data:`Pipeline`."""
    return configure(servers, topics, folder / "checkpoint", DEFAULT_MAX_RECORDS_PER_BATCH)


def continuous(pipeline: Pipeline, ends: dict[str, int], records: int, batches: Any) -> Drained:
    """``pipeline`` with ``mode = "continuous"`` over the backlog until its consumer group
    reaches ``ends``, its long batches' length, leases and held state budget those of
    ``batches`` (:class:`daemon.continuous.lease_source.LongBatches`; a budget of 0: the
    default), in this process (:func:`in_process` runs it in a fresh one)."""
    from daemon.kafka.names import pipeline_group
    from daemon.pipeline.plan import client_conf
    from daemon.spark.session import spark_session

    with tempfile.TemporaryDirectory(prefix="enrichd-bench-drain-") as tmp:
        file, pipe = pipeline(Path(tmp))
        settings = {"long_batch": batches.long_batch_ms, "leases": batches.leases}
        if batches.held_state_budget:
            settings["held_state_budget"] = batches.held_state_budget
        pipe = pipe.model_copy(update={"mode": "continuous", **settings})
        with PeakMemory() as memory, _early_ends() as early:
            spark = spark_session(tuning.spark(file.spark))
            conf, group = client_conf(file), pipeline_group(file.kafka.id_prefix, pipe.name)
            started = time.monotonic()
            with serving(file, pipe, spark, 3600.0) as query:
                running = query(pipe.name)
                while not group_at(conf, group, ends):
                    if running.exception() is not None:
                        raise RuntimeError(f"the pipeline failed: {running.exception()}")
                    time.sleep(0.2)
                seconds = time.monotonic() - started
    return Drained(
        "continuous",
        records,
        seconds,
        memory.result,
        len(early),
        pipe.output.topic,
        pipe.dead_letters,
    )


@contextmanager
def _early_ends() -> Iterator[list[str]]:
    """The daemon's lines that say a long batch ended early, as they are logged."""
    lines: list[str] = []

    class Heard(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if "ended early" in record.getMessage():
                lines.append(record.getMessage())

    operations = logging.getLogger("enrichd.operations")
    level = operations.level
    if operations.getEffectiveLevel() > logging.INFO:
        operations.setLevel(logging.INFO)  # the service may not have set up its logs
    handler = Heard(logging.INFO)
    operations.addHandler(handler)
    try:
        yield lines
    finally:
        operations.removeHandler(handler)
        operations.setLevel(level)
