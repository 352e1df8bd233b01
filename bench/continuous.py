"""``python -m bench continuous``: the continuous mode's latency against the yardstick's.

Each of ``--joiners``' latency workloads (comap's, :func:`bench.comap.latency_workload`:
every user read first, then tweets offered at a fixed rate; lookup's,
:func:`bench.lookup.latency_workload`: every user's region read first, then clicks), run in
continuous mode (``mode = "continuous"`` through ``daemon run``'s service,
docs/operations.md "Continuous mode") and as the yardstick, the raw exactly-once loop that
commits every 100 ms, alternately, ``--runs`` times each, in one run on one broker.
Reported: each run's p50 and p99, and per joiner the medians' ratio to the yardstick's.
Then, with ``--drain-tweets``, sustained throughput: each mode draining the same backlog of
``--users`` users and that many tweets through comap (:mod:`bench.drain`), ``--runs`` times,
with each run's peak memory and the long batches that its held state ended early
(``--held-state-budget-mib``: the pipeline's ``held_state_budget``). ``--no-latency`` leaves
the latency runs out: ``--users 1000000 --no-latency`` measures the drain, and the memory,
at a million keys. ``--scale-users`` judges the target at many keys in the same run: a second
backlog of that many users then the same number of tweets, drained in continuous mode only
after each pair of drains above, its median rate against the continuous drain's at
``--users`` keys, and its peak memory against 4 GB.
"""

from __future__ import annotations

import argparse
import os
import statistics
import uuid
from typing import TYPE_CHECKING, Any

from bench import comap, lookup
from bench.drain import Drained, drain
from bench.latency import CONTINUOUS, YARDSTICK, LatencyResult, LatencyWorkload, run_latency
from bench.report import Section
from bench.resources import MIB
from bench.runs import MEMORY_TARGET
from bench.wording import checks_line, machine, markdown_table, run_header
from bench.workloads import Topics, Workload, create_inputs, produce

if TYPE_CHECKING:
    from collections.abc import Callable

    from daemon.broker import EmbeddedBroker


WORKLOADS: dict[str, Callable[[str, int, int], LatencyWorkload]] = {
    "comap": comap.latency_workload,
    "lookup": lookup.latency_workload,
}
"""The joiners whose latency runs in continuous mode: issue 64's targets name both."""

SCALE_TARGET = 0.9
"""Issue 64: continuous mode's drain rate at ``--scale-users`` keys, at least this share of
its rate at ``--users`` keys (state written once per long batch, not per micro-batch)."""

SERVICE_TREE = (
    "each drain's own process, which runs the service, its JVM and its Python workers; not "
    "the benchmark's process, which made the backlogs, nor the test broker"
)
"""Whose memory a drain's peak is (:func:`bench.drain.drain`)."""
HERE_TREE = (
    "the benchmark's process, in which --drain-here ran each drain: the service, its JVM and "
    "its Python workers, and what the runs before it left there; not the test broker"
)
"""Whose memory a drain's peak is with ``--drain-here``: not the service's alone."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The workload's sizes."""
    parser.add_argument(
        "--joiners",
        nargs="+",
        choices=("comap", "lookup"),
        default=["comap", "lookup"],
        help="the joiners whose latency is measured",
    )
    parser.add_argument("--users", type=int, default=20_000, help="users read first")
    parser.add_argument("--rate", type=int, default=5_000, help="tweets/s offered")
    parser.add_argument("--seconds", type=float, default=30.0, help="how long each run offers")
    parser.add_argument("--runs", type=int, default=3, help="runs of each contender")
    parser.add_argument(
        "--long-batch-ms", type=int, default=120_000, help="a long batch's length (ms)"
    )
    parser.add_argument(
        "--commit-interval-ms", type=int, default=100, help="how often a sub-batch commits"
    )
    parser.add_argument("--leases", type=int, default=1, help="the continuous pipeline's leases")
    parser.add_argument(
        "--drain-tweets",
        type=int,
        default=1_000_000,
        help="tweets of the backlog each mode drains, after --users users (0: none)",
    )
    parser.add_argument(
        "--held-state-budget-mib",
        type=int,
        default=0,
        help="the continuous pipeline's held_state_budget in MiB (0: its default)",
    )
    parser.add_argument(
        "--scale-users",
        type=int,
        default=0,
        help="users before the same tweets of a second backlog, drained in continuous mode "
        "only, against the first (0: none)",
    )
    parser.add_argument(
        "--no-micro-batch",
        dest="micro_batch",
        action="store_false",
        help="leave micro-batch mode's drains out (continuous mode's alone)",
    )
    parser.add_argument(
        "--no-yardstick",
        dest="yardstick",
        action="store_false",
        help="leave the yardstick's latency runs out (the joiner's own workload runs them)",
    )
    parser.add_argument(
        "--no-latency",
        dest="latency",
        action="store_false",
        help="leave the latency runs out (the drain alone)",
    )
    parser.add_argument(
        "--drain-here",
        action="store_true",
        help="drain in this process, on its Spark session, not each in a fresh process (the "
        "smoke: no JVM start per drain; the peak memory is then this process's)",
    )


