"""A joiner's latency section: its runs against the yardstick, the batch cost, the machine.

comap, lookup, asof and window each end with latency runs (:mod:`bench.latency` measures
one). :func:`run_latencies` runs, at the offered rate (``--latency-rate``), the yardstick
first (the raw exactly-once loop doing the same join, :mod:`bench.yardstick`), then the
enrichd pipeline once per trigger of ``--trigger-ms``; then, at each rate of
``--fit-rates``, the yardstick and the pipeline with its default trigger, whose batches of
other sizes feed the batch-cost fit (:mod:`bench.batch_cost`). :func:`latency_section`
writes them up: enrichd's percentiles beside the yardstick's at the same rate and as ratios
to them, issue 39's and issue 63's targets, ``addBatch = F + c * records`` fitted over the
batches of ``--fit-records`` sizes, and the cores the broker and the load generator took
while each run offered (:mod:`bench.cpu`), which tell how much of the machine was left.

Every run, the yardstick too, makes fresh topics and loads them alike, so that no run reads
another's records; they run one after the other, never side by side.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from typing import Any

from rich.console import Console

from bench import batch_cost
from bench.batch_cost import FIT_RECORDS, BatchCost
from bench.latency import (
    ENRICHD,
    YARDSTICK,
    LatencyResult,
    LatencyWorkload,
    run_latency,
    shown,
    trigger_name,
    versus,
    yardstick_of,
)

LATENCY_TARGET_MS = 1_000
"""The target (issue 39; 2 s before it): p99 end-to-end latency under 1 s at 5,000 records/s
offered."""
TARGET_RATE = 5_000
YARDSTICK_TARGET = 6.0
"""Issue 63's target: enrichd's p99 at most this many times the yardstick's, at 5,000/s."""
FIT_RATES = (2_000, 10_000)
"""The rates of the runs made for the batch-cost fit: at the default trigger their batches
are about a third and twice the size of the batches at 5,000/s, so that the fit spans
1,000-10,000 records."""


def add_latency_arguments(
    parser: argparse.ArgumentParser, offered: str, seconds: float = 30.0
) -> None:
    """The options of a benchmark's latency runs: ``offered`` names the records offered,
    ``seconds`` is how long a run offers them by default."""
    parser.add_argument(
        "--latency-rate",
        type=int,
        default=TARGET_RATE,
        help=f"{offered}/s offered in the latency runs",
    )
    parser.add_argument(
        "--latency-seconds", type=float, default=seconds, help="how long each latency run offers"
    )
    parser.add_argument(
        "--trigger-ms",
        type=int,
        nargs="*",
        default=[0, 1_000],
        help="processing-time triggers, one enrichd latency run each at --latency-rate (0: the "
        "pipeline's default: the next batch as soon as the last one ends; none: the yardstick "
        "alone)",
    )
    parser.add_argument(
        "--fit-rates",
        type=int,
        nargs="*",
        default=list(FIT_RATES),
        help="more offered rates, each a yardstick run and an enrichd run with the default "
        "trigger, whose batches widen the batch-cost fit (none: the latency rate alone)",
    )
    parser.add_argument(
        "--fit-records",
        type=int,
        nargs=2,
        default=list(FIT_RECORDS),
        metavar=("LOW", "HIGH"),
        help="the batch sizes the fit of addBatch against records is over",
    )
    parser.add_argument("--no-latency", action="store_true", help="skip the latency runs")


def latency_command(args: argparse.Namespace) -> str:
    """The latency options of a benchmark's command, as the report shows it."""
    if args.no_latency:
        return " --no-latency"
    options = [
        ("--latency-rate", [args.latency_rate]),
        ("--latency-seconds", [f"{args.latency_seconds:g}"]),
        ("--trigger-ms", args.trigger_ms),
        ("--fit-rates", args.fit_rates),
        ("--fit-records", args.fit_records),
    ]
    return "".join(" " + " ".join([name, *map(str, values)]) for name, values in options)


