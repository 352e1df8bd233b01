"""``python -m bench smoke --output PATH``: every workload end to end at tiny sizes.

A check that the benchmark still runs, not a measurement: each workload runs with a few
hundred or thousand records, one after the other in this process on one embedded broker and
one Spark JVM (startup's daemons start their own), and writes its section and chart to
``PATH``, which must not be the repository's ``BENCHMARKS.md``. Nothing is asserted about
speed; a workload fails the smoke when it raises or its checks fail (records missing,
unexpected dead letters, too few batches behind a sustained rate). The test suite runs it
(``tests/bench/test_bench_smoke.py``), so a refactor of enrichd that breaks the benchmark fails CI.

Left out, to keep it to a few minutes: the Quix Streams peer (``--no-quix``: a consumer group's
join alone takes the embedded broker 20-25 s); the enrichd latency runs but comap's with the
default trigger (they share :mod:`bench.latency`, and each would start a query) and the runs at
other rates for the batch-cost fit (comap's fit takes its batches of any size instead), though
every joiner runs its yardstick (a raw loop: no JVM); lookup's second run with a versioned
table (the same code path with another pipeline file); window's run of Spark's own join (no
enrichd code in it); startup's ``daemon demo`` (the suite runs the demo itself), its recording
of Spark's class archive (``tests/service/test_class_archive.py`` tests that; its ``daemon run``
maps the environment's archive instead, ``--mapped-archive``, as the suite's JVMs do: about 6
CPU seconds less than a start without one, BENCHMARKS.md's start-up section) and its restarted
``daemon run`` (a second JVM start on the same code path: about half the smoke's time on a
loaded machine; ``tests/delivery/test_crash_recovery.py`` restarts ``daemon run`` on its
checkpoint); continuous's drains in micro-batch mode (``--no-micro-batch``: each drain starts a
process and a JVM of its own, about 15 s here, and a micro-batch drain is
:func:`bench.enrichd.run_enrichd`, which comap's runs, in the process its continuous drains
start), its yardstick runs (``--no-yardstick``: lookup's workload runs the same yardstick) and
its drain at many keys (``--scale-users``: a second backlog through the same
:func:`bench.drain.drain`, another process and JVM of its own; beside the first drain's code
it runs only its table row and the lines that judge it, :func:`bench.continuous.scale_line`
and :func:`bench.continuous.memory_line`, which ``tests/unit/bench/test_continuous.py``
checks); nway's continuous drains (off unless ``--continuous``: two more processes and JVMs,
and continuous's drain runs the same :mod:`bench.drain`); the repeated enrichd runs
(``--runs 1``) and comap's and lookup's key-count sweep (one ``--users``). Latency runs offer
for a second. The workloads' enrichd runs share this process's Spark session and its Python
workers (the service of ``daemon run`` leaves running a session it did not start), so the
first runs pay for warming them: on a quiet machine passthrough's first batch took 12 s and
comap's 8.5 s (its stateful workers' first), the later workloads' about 3 s (their queries'
starts). continuous's drain runs here too (``--drain-here``), on this process's session: a
drain in a fresh process of its own (:func:`bench.drain.in_process`, which ``python -m bench
continuous`` and ``nway --continuous`` use) cost the smoke a JVM start and cold Python workers,
about 30 s and 35-44 CPU seconds under the lock, for the same drain; only that process's
start and its session's stop (``bench.drain._drain_here``) are not run here, and the peak
memory it reports is this process's, not the service's alone.
"""

from __future__ import annotations

import argparse
import time
import traceback
from pathlib import Path
from types import ModuleType

from rich.console import Console

from bench.report import print_section, write_section
from bench.workloads import REPO