def _command(args: argparse.Namespace) -> str:
    budget = args.held_state_budget_mib
    return (
        f"python -m bench continuous --joiners {' '.join(args.joiners)} --users {args.users} "
        f"--rate {args.rate} --seconds {args.seconds:g} --runs {args.runs} "
        f"--long-batch-ms {args.long_batch_ms} --commit-interval-ms {args.commit_interval_ms} "
        f"--leases {args.leases} --drain-tweets {args.drain_tweets}"
        + (f" --held-state-budget-mib {budget}" if budget else "")
        + (f" --scale-users {args.scale_users}" if args.scale_users else "")
        + ("" if args.micro_batch else " --no-micro-batch")
        + ("" if args.yardstick else " --no-yardstick")
        + ("" if args.latency else " --no-latency")
        + (" --drain-here" if args.drain_here else "")
    )


def run(args: argparse.Namespace, broker: EmbeddedBroker) -> Section:
    """Alternate runs of the continuous query and the yardstick, then the drain; the section."""
    from daemon.continuous.lease_source import LongBatches

    machine_line = machine()
    budget = args.held_state_budget_mib << 20
    batches = LongBatches(
        args.leases, args.long_batch_ms, args.commit_interval_ms, held_state_budget=budget
    )
    lines = [*run_header(_command(args), machine_line), ""]
    table: list[tuple[str, ...]] = []
    checks: list[str] = []
    if args.latency:
        table = _latency(args, broker, batches, lines, checks)
    if args.drain_tweets:
        drained, drain_table = _drain(args, broker, batches)
        lines.extend(drained)
        table = table or drain_table  # the console shows the drain's without latency runs
    fine = "every offered record had its output" if args.latency else "no latency runs"
    lines.append(checks_line(checks or [fine]))
    return Section(
        name="continuous",
        title="## continuous: latency as long batches, against the yardstick",
        lines=lines,
        table=table,
        ok=not checks,
    )


def _latency(
    args: argparse.Namespace,
    broker: EmbeddedBroker,
    batches: Any,
    lines: list[str],
    checks: list[str],
) -> list[tuple[str, ...]]:
    """The latency runs, alternately; their table, their lines added to ``lines`` and what
    went wrong to ``checks``."""
    table: list[tuple[str, ...]] = [("run", "offered", "outputs", "p50", "p99", "max")]
    loads: list[str] = []
    medians: list[str] = []
    contenders = (YARDSTICK, CONTINUOUS) if args.yardstick else (CONTINUOUS,)
    for joiner in args.joiners:
        workload = WORKLOADS[joiner](broker.bootstrap_servers, args.users, 100_000)
        results: dict[str, list[LatencyResult]] = {YARDSTICK: [], CONTINUOUS: []}
        for _ in range(args.runs):
            for contender in contenders:
                result = run_latency(
                    broker.bootstrap_servers,
                    workload,
                    args.rate,
                    args.seconds,
                    contender=contender,
                    batches=batches,
                )
                results[contender].append(result)
                loads.append(f"{os.getloadavg()[0]:.2f}")
        for runs in results.values():
            for number, result in enumerate(runs, 1):
                name = f"{joiner}: {result.name} {number}"
                if result.reason:
                    checks.append(f"{name}: {result.reason}")
                    continue
                table.append((
                    name, f"{result.offered:,}", f"{result.outputs:,}", f"{result.p50_ms:,.0f} ms",
                    f"{result.p99_ms:,.0f} ms", f"{result.max_ms:,.0f} ms",
                ))  # fmt: skip
                if result.outputs != result.offered:
                    checks.append(f"{name}: {result.outputs} of {result.offered}")
        medians.extend(_median_line(joiner, results))
    lines.extend([*markdown_table(table), "", *medians])
    lines.append(
        'The continuous contender is the pipeline with `mode = "continuous"`, run by `daemon '
        "run`'s service (in the benchmark's process, as the micro-batch workloads run), which "
        "hears its task's reports; it has read the offered records once its lag group says so. "
        "comap's pipeline reads every user first, lookup's every user's region (and its "
        "clicks by unknown users find none)."
    )
    lines.append("")
    lines.append(
        f"Each continuous run starts its query afresh, so its long batches of "
        f"{args.long_batch_ms:,} ms start about when the run does: a run shorter than one "
        "long batch meets no end of one, where records wait for the next (about a third of a "
        'second on 2 cores: the spike\'s section, "A loop inside a long micro-batch").'
    )
    lines.append("")
    lines.append(f"Load average (1 min) after each run: {', '.join(loads)}.")
    lines.append("")
    return table