def plan(args: argparse.Namespace) -> list[tuple[int, tuple[int, ...], bool]]:
    """The latency runs to make: (offered rate, enrichd's triggers, made for the fit only),
    the latency rate first; each rate also gets a yardstick run."""
    runs = [(args.latency_rate, tuple(args.trigger_ms), False)]
    more = [rate for rate in dict.fromkeys(args.fit_rates) if rate != args.latency_rate]
    return runs + [(rate, (0,), True) for rate in more]


def _broker_pid(broker: Any) -> int | None:
    """The broker's process (an embedded broker's), whose CPU a latency run measures."""
    process = getattr(broker, "process", None)
    return None if process is None else int(process.pid)


def run_latencies(
    args: argparse.Namespace,
    broker: Any,
    workload: LatencyWorkload,
    console: Console,
    loads: list[tuple[str, float]],
) -> list[LatencyResult]:
    """The runs of :func:`plan` on ``broker`` (an ``EmbeddedBroker``), one after the other;
    none with ``--no-latency``. Each run's load average at its end goes to ``loads``."""
    results: list[LatencyResult] = []
    if args.no_latency:
        return results
    servers, pid, seconds = broker.bootstrap_servers, _broker_pid(broker), args.latency_seconds
    for rate, triggers, for_fit in plan(args):
        with console.status(f"yardstick latency: {rate:,} records/s for {seconds:g} s"):
            runs = [
                run_latency(
                    servers, workload, rate, seconds, 0, args.seed, 600.0, pid, for_fit, YARDSTICK
                )
            ]
        _said(console, runs[-1], workload, loads)
        for trigger_ms in triggers:
            name = trigger_name(trigger_ms)
            with console.status(
                f"enrichd latency: {rate:,} records/s for {seconds:g} s, {name} trigger"
            ):
                latency = run_latency(
                    servers, workload, rate, seconds, trigger_ms, args.seed, 600.0, pid, for_fit
                )
            runs.append(latency)
            _said(console, latency, workload, loads, yardstick_of(latency, runs))
        results += runs
    console.print(fit_line(results, tuple(args.fit_records)), highlight=False)
    return results


def _said(
    console: Console,
    latency: LatencyResult,
    workload: LatencyWorkload,
    loads: list[tuple[str, float]],
    reference: LatencyResult | None = None,
) -> None:
    """The console line after one run (with its ratio to the yardstick's p99, given its
    ``reference``); its load average to ``loads``."""
    where = f"{latency.name} at {latency.offered_rate:,}/s"
    ratio = versus(latency.p99_ms, reference, "p99")
    if latency.reason:
        console.print(f"latency, {where}: not measured: {latency.reason}", highlight=False)
    else:
        console.print(
            f"latency, {where}: p50 {latency.p50_ms:,.0f} ms, p99 {latency.p99_ms:,.0f} ms"
            + ("" if ratio is None else f" ({ratio:.2f}x the yardstick's)")
            + "; "
            f"{latency.same_timestamp:,} of {latency.outputs:,} {workload.outputs} carry their "
            f"source record's timestamp; {_cores_said(latency)}",
            highlight=False,
        )
    loads.append((f"latency run ({where})", os.getloadavg()[0]))


def _cores_said(latency: LatencyResult) -> str:
    cpu = latency.cpu
    if cpu is None:
        return "CPU not measured"
    broker = "?" if cpu.broker is None else f"{cpu.used(cpu.broker):.2f}"
    return (
        f"cores busy while offering: broker {broker}, load generator "
        f"{cpu.used(cpu.generator):.2f}, the rest {cpu.used(cpu.rest):.2f} (of {cpu.cores})"
    )


# -- checks ----------------------------------------------------------------------------------


def latency_checks(latencies: Sequence[LatencyResult], workload: LatencyWorkload) -> list[str]:
    """The report's checks of the latency runs: every offered record's output read back."""
    return [
        f"latency run ({r.name}, {r.offered_rate:,}/s): {r.outputs:,} {workload.outputs} of "
        f"{workload.expected(r.offered):,} read back ({r.offered:,} {workload.offered} offered)"
        for r in latencies
        if not r.reason
    ]


def latencies_ok(latencies: Sequence[LatencyResult], workload: LatencyWorkload) -> bool:
    """Whether every measured latency run read back every output its offered records make."""
    return all(r.outputs == workload.expected(r.offered) for r in latencies if not r.reason)