YARDSTICK_ALONE = ["--latency-rate", "200", "--latency-seconds", "1", "--trigger-ms", "--fit-rates"]
"""The latency options of lookup, asof and window: the yardstick's run, and no enrichd run."""
SIZES: dict[str, list[str]] = {
    "passthrough": ["--records", "2000", "--max-batch", "800"],
    "comap": [
        "--users", "50", "--tweets", "1000", "--max-batch", "150", "--runs", "1",
        "--latency-rate", "200", "--latency-seconds", "1", "--trigger-ms", "0", "--fit-rates",
        "--fit-records", "1", "10000",
    ],
    "lookup": [
        "--users", "100", "--clicks", "1000", "--max-batch", "150", "--runs", "1",
        *YARDSTICK_ALONE, "--no-versioned",
    ],
    "nway": [
        "--customers", "50", "--products", "10", "--orders", "500", "--max-batch", "100",
        "--runs", "1",
    ],
    "asof": [
        "--keys", "20", "--left", "1000", "--right", "200", "--max-batch", "150", "--runs", "1",
        *YARDSTICK_ALONE,
    ],
    "window": [
        "--keys", "50", "--per-side", "500", "--max-batch", "150", "--runs", "1",
        *YARDSTICK_ALONE, "--no-spark-join",
    ],
    "state": ["--keys", "1000", "--clicks", "1000", "--max-batch", "800"],
    "startup": [
        "--users", "20", "--tweets", "100", "--runs", "1", "--no-demo", "--mapped-archive",
        "--no-restart",
    ],
    "commit_turn": ["--tasks", "2", "--rounds", "3", "--records", "5"],
    "continuous": [
        "--joiners", "lookup", "--users", "50", "--rate", "200", "--seconds", "1", "--runs", "1",
        "--long-batch-ms", "4000", "--drain-tweets", "300", "--no-micro-batch",
        "--no-yardstick", "--drain-here",
    ],
}  # fmt: skip
"""Each workload's tiny options, with the parts the module's docstring names left out.

comap's, lookup's, nway's, asof's and window's caps are small enough for the six batches or
more their sustained rate must be over (:data:`bench.runs.MIN_STEADY_BATCHES` after the
first), and they run once (nway: one run with one table, one with three). Each joiner runs
its yardstick (:data:`YARDSTICK_ALONE`: with no enrichd latency run but comap's). continuous
measures lookup's latency only, without the yardstick lookup's workload runs: its one drain
runs comap in continuous mode only, at 50 keys (no ``--scale-users`` backlog)."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The smoke's one option: where its report goes."""
    parser.add_argument(
        "--output",
        type=Path,
        required=True,
        help="the report to write (a temporary file; never the repository's BENCHMARKS.md)",
    )


def run(
    args: argparse.Namespace,
    modules: dict[str, ModuleType | str],
    workload_parser: argparse.ArgumentParser,
) -> int:
    """Run every workload at :data:`SIZES` into ``args.output``; 0 when all of them passed.

    ``modules`` are the workloads' modules as ``python -m bench`` found them, and
    ``workload_parser`` parses a workload's command line (``NAME OPTIONS...``).
    """
    output = Path(args.output).resolve()
    if output == (REPO / "BENCHMARKS.md").resolve():
        raise SystemExit("error: the smoke writes a report of its own, not BENCHMARKS.md")
    from daemon.broker import EmbeddedBroker

    console = Console()
    failed: list[str] = []
    with EmbeddedBroker() as broker:
        for name, options in SIZES.items():
            module = modules[name]
            if isinstance(module, str):
                failed.append(f"{name} ({module})")
                continue
            console.rule(f"smoke: {name}")
            argv = [name, *options, "--output", str(output), "--no-quix"]
            began = time.monotonic()
            try:
                section = module.run(workload_parser.parse_args(argv), broker)
            except Exception:  # noqa: BLE001 - every workload gets its turn; all failures shown
                console.print(f"[bold red]{name} failed[/]\n{traceback.format_exc()}")
                failed.append(name)
                continue
            print_section(console, section)
            write_section(output, section)
            console.print(f"smoke: {name} took {time.monotonic() - began:.0f} s")
            if not section.ok:
                failed.append(f"{name} (checks)")
    if failed:
        console.print(f"[bold red]smoke failed:[/] {', '.join(failed)}")
        return 1
    console.print(f"smoke passed: {len(SIZES)} workloads, report {output}")
    return 0