def _median_line(joiner: str, results: dict[str, list[LatencyResult]]) -> list[str]:
    """The target's line for ``joiner``: its medians' p99 and their ratio (none: a run failed)."""
    if not results[YARDSTICK]:
        return [
            f"- Target (issue 64, {joiner}): not judged, the yardstick's runs left out "
            "(--no-yardstick).",
            "",
        ]
    medians = {
        contender: statistics.median(r.p99_ms for r in runs if not r.reason)
        for contender, runs in results.items()
        if any(not r.reason for r in runs)
    }
    if len(medians) < 2:
        return []
    ratio = medians[CONTINUOUS] / medians[YARDSTICK]
    return [
        f"- Target (issue 64, {joiner}): p99 at most 2 times the yardstick's and at most "
        f"300 ms. Median p99: continuous {medians[CONTINUOUS]:,.0f} ms, yardstick "
        f"{medians[YARDSTICK]:,.0f} ms: {ratio:.2f} times the yardstick's.",
        "",
    ]


def _drain(
    args: argparse.Namespace, broker: EmbeddedBroker, batches: Any
) -> tuple[list[str], list[tuple[str, ...]]]:
    """Each mode draining the same backlog, alternately, ``args.runs`` times (and continuous
    mode the backlog at ``args.scale_users`` keys after each pair); its lines and its table."""
    servers = broker.bootstrap_servers
    workload = Workload(args.users, args.drain_tweets)
    topics, ends = _backlog(servers, workload)
    scaled = Workload(args.scale_users, args.drain_tweets)
    at_scale = f"continuous, {scaled.users:,} keys"
    scaled_backlog = _backlog(servers, scaled) if args.scale_users else None
    runs: dict[str, list[Drained]] = {"micro_batch": [], "continuous": []}
    here = args.drain_here
    tree = HERE_TREE if here else SERVICE_TREE
    for _ in range(args.runs):
        if args.micro_batch:
            runs["micro_batch"].append(
                drain("micro_batch", servers, topics, ends, workload.records, here=here)
            )
        runs["continuous"].append(
            drain("continuous", servers, topics, ends, workload.records, batches, here=here)
        )
        if scaled_backlog:
            runs.setdefault(at_scale, []).append(
                drain("continuous", servers, *scaled_backlog, scaled.records, batches, here=here)
            )
    table: list[tuple[str, ...]] = [
        ("run", "records", "seconds", "records/s", "peak PSS MiB (JVM, workers, driver)", "early")
    ]
    for mode, done in runs.items():
        for number, run in enumerate(done, 1):
            rate = f"{run.rate:,.0f}"
            peaks = run.peaks
            memory = (
                f"{peaks.total / MIB:,.0f} ({peaks.jvm / MIB:,.0f}, "
                f"{peaks.python_workers / MIB:,.0f}, {peaks.other / MIB:,.0f})"
            )
            early = "" if mode == "micro_batch" else f"{run.ended_early}"
            table.append(
                (f"{mode} {number}", f"{run.records:,}", f"{run.seconds:.1f}", rate, memory, early)
            )
    runs = {mode: done for mode, done in runs.items() if done}
    rates = {mode: statistics.median(run.rate for run in done) for mode, done in runs.items()}
    peak = {mode: max(run.peaks.total for run in done) for mode, done in runs.items()}
    backlogs = f"{workload.users:,} users then {workload.tweets:,} tweets" + (
        f" (and {scaled.users:,} users then the same tweets)" if args.scale_users else ""
    )
    lines = [
        f"Sustained throughput: {backlogs}, produced before each run, drained from the "
        "service's start (bench/drain.py says how each is timed; records/s counts the users "
        "read as well as the tweets):",
        "",
        *markdown_table(table),
        "",
        modes_line(workload.users, rates),
    ]
    if scaled_backlog:
        lines.append(scale_line(workload.users, scaled.users, rates["continuous"], rates[at_scale]))
        lines.append(memory_line(scaled.users, peak[at_scale], tree))
    else:
        lines.append(
            f"- Target (issue 64): the service under 4 GB at 1,000,000 keys. Peak PSS of the "
            f"service at {workload.users:,} keys ({tree}), the highest of the runs: "
            + ", ".join(f"{mode.replace('_', '-')} {peak[mode] / MIB:,.0f} MiB" for mode in peak)
            + "."
        )
    lines.append(
        "- early: long batches that ended early, their held state past its budget "
        f"({_budget(args)})."
    )
    lines.append("")
    return lines, table