# -- the batch cost --------------------------------------------------------------------------


def fit_of(
    latencies: Sequence[LatencyResult], records: tuple[int, int] = FIT_RECORDS
) -> tuple[BatchCost | None, int]:
    """The fit of addBatch over the enrichd runs' batches of ``records`` sizes, each run's
    first offered batch left out (it may carry the start of offering); and how many batches
    of that size there were."""
    batches = [
        batch
        for r in latencies
        if r.contender == ENRICHD and not r.reason
        for batch in r.batches[1:]
    ]
    return batch_cost.fit_batches(batches, records), len(batch_cost.in_range(batches, records))


def fit_line(latencies: Sequence[LatencyResult], records: tuple[int, int] = FIT_RECORDS) -> str:
    """The batch cost in a sentence: F, c, and which dominates a batch at the main rate."""
    low, high = records
    cost, found = fit_of(latencies, records)
    if cost is None:
        return (
            f"- Batch cost: no fit of addBatch against batch size, since the enrichd runs' "
            f"batches after their first have fewer than two sizes of {low:,}-{high:,} records "
            f"({found} batch(es) of those sizes); other rates (`--fit-rates`) give other sizes."
        )
    typical = _typical(latencies)
    line = (
        f"- Batch cost: addBatch = F + c x records, fitted (least squares) over the "
        f"{cost.batches} batches of {cost.smallest:,}-{cost.largest:,} records of the enrichd "
        f"runs above (each run's first offered batch left out): F = {cost.fixed_ms:,.0f} ms "
        f"per batch, c = {cost.per_record_ms * 1000:,.1f} us per record (R² "
        f"{cost.r_squared:.2f})."
    )
    if typical is None:
        return line
    rows = sum(b.rows for b in typical.batches) / len(typical.batches)
    share = cost.fixed_share(rows)
    part = "the fixed part F" if share >= 0.5 else "the per-record part c"
    return line + (
        f" At the {rows:,.0f} records of an average batch of the {typical.name} run at "
        f"{typical.offered_rate:,}/s, F is {share:.0%} of the fitted {cost.at(rows):,.0f} ms: "
        f"{part} dominates on this machine today."
    )


def _typical(latencies: Sequence[LatencyResult]) -> LatencyResult | None:
    """The enrichd run the summary shows (:func:`shown`), if it has batches."""
    run = shown(latencies)
    return run if run is not None and run.batches else None


# -- the section -----------------------------------------------------------------------------


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def _cores(cpu_seconds: float | None, latency: LatencyResult) -> str:
    cpu = latency.cpu
    return "-" if cpu is None or cpu_seconds is None else f"{cpu.used(cpu_seconds):.2f}"


def _latency_row(latency: LatencyResult, latencies: Sequence[LatencyResult]) -> tuple[str, ...]:
    reference = None if latency.contender == YARDSTICK else yardstick_of(latency, latencies)
    return (
        latency.name,
        f"{latency.offered_rate:,}",
        f"{latency.outputs:,}",
        f"{latency.p50_ms:,.0f}",
        f"{latency.p99_ms:,.0f}",
        f"{latency.max_ms:,.0f}",
        _ratio(versus(latency.p50_ms, reference, "p50")),
        _ratio(versus(latency.p99_ms, reference, "p99")),
        f"{latency.drain_s:.1f}",
    )


def _cost_row(latency: LatencyResult) -> tuple[str, ...]:
    batches = latency.batches
    if latency.contender == YARDSTICK:
        count = latency.transactions
        per = f"{latency.offered / count:,.0f}" if count else "-"
        times: tuple[str, ...] = ("-", "-")
    else:
        count = len(batches)
        per = f"{sum(b.rows for b in batches) / count:,.0f}" if count else "-"
        times = tuple(
            f"{sum(b.durations_ms.get(phase, 0) for b in batches) / count:,.0f}" if count else "-"
            for phase in ("triggerExecution", "addBatch")
        )
    cpu = latency.cpu
    return (
        latency.name,
        f"{latency.offered_rate:,}",
        f"{count:,}",
        per,
        *times,
        _cores(None if cpu is None else cpu.broker, latency),
        _cores(None if cpu is None else cpu.generator, latency),
        _cores(None if cpu is None else cpu.rest, latency),
    )


