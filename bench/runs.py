"""enrichd run several times over one workload, and comap's and lookup's key-count sweep.

One run's sustained rate moves by tens of percent on these shared machines, and over two or
three micro-batches it says little: so a workload runs its enrichd pipeline ``--runs`` times
over the same produced topics (a fresh checkpoint and output topic each time) and reports
the median sustained rate with the lowest and highest beside it (:class:`Repeated`), and a
sustained rate over fewer than :data:`MIN_STEADY_BATCHES` batches after the first fails the
section's checks (:func:`steady_check`).

With several ``--users``, comap and lookup measure each key count on fresh topics: the
two-process raw ceiling once and enrichd ``--runs`` times (:class:`SweepPoint`), into one
table (:func:`sweep_lines`) against issue 39's targets: the most keys within
:data:`SWEEP_TARGET` of the fewest keys' rate, and the whole service under
:data:`MEMORY_TARGET`.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Protocol

from rich.console import Console

from bench.enrichd import EnrichdResult
from bench.resources import MIB
from bench.wording import (
    Contender,
    enrichd_contenders,
    enrichd_status,
    markdown_table,
    progress_check,
    rate,
)
from bench.workloads import count_records

MIN_STEADY_BATCHES = 5
"""Fewer batches after the first than this make a sustained rate too few to trust."""
SWEEP_TARGET = 0.85
"""Issue 39: at the most keys, enrichd within 15% of its rate at the fewest."""
MEMORY_TARGET = 4_000_000_000
"""Issue 39: the whole service under 4 GB at the most keys (bytes)."""


def add_run_arguments(parser: argparse.ArgumentParser, keys: str, default_keys: int) -> None:
    """``--users`` (one value, or several for a sweep of ``keys``) and ``--runs``."""
    parser.add_argument(
        "--users",
        type=int,
        nargs="+",
        default=[default_keys],
        help=f"{keys}; several values sweep the key count (fresh topics for each)",
    )
    add_runs_argument(parser)


def add_runs_argument(parser: argparse.ArgumentParser) -> None:
    """``--runs``: how many times enrichd runs over the same produced topics."""
    parser.add_argument(
        "--runs",
        type=int,
        default=3,
        help="enrichd runs over the same topics; the median sustained rate is reported",
    )


def local_cores(master: str) -> int:
    """The cores a ``local``, ``local[N]`` or ``local[*]`` Spark master runs tasks on.

    Raises:
        ValueError: not a local master (a cluster's cores are not known from its URL).
    """
    found = re.fullmatch(r"local(?:\[(\*|\d+)(?:,\d+)?\])?", master.strip())
    if found is None:
        raise ValueError(f"not a local Spark master: {master!r}")
    cores = found.group(1)
    if cores is None:
        return 1
    return (os.cpu_count() or 1) if cores == "*" else int(cores)


@dataclass(frozen=True)
class Repeated:
    """enrichd's runs over one workload; figures are medians over them."""

    runs: list[EnrichdResult]

    @property
    def sustained(self) -> float:
        """The median sustained rate."""
        return statistics.median(r.sustained_rate for r in self.runs)

    @property
    def end_to_end(self) -> float:
        """The median end-to-end rate."""
        return statistics.median(r.end_to_end_rate for r in self.runs)

    @property
    def typical(self) -> EnrichdResult:
        """The run whose sustained rate is the median (the lower one of an even count): its
        batches are the ones a report shows."""
        ordered = sorted(self.runs, key=lambda r: r.sustained_rate)
        return ordered[(len(ordered) - 1) // 2]

    @property
    def spread(self) -> str:
        """The lowest and highest sustained rate, "low-high"."""
        rates = [r.sustained_rate for r in self.runs]
        return f"{rate(min(rates))}-{rate(max(rates))}"

    @property
    def steady_batches(self) -> int:
        """The fewest batches after the first of any run."""
        return min(len(r.batches) - 1 for r in self.runs)

    @property
    def peak_pss(self) -> int:
        """The highest peak of the whole process tree's PSS (JVM, Python workers, driver)."""
        return max(r.peaks.total for r in self.runs)

    @property
    def peak_rss(self) -> int:
        """The highest peak of the tree's plain RSS sum."""
        return max(r.peaks.rss_total for r in self.runs)

    def note(self) -> str:
        """The sustained row's note: how many runs and batches, and the spread."""
        runs = len(self.runs)
        spread = f"median of {runs} runs, {self.spread}; " if runs > 1 else ""
        return f"{spread}{self.steady_batches} batch(es) after the first"


def repeat(run: Callable[[], EnrichdResult], times: int, console: Console, label: str) -> Repeated:
    """``run()`` ``times`` times (each a fresh checkpoint and output topic), in order."""
    runs = []
    for i in range(times):
        with console.status(f"{label} (Spark), run {i + 1} of {times}"):
            runs.append(run())
        console.print(f"{label}, run {i + 1}: {enrichd_status(runs[-1])}")
    return Repeated(runs)


def steady_check(repeated: Repeated, label: str = "enrichd") -> tuple[str, bool]:
    """A check line on the batches the sustained rate is over, and whether there are enough."""
    fewest = repeated.steady_batches
    if fewest >= MIN_STEADY_BATCHES:
        runs = "every run" if len(repeated.runs) > 1 else "the run"
        return f"{label} sustained over {fewest} batches after the first or more in {runs}", True
    return (
        f"{label} sustained over only {fewest} batch(es) after the first, fewer than "
        f"{MIN_STEADY_BATCHES}: too few to trust (more records, or a smaller --max-batch)",
        False,
    )


class Written(Protocol):
    """A run that wrote to topics of its own: an :class:`EnrichdResult`, a drain's
    :class:`bench.drain.Drained`."""

    @property
    def output_topic(self) -> str: ...

    @property
    def dead_letter_topic(self) -> str: ...


def output_checks(
    conf: dict[str, str],
    runs: Sequence[Written],
    expected: int,
    noun: str,
    label: str = "enrichd",
    dead_letters: int = 0,
) -> tuple[list[str], bool]:
    """A check per run of what it wrote against ``expected``, and its dead letters against
    ``dead_letters`` (the late records a workload makes on purpose)."""
    lines, ok = [], True
    for i, run in enumerate(runs, 1):
        wrote = count_records(conf, run.output_topic)
        dead = count_records(conf, run.dead_letter_topic)
        name = f"{label} run {i}" if len(runs) > 1 else label
        lines.append(
            f"{name} wrote {wrote:,} {noun} (expected {expected:,}), {dead:,} dead letter(s)"
            + (f" (expected {dead_letters:,})" if dead_letters else "")
        )
        ok = ok and wrote == expected and dead == dead_letters
    return lines, ok


def run_checks(
    conf: dict[str, str],
    repeated: Repeated,
    expected: int,
    noun: str,
    input_records: int,
    label: str = "enrichd",
    dead_letters: int = 0,
) -> tuple[list[str], bool]:
    """Every check of enrichd's runs: what each wrote and dead-lettered
    (:func:`output_checks`), the steady batches (:func:`steady_check`), and a line for each
    run whose progress reports miss some of the ``input_records``; and whether the outputs
    and the steady batches passed."""
    written, ok = output_checks(conf, repeated.runs, expected, noun, label, dead_letters)
    steady, enough = steady_check(repeated, label)
    missed = [line for run in repeated.runs for line in progress_check(run.batches, input_records)]
    return [*written, steady, *missed], ok and enough


@dataclass(frozen=True)
class SweepPoint:
    """One key count of a sweep: the two-process raw ceiling and enrichd's runs."""

    keys: int
    ceiling: float
    enrichd: Repeated


SWEEP_COLUMNS = (
    "keys",
    "enrichd sustained",
    "min-max",
    "batches after the first",
    "2-process ceiling",
    "vs ceiling",
    "peak memory MiB (PSS; RSS sum)",
    "vs first point",
)


def sweep_lines(points: list[SweepPoint]) -> list[str]:
    """The sweep's heading, table and its verdict on issue 39's targets (two points or more)."""
    if len(points) < 2:
        return []
    first = points[0].enrichd.sustained
    rows: list[tuple[str, ...]] = [SWEEP_COLUMNS]
    for point in points:
        e = point.enrichd
        rows.append(
            (
                f"{point.keys:,}",
                rate(e.sustained),
                e.spread,
                str(e.steady_batches),
                rate(point.ceiling),
                f"{e.sustained / point.ceiling:.2f}",
                f"{e.peak_pss / MIB:,.0f}; {e.peak_rss / MIB:,.0f}",
                f"{e.sustained / first:.2f}",
            )
        )
    last = points[-1]
    kept = last.enrichd.sustained / first
    heaviest = max(p.enrichd.peak_pss for p in points)
    return [
        "### Key-count sweep",
        "",
        f"Each key count on fresh topics: the two-process raw ceiling once, enrichd "
        f"{len(last.enrichd.runs)} time(s) (median, with the lowest and highest). Peak memory "
        "is the whole process tree's (the Spark JVM, its Python workers and the driver "
        "process, which also runs the benchmark), sampled as in the Memory line above, the "
        "highest of the runs: PSS, then the plain RSS sum (shared pages counted per process).",
        "",
        *markdown_table(rows),
        "",
        f"- Target: at {last.keys:,} keys within {1 - SWEEP_TARGET:.0%} of the rate at "
        f"{points[0].keys:,}: this run {'meets' if kept >= SWEEP_TARGET else 'misses'} it "
        f"({kept:.2f}). Target: the whole service under {MEMORY_TARGET / 1e9:.0f} GB: this run "
        f"{'meets' if heaviest < MEMORY_TARGET else 'misses'} it (peak PSS "
        f"{heaviest / 1e9:.2f} GB).",
        "",
    ]


def sustained_line(runs: int) -> str:
    """The report line saying what *sustained* and *end to end* are, over ``runs`` runs."""
    repeated = (
        f" The pipeline ran {runs} times over the same topics (a fresh checkpoint and output "
        "topic each): the rows give the median and the note the lowest and highest sustained "
        "rate; the analysis and batch table below are the median run's."
        if runs > 1
        else ""
    )
    return (
        "- *enrichd sustained*: input records after the first micro-batch over the time from "
        "the end of the first batch to the end of the last (from the query's progress "
        f"reports); fewer than {MIN_STEADY_BATCHES} batches after the first fail the checks, "
        "as too few to trust. *End to end* also counts the first batch and query start-up, "
        f"but not the Spark session start-up.{repeated}"
    )


def spark_master(example: Path) -> str:
    """The Spark master of the pipeline file ``example`` (the cores enrichd runs on)."""
    from daemon.model.config import load_pipeline_file

    return load_pipeline_file(example).spark.master


def repeated_contenders(name: str, runs: Repeated) -> list[Contender]:
    """The rows of enrichd run ``name``, sustained and end to end: medians over ``runs``,
    their seconds the median run's."""
    sustained, end_to_end = enrichd_contenders(name, runs.typical)
    several = f"; median of {len(runs.runs)} runs" if len(runs.runs) > 1 else ""
    return [
        replace(sustained, rate=runs.sustained, note=runs.note()),
        replace(end_to_end, rate=runs.end_to_end, note=end_to_end.note + several),
    ]


def point_checks(
    conf: dict[str, str],
    keys: int,
    ceiling_output: str,
    repeated: Repeated,
    expected: int,
    noun: str,
    input_records: int,
) -> tuple[list[str], bool]:
    """A sweep point's checks: what the ceiling and each enrichd run wrote, enrichd's dead
    letters, steady batches and progress reports; and whether they all passed."""
    label = f"at {keys:,} keys: enrichd"
    ceiling_wrote = count_records(conf, ceiling_output)
    checks = [
        f"at {keys:,} keys: raw 2 processes wrote {ceiling_wrote:,} {noun} (expected {expected:,})"
    ]
    runs, ok = run_checks(conf, repeated, expected, noun, input_records, label)
    return checks + runs, ok and ceiling_wrote == expected