def modes_line(users: int, rates: dict[str, float]) -> str:
    """The target at ``users`` keys: continuous mode's median rate against micro-batch's."""
    target = f"- Target (issue 64): continuous not slower than micro-batch at {users:,} keys."
    if "micro_batch" not in rates:
        return f"{target} Not judged: micro-batch's drains left out (--no-micro-batch)."
    return (
        f"{target} Median: continuous {rates['continuous']:,.0f} records/s, micro-batch "
        f"{rates['micro_batch']:,.0f} records/s: "
        f"{rates['continuous'] / rates['micro_batch']:.2f} of it."
    )


def _backlog(servers: str, workload: Workload) -> tuple[Topics, dict[str, int]]:
    """Fresh input topics holding ``workload``; them and their partitions' ends."""
    conf = {"bootstrap.servers": servers}
    suffix = uuid.uuid4().hex[:8]
    topics = Topics(users=f"users-{suffix}", tweets=f"tweets-{suffix}")
    create_inputs(conf, topics)
    return topics, produce(conf, topics, workload)


def scale_line(users: int, scale_users: int, rate: float, scale_rate: float) -> str:
    """The target at many keys: continuous mode's median rate at ``scale_users`` keys as a
    share of its median ``rate`` at ``users`` keys, in one run."""
    share = scale_rate / rate
    verdict = "meets" if share >= SCALE_TARGET else "misses"
    return (
        f"- Target (issue 64): at {scale_users:,} keys at least {SCALE_TARGET:g} of the rate "
        f"at {users:,}. Median: at {scale_users:,} keys {scale_rate:,.0f} records/s, "
        f"{share:.2f} of the {users:,}-key rate ({rate:,.0f}; target {SCALE_TARGET:g}): "
        f"this run {verdict} it."
    )


def memory_line(scale_users: int, peak: int, tree: str = SERVICE_TREE) -> str:
    """The memory target at many keys: the highest peak of continuous mode's drains there
    (``tree``: whose memory it is)."""
    verdict = "meets" if peak < MEMORY_TARGET else "misses"
    return (
        f"- Target (issue 64): the service under {MEMORY_TARGET / 1e9:.0f} GB at "
        f"{scale_users:,} keys. Peak PSS of the service there ({tree}), the highest "
        f"of the continuous runs: {peak / MIB:,.0f} MiB "
        f"({peak / 1e9:.2f} GB): this run {verdict} it."
    )


def _budget(args: argparse.Namespace) -> str:
    """The continuous pipeline's held state budget, in words."""
    from daemon.model.config import DEFAULT_HELD_STATE_BUDGET

    mib = args.held_state_budget_mib
    return f"{mib:,} MiB" if mib else f"the default, {DEFAULT_HELD_STATE_BUDGET >> 20:,} MiB"
