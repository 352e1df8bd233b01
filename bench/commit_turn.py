"""``python -m bench commit_turn``: what the commit turn costs where it is on.

On the embedded broker the tasks of a host end their transactions one at a time
(:mod:`daemon.sink.commit_turn`); on any other cluster they do not take the turn. This
measures the price of taking it: each of ``--tasks`` processes plays one task of the joiner
operator, with the operator's own task output (:class:`daemon.sink.task_output.TaskOutput`,
its transactional id, its marker, its held records), and writes ``--rounds`` micro-batches of
``--records`` records spread over the output topic's partitions. Before each commit the
tasks meet at a barrier, so that they end together, as a micro-batch's tasks do: the worst
case for the turn. Per commit it records the whole commit (producing the held records,
waiting for the turn, the EndTxn) and the part spent waiting for the turn; the first round,
which also initialises each producer, is left out.

The turn is not measured off: on the test broker two transactions ending together can
strand one of them (docs/contributing.md), which is why the turn is there.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from bench.report import Section
from bench.wording import checks_line, machine, markdown_table, run_header

if TYPE_CHECKING:
    from daemon.broker import EmbeddedBroker

PARTITIONS = 4
"""The output topic's partitions: each task's transaction reaches every one, as the
operator's does (its records go to every output partition)."""


@dataclass(frozen=True)
class Commit:
    """One task's commit of one micro-batch."""

    tasks: int
    task: int
    batch: int
    total_s: float
    """From asking to commit to the commit's return."""
    waited_s: float
    """Of that, waiting for the turn."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The workload's sizes."""
    parser.add_argument(
        "--tasks", type=int, nargs="+", default=[2, 4, 8], help="tasks per run (default 2 4 8)"
    )
    parser.add_argument("--rounds", type=int, default=40, help="micro-batches per task")
    parser.add_argument("--records", type=int, default=50, help="records per task and batch")


def run(args: argparse.Namespace, broker: EmbeddedBroker) -> Section:
    """Every run of ``args.tasks`` tasks on ``broker``; the section for ``BENCHMARKS.md``."""
    from daemon.kafka.admin import create_topics

    machine_line = machine()
    conf = {"bootstrap.servers": broker.bootstrap_servers}
    table: list[tuple[str, ...]] = [
        ("tasks", "commits", "commit p50", "commit p99", "waiting p50", "waiting p99")
    ]
    checks: list[str] = []
    loads: list[str] = []
    ok = True
    for tasks in args.tasks:
        topic = f"turn-{tasks}-{uuid.uuid4().hex[:8]}"
        create_topics(conf, {topic: PARTITIONS})
        commits = _run_tasks(conf, topic, tasks, args.rounds, args.records)
        loads.append(f"{tasks} tasks {os.getloadavg()[0]:.2f}")
        measured = [c for c in commits if c.batch > 0]
        expected = tasks * (args.rounds - 1)
        if len(measured) != expected:
            ok = False
            checks.append(f"{tasks} tasks: {len(measured)} of {expected} commits measured")
        written = _count_records(conf, topic)
        if written != tasks * args.rounds * args.records:
            ok = False
            checks.append(
                f"{tasks} tasks: {written} records committed, "
                f"{tasks * args.rounds * args.records} written"
            )
        totals = [c.total_s for c in measured]
        waits = [c.waited_s for c in measured]
        table.append(
            (
                str(tasks),
                str(len(measured)),
                _ms(_quantile(totals, 0.5)),
                _ms(_quantile(totals, 0.99)),
                _ms(_quantile(waits, 0.5)),
                _ms(_quantile(waits, 0.99)),
            )
        )
    if ok:
        checks.append("every commit measured, every record committed")
    command = "python -m bench commit_turn" + "".join(
        f" --{name} {value}" for name, value in (("rounds", args.rounds), ("records", args.records))
    )
    lines = [
        *run_header(command + " --tasks " + " ".join(map(str, args.tasks)), machine_line),
        f"Each task commits {args.rounds - 1} micro-batches of {args.records} records "
        f"(the first, which initialises its producer, not counted) to a topic of "
        f"{PARTITIONS} partitions, all tasks ending together, on the embedded broker with "
        "the commit turn on (its default there). *commit* is the whole commit, *waiting* "
        "the part of it spent waiting for the turn.",
        "",
        *markdown_table(table),
        "",
        "Load average (1 min) at the end of each run: " + ", ".join(loads) + ".",
        "",
        "The turn is off on any cluster but the embedded broker: there, *waiting* is what "
        "each commit no longer pays (`[kafka] commit_turn`, docs/semantics.md).",
        "",
        checks_line(checks),
    ]
    return Section(
        name="commit_turn",
        title="## commit_turn: what the commit turn costs on the embedded broker",
        lines=lines,
        table=table,
        ok=ok,
    )


