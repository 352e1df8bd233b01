"""``python -m bench state``: 1,000,000 keys of join state (the ``lookup`` joiner's table).

Issue #9's memory target, measured by the harness: 1,000,000 keys of join state in under
4 GB. The workload is :mod:`bench.lookup`'s with a table of a million user regions, one key
each, then a million clicks that look them up, so the state holds every key when the clicks
arrive. The contenders are the two-process raw ceiling (each process keeps the whole table in
a dict: what the same state costs without an engine) and enrichd's lookup pipeline; both are
sampled for memory as :mod:`bench.resources` describes. The verdict is on enrichd's whole
process tree (the Spark JVM, its Python workers and this driver process), the figure a host
running the daemon has to provide. No peer runs here: the lookup section compares with Quix
Streams at the issue's throughput sizes.
"""

from __future__ import annotations

import argparse
import os
import time
import uuid
from typing import TYPE_CHECKING

from rich.console import Console

from bench import lookup
from bench.enrichd import batch_table
from bench.report import Section
from bench.resources import MIB, PeakMemory, state_line
from bench.wording import (
    SERVICE_LINE,
    Contender,
    batches_lines,
    ceiling_verdict,
    checks_line,
    count_checks,
    enrichd_contenders,
    enrichd_status,
    load_line,
    machine,
    markdown_table,
    plot_of,
    progress_check,
    rate,
    run_header,
    throughput_table,
)
from bench.workloads import INPUT_PARTITIONS, count_records
from daemon.model.config import DEFAULT_MAX_RECORDS_PER_BATCH

if TYPE_CHECKING:
    from daemon.broker import EmbeddedBroker

BUDGET_MIB = 4096
"""The issue's memory budget for a million keys of join state: 4 GB, read as 4 GiB."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The state workload's sizes (issue #9's by default)."""
    parser.add_argument("--keys", type=int, default=1_000_000, help="table keys (user regions)")
    parser.add_argument("--clicks", type=int, default=1_000_000, help="stream records (clicks)")
    parser.add_argument(
        "--max-batch",
        type=int,
        default=DEFAULT_MAX_RECORDS_PER_BATCH,
        help="enrichd max_records_per_batch (the pipeline default)",
    )
    parser.add_argument("--seed", type=int, default=7, help="seed for click users and regions")


def run(args: argparse.Namespace, broker: EmbeddedBroker) -> Section:
    """Run the state benchmark on ``broker``."""
    console = Console()
    machine_line = machine()
    conf = {"bootstrap.servers": broker.bootstrap_servers}
    suffix = uuid.uuid4().hex[:8]
    table, clicks = f"user-regions-{suffix}", f"clicks-{suffix}"
    records = args.keys + args.clicks
    began = time.monotonic()
    with console.status(f"producing {args.keys:,} regions and {args.clicks:,} clicks"):
        # lookup.produce names the table's size `users`
        sizes = argparse.Namespace(users=args.keys, clicks=args.clicks, seed=args.seed)
        ends, unknown = lookup.produce(conf, table, clicks, sizes)
    console.print(f"produced {records:,} records in {time.monotonic() - began:.1f} s")
    from daemon.kafka.admin import create_topics

    raw_output = f"raw2-{suffix}"
    create_topics(conf, {raw_output: INPUT_PARTITIONS})
    loads = []
    with console.status("raw ceiling, 2 processes"), PeakMemory() as raw_memory:
        two = lookup.run_ceiling(conf, table, clicks, ends, raw_output, 2)
    console.print(f"raw ceiling, 2 processes: {rate(two.rate)} records/s")
    loads.append(("raw 2 processes", os.getloadavg()[0]))
    with console.status("enrichd lookup (Spark)"):
        spark = lookup.run_enrichd(broker.bootstrap_servers, table, clicks, ends, args.max_batch)
    console.print(enrichd_status(spark))
    loads.append(("enrichd", os.getloadavg()[0]))
    with console.status("checking outputs"):
        counted = {
            "raw 2 processes": count_records(conf, raw_output),
            "enrichd": count_records(conf, spark.output_topic),
        }
        dead = count_records(conf, spark.dead_letter_topic)
        defaulted = lookup.count_defaulted(conf, spark.output_topic)
    checks = [
        *count_checks(counted, "enriched clicks", args.clicks),
        f"enrichd dead letters: {dead:,}",
        f"enrichd enriched {defaulted:,} clicks with the default region (expected {unknown:,})",
        *progress_check(spark.batches, records),
    ]
    ok = all(count == args.clicks for count in counted.values()) and dead == 0
    ok = ok and defaulted == unknown
    contenders: list[Contender] = [
        Contender("raw ceiling, 2 processes", two.rate, two.seconds, "each holds the table"),
        *enrichd_contenders("enrichd lookup", spark),
    ]
    table_rows = throughput_table(contenders, two.rate, None)
    peaks, raw_peaks = spark.peaks, raw_memory.result
    lines = [
        *run_header(_command(args), f"{machine_line}. {load_line(loads)}"),
        f"Workload: as the lookup section's, at {args.keys:,} user regions (one key each) then "
        f"{args.clicks:,} clicks ({records:,} input records) on an embedded Tansu broker, "
        f"{INPUT_PARTITIONS} partitions per topic; {unknown:,} clicks are by users the table "
        "does not know. enrichd's state holds every region when the clicks are joined.",
        "",
        *markdown_table(table_rows, left=(0, 5)),
        "",
        SERVICE_LINE,
        _memory_verdict(peaks.total, args.keys),
        f"- enrichd's memory (sampled every second from the Spark session's start to the "
        f"query's stop): {peaks.describe()}. Spark's part (JVM + Python workers, each at its "
        f"own peak) {peaks.spark / MIB:,.0f} MiB at most.",
        f"- The raw ceiling's memory (the two loop processes and this driver, sampled alike): "
        f"peak PSS {raw_peaks.total / MIB:,.0f} MiB in all; each process holds the whole "
        "table as a dict of decoded records.",
        f"- State: {state_line(spark.state_bytes, args.keys)}.",
        "- No peer runs here: the lookup section compares enrichd with Quix Streams on the "
        "same join at the issue's throughput sizes.",
        ceiling_verdict(spark.sustained_rate, two.rate),
        "",
        *batches_lines(
            "Micro-batches that read records", args.max_batch, batch_table(spark.batches)
        ),
        checks_line(checks),
    ]
    title = f"## state: {args.keys:,} keys of join state (lookup)"
    return Section("state", title, lines, table_rows, plot_of(contenders), ok)


def _command(args: argparse.Namespace) -> str:
    return (
        f".venv/bin/python -m bench state --keys {args.keys} --clicks {args.clicks} "
        f"--max-batch {args.max_batch}"
    )


def _memory_verdict(peak_bytes: int, keys: int) -> str:
    """The target line: the whole tree's peak against the budget."""
    peak_mib = peak_bytes / MIB
    met = peak_mib < BUDGET_MIB
    return (
        f"- Target: {keys:,} keys of join state in under {BUDGET_MIB:,} MiB. This run "
        + ("meets" if met else "misses")
        + f" it: enrichd's process tree (JVM, Python workers and driver) peaked at "
        f"{peak_mib:,.0f} MiB PSS, {abs(BUDGET_MIB - peak_mib):,.0f} MiB "
        + ("under" if met else "over")
        + " the budget."
    )