def _table(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> list[str]:
    return [
        "| " + " | ".join(header) + " |",
        "|---|" + "---:|" * (len(header) - 1),
        *("| " + " | ".join(row) + " |" for row in rows),
    ]


def _verdict(latency: LatencyResult, workload: LatencyWorkload) -> str:
    """Whether one run meets issue 39's latency target, in a sentence."""
    trigger = (
        f"With the default trigger ({workload.default_trigger})"
        if latency.trigger_ms == 0
        else f"With a {latency.trigger_ms:,} ms processing-time trigger"
    )
    p99 = latency.p99_ms
    if p99 < LATENCY_TARGET_MS:
        return f"{trigger} this run meets it: p99 {p99 / 1000:.2f} s."
    return (
        f"{trigger} this run misses it: p99 {p99 / 1000:.2f} s, "
        f"{p99 / LATENCY_TARGET_MS:.2f}x the target."
    )


def _yardstick_verdict(latency: LatencyResult, latencies: Sequence[LatencyResult]) -> str:
    """Whether one run meets issue 63's target against the yardstick, in a sentence."""
    trigger = f"{trigger_name(latency.trigger_ms)} trigger"
    reference = yardstick_of(latency, latencies)
    ratio = versus(latency.p99_ms, reference, "p99")
    if reference is None or ratio is None:
        return f"With the {trigger} it is not judged: the yardstick gave no p99 at this rate."
    verdict = "meets" if ratio <= YARDSTICK_TARGET else "misses"
    return (
        f"With the {trigger} this run {verdict} it: p99 {ratio:.2f}x the yardstick's "
        f"({latency.p99_ms:,.0f} against {reference.p99_ms:,.0f} ms)."
    )


def _targets(latencies: Sequence[LatencyResult], workload: LatencyWorkload) -> list[str]:
    judged = [
        r
        for r in latencies
        if r.contender == ENRICHD and not r.reason and r.offered_rate == TARGET_RATE
    ]
    if not judged:
        return [
            f"- Targets: p99 < {LATENCY_TARGET_MS / 1000:.0f} s, and at most "
            f"{YARDSTICK_TARGET:g}x the yardstick's p99, at {TARGET_RATE:,} records/s "
            "offered: not judged, since no enrichd run offered that rate."
        ]
    return [
        f"- Target: p99 < {LATENCY_TARGET_MS / 1000:.0f} s at {TARGET_RATE:,} records/s "
        "offered. " + " ".join(_verdict(r, workload) for r in judged),
        f"- Target: p99 at most {YARDSTICK_TARGET:g}x the yardstick's at {TARGET_RATE:,} "
        "records/s offered. " + " ".join(_yardstick_verdict(r, latencies) for r in judged),
    ]


def _intro(
    measured: Sequence[LatencyResult], workload: LatencyWorkload, max_records_per_batch: int
) -> str:
    rates = list(dict.fromkeys(r.offered_rate for r in measured))
    main = measured[0]
    fit = [rate for rate in rates if rate != main.offered_rate]
    return (
        f"{workload.offered.capitalize()} offered for {main.seconds:.0f} s a run at "
        f"{main.offered_rate:,} records/s (achieved "
        + ", ".join(f"{r.achieved_rate:,.0f}/s" for r in measured if not r.for_fit)
        + ")"
        + (
            f", and at {', '.join(f'{rate:,}' for rate in fit)} records/s for the batch-cost fit,"
            if fit
            else ""
        )
        + f" to the {workload.joiner} pipeline, in one run per row below, with its "
        f"{max_records_per_batch:,}-record batch cap and {workload.loaded}. "
        "The default trigger is the pipeline's when it sets none; a processing-time trigger "
        "starts a batch at most that often, which spends less per record on each batch's "
        "fixed cost and makes a record wait up to an interval longer. "
        "Latency is the wall-clock time at which a `read_committed` consumer, reading the "
        "output topic from offset 0 while the contender runs, first receives an output, minus "
        "its source record's CreateTime (the wall-clock time the load generator handed the "
        "record to its producer), the record found through the output's `enrichd.source.*` "
        "headers. It includes the transaction's commit, since such a reader gets no output "
        "before it: what a downstream consumer experiences. The load generator is a process "
        "of its own, the reader a thread of the benchmark's."
    )


YARDSTICK_LINE = (
    "- *yardstick*: in the same run, before enrichd at each rate, on fresh topics loaded "
    "alike, with the same load generator and reader: a raw confluent-kafka + fastavro loop in "
    "a process of its own doing the same join in plain dicts (the joiner's rules, its state "
    "in memory), exactly once as Kafka Streams runs by default under `exactly_once_v2`: a "
    "`read_committed` consumer, each poll's records applied oldest first without waiting "
    "for an idle partition, outputs produced in a transaction that also carries the "
    "consumer's positions (`send_offsets_to_transaction`), committed every 100 ms while "
    "records come in (`commit.interval.ms`). *vs yardstick*: enrichd's percentile over the "
    "yardstick's at the same rate; *batches* of the yardstick are its transactions."
)
CORES_LINE = (
    "- *cores*: CPU seconds over the seconds of offering (psutil), as cores kept busy: the "
    "broker's process, the load generator's, and the rest of the machine (the contender: "
    "enrichd's JVM, Python workers and driver, or the yardstick's process; the reader; "
    "anything else running). The more the broker and the load generator take, the less is "
    "left for the contender, and the slower a batch's per-record part."
)


def latency_section(
    latencies: Sequence[LatencyResult],
    workload: LatencyWorkload,
    max_records_per_batch: int,
    sustained_rate: float,
    fit_records: tuple[int, int] = FIT_RECORDS,
) -> list[str]:
    """The report's latency section: a row per run with its ratios to the yardstick, the
    targets, the batch cost over ``fit_records`` sizes, and what each run cost the machine."""
    if not latencies:
        return []
    offered, outputs = workload.offered, workload.outputs
    lines = [f"### End-to-end latency (enrichd {workload.joiner})", ""]
    for failed in (r for r in latencies if r.reason):
        lines.append(f"Not measured: {failed.name} at {failed.offered_rate:,}/s: {failed.reason}.")
    measured = [r for r in latencies if not r.reason]
    if not measured:
        return [*lines, ""]
    lines += [
        _intro(measured, workload, max_records_per_batch),
        "",
        *_table(
            (
                "latency run",
                "offered records/s",
                outputs,
                "p50 ms",
                "p99 ms",
                "max ms",
                "p50 vs yardstick",
                "p99 vs yardstick",
                "drain s",
            ),
            [_latency_row(r, latencies) for r in measured],
        ),
        "",
        *_table(
            (
                "latency run",
                "offered records/s",
                "batches",
                "records per batch",
                "ms per batch",
                "addBatch ms",
                "broker cores",
                "load generator cores",
                "rest, cores",
            ),
            [_cost_row(r) for r in measured],
        ),
        "",
        *_targets(latencies, workload),
        fit_line(latencies, fit_records),
        YARDSTICK_LINE,
        CORES_LINE,
        "- *drain*: from the last record offered to the end of the batch (the yardstick: the "
        "commit) that covered the last record. Timestamps read back: "
        + ", ".join(sorted({r.timestamp_types or "none" for r in measured}))
        + ".",
        f"- {outputs.capitalize()} whose Kafka timestamp equals their source record's: "
        + ", ".join(
            f"{r.same_timestamp:,} of {r.outputs:,} ({r.name}, {r.offered_rate:,}/s)"
            for r in measured
        )
        + f" (enrichd and the yardstick stamp an output with its input's timestamp, so the "
        f"{outputs}' timestamps cannot measure latency).",
    ]
    if workload.detail:
        lines.append(f"- {workload.detail}")
    if any(r.contender == ENRICHD and r.offered_rate > sustained_rate for r in measured):
        lines.append(
            f"- An offered rate is above the sustained throughput measured above "
            f"({sustained_rate:,.0f} records/s), so a backlog builds for as long as "
            f"{offered} are offered and latency grows with it: those percentiles then measure "
            "the queue, not the pipeline's per-batch delay."
        )
    return [*lines, ""]