def _run_tasks(
    conf: dict[str, str], topic: str, tasks: int, rounds: int, records: int
) -> list[Commit]:
    """``tasks`` processes, each one task writing ``rounds`` batches; their commits."""
    # Spawned, not forked: each task's Kafka clients are made in a fresh process, as in a
    # Python worker of Spark's.
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(tasks)
    results = context.Queue()
    pipeline = f"turn-{uuid.uuid4().hex[:8]}"
    processes = [
        context.Process(
            target=_task,
            args=(conf, topic, pipeline, task, tasks, rounds, records, barrier, results),
        )
        for task in range(tasks)
    ]
    for process in processes:
        process.start()
    commits: list[Commit] = []
    for _ in range(tasks):
        commits += results.get()
    for process in processes:
        process.join()
    failed = [p.exitcode for p in processes if p.exitcode != 0]
    if failed:
        raise RuntimeError(f"{len(failed)} task processes failed (exit codes {failed})")
    return commits


def _task(
    conf: dict[str, str],
    topic: str,
    pipeline: str,
    task: int,
    tasks: int,
    rounds: int,
    records: int,
    barrier: Any,
    results: Any,
) -> None:
    """One task: ``rounds`` batches through the operator's task output, each commit timed."""
    from daemon.sink import task_producer
    from daemon.sink.commit_turn import ending_transaction
    from daemon.sink.spec import OutputSpec
    from daemon.sink.task_output import TaskOutput
    from daemon.sink.task_producer import forget_kept_clients

    waited: list[float] = []

    @contextmanager
    def timed_turn(taken: bool) -> Iterator[None]:
        asked = time.perf_counter()
        with ending_transaction(taken):
            waited.append(time.perf_counter() - asked)
            yield

    task_producer.ending_transaction = timed_turn  # type: ignore[assignment]  # the real turn, timed
    spec = OutputSpec(pipeline, conf, "exactly_once", output_topic=topic, commit_turn=True)
    value = b"x" * 100
    commits = []
    try:
        for batch in range(rounds):
            output = TaskOutput(spec, task, batch, "bench")
            for n in range(records):
                output.send(topic, f"{task}-{batch}-{n}".encode(), value, None)
            barrier.wait()
            waited.clear()
            began = time.perf_counter()
            output.commit()
            commits.append(Commit(tasks, task, batch, time.perf_counter() - began, sum(waited)))
    finally:
        forget_kept_clients()
        results.put(commits)


def _count_records(conf: dict[str, str], topic: str) -> int:
    """The committed records of ``topic`` (markers aside: they are offsets, not records)."""
    from confluent_kafka import Consumer, TopicPartition

    from daemon.kafka.clients import read_partition

    consumer = Consumer(
        {
            **conf,
            "group.id": "enrichd-bench-count",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        }
    )
    count = 0
    try:
        for partition in range(PARTITIONS):
            for records in read_partition(consumer, TopicPartition(topic, partition, 0)):
                count += len(records)
    finally:
        consumer.close()
    return count


def _quantile(values: list[float], q: float) -> float:
    if len(values) < 2:
        return values[0] if values else 0.0
    return statistics.quantiles(values, n=100, method="inclusive")[round(q * 100) - 1]


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f} ms"
