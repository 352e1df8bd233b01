"""The summary atop ``BENCHMARKS.md``: a row per joiner, a one-line legend and one chart.

The block sits between ``<!-- bench:summary -->`` markers right after the report's preamble,
and it is generated, never kept by hand: each row is the headline its joiner's section
carries (:mod:`bench.headline`), so a row always agrees with the section below it and says
the date and commit of its own run. :func:`bench.report.write_section` rewrites the block
whenever it writes a joiner's section, which replaces that joiner's row and leaves the
others as their sections have them; ``python -m bench summary`` rebuilds it from the
sections as they stand. A section written before sections carried a headline is read from
its tables (:mod:`bench.legacy`). The chart, ``bench/charts/summary.png``, shows each
joiner's sustained rate as a share of the raw ceiling of its own run.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

from bench import headline, legacy
from bench.headline import Headline
from bench.sections import markers, plot_path, section_text, span

NAME = "summary"
"""The block's name in its markers, and its chart's."""
JOINERS = ("comap", "lookup", "asof", "window")
"""The workloads with a row, one per joiner they run (``table`` has no workload yet)."""
HEADING = "## Summary"
COLUMNS = (
    "joiner",
    "sustained records/s",
    "vs ceiling",
    "vs Quix per core",
    "p99 end to end",
    "p99 vs yardstick",
    "peak memory at 1M keys",
    "run",
)
LEGEND = (
    "*sustained*: enrichd's input records/s after its first micro-batch, the median of the "
    "run's enrichd runs; *vs ceiling*: over a raw confluent-kafka + fastavro loop doing the "
    "same join in two processes, measured in the same run; *vs Quix per core*: over Quix "
    "Streams doing the same join, per core; *p99*: end to end as a `read_committed` reader "
    "sees it, at the offered rate, with the pipeline's default trigger unless the cell names "
    "another; *p99 vs yardstick*: over the p99 of a raw confluent-kafka + fastavro loop doing "
    "the same join exactly once, committing every 100 ms as Kafka Streams does, at the same "
    "rate in the same run (*no yardstick*: a run from before it had one); *memory*: peak PSS of "
    "the benchmark's process tree (Spark's JVM and Python workers, and the driver, which also "
    "runs the benchmark) at the key-count sweep's 1,000,000 keys; *run*: when it ended and "
    "the commit it measured (`-dirty`: with uncommitted changes; *recorded in*: a run from "
    "before runs named their commit, and the commit that recorded it). Each row comes from "
    "its joiner's section below and its own run. The `table` joiner has no benchmark yet."
)
MISSING = "not run"
"""Every cell of a joiner whose section the report does not have."""
UNREADABLE = "not found"
"""Every cell of a joiner whose section holds no figures the summary can read."""
INVALID = "invalid headline"
"""Every cell of a joiner whose section's headline line is not what the bench writes."""


@dataclass(frozen=True)
class Row:
    """A joiner's row: its headline, or why there is none (:data:`MISSING`,
    :data:`UNREADABLE`, :data:`INVALID`)."""

    joiner: str
    headline: Headline | str


def rows(text: str, report: Path) -> list[Row]:
    """A row per joiner of :data:`JOINERS` from the sections of the report ``text``, which
    is at ``report`` (for the commit that recorded an older section)."""
    found = []
    for joiner in JOINERS:
        section = section_text(text, joiner)
        if section is None:
            found.append(Row(joiner, MISSING))
            continue
        try:
            figures = headline.read(section) or legacy.headline(joiner, section, report)
        except ValueError:  # a headline edited by hand: the other rows are still right
            found.append(Row(joiner, INVALID))
            continue
        found.append(Row(joiner, figures or UNREADABLE))
    return found


def cells(row: Row) -> tuple[str, ...]:
    """The row's table cells; a missing figure's cell says why."""
    h = row.headline
    if isinstance(h, str):
        return (row.joiner, *[h] * (len(COLUMNS) - 1))
    per_core = h.quix_per_core if isinstance(h.quix_per_core, str) else f"{h.quix_per_core:.2f}x"
    if isinstance(h.p99_ms, str):
        p99 = h.p99_ms
    else:
        trigger = f" ({h.trigger_ms:,} ms trigger)" if h.trigger_ms else ""
        p99 = f"{h.p99_ms:,.0f} ms at {h.offered_rate:,}/s{trigger}"
    memory = h.memory_mib if isinstance(h.memory_mib, str) else f"{h.memory_mib:,.0f} MiB"
    ratio = h.p99_ratio if isinstance(h.p99_ratio, str) else f"{h.p99_ratio:.2f}x"
    return (
        row.joiner,
        f"{h.sustained:,.0f}",
        f"{h.ceiling_ratio:.2f}",
        per_core,
        p99,
        ratio,
        memory,
        f"{h.date}, {h.commit}",
    )


def render(table: list[Row], chart: str | None) -> str:
    """The block, markers included; ``chart`` is the PNG's link relative to the report."""
    start, end = markers(NAME)
    align = ["---", *["---:"] * (len(COLUMNS) - 2), "---"]
    lines = [
        start,
        HEADING,
        "",
        "| " + " | ".join(COLUMNS) + " |",
        "|" + "|".join(align) + "|",
        *("| " + " | ".join(cells(row)) + " |" for row in table),
        "",
        LEGEND,
        "",
    ]
    if chart is not None:
        lines += [f"![enrichd sustained as a share of the raw ceiling, per joiner]({chart})", ""]
    return "\n".join([*lines, end])


def splice(text: str, block: str) -> str:
    """``text`` with its summary replaced by ``block``, or ``block`` put in after the
    preamble: before the first section with markers (at the end when there is none)."""
    pattern = span(NAME)
    if pattern.search(text):
        return pattern.sub(lambda _: block, text, count=1)
    first = text.find("<!-- bench:")
    if first < 0:
        return text.rstrip("\n") + "\n\n" + block + "\n"
    return text[:first] + block + "\n\n" + text[first:]


def write_summary(report: Path) -> None:
    """Rebuild the summary of ``report`` from its sections, and its chart beside it."""
    text = report.read_text(encoding="utf-8")
    table = rows(text, report)
    chart = None
    if any(isinstance(row.headline, Headline) for row in table):
        png = plot_path(report, NAME)
        png.parent.mkdir(parents=True, exist_ok=True)
        write_chart(png, table)
        chart = png.relative_to(report.parent).as_posix()
    report.write_text(splice(text, render(table, chart)), encoding="utf-8")


def write_chart(png: Path, table: list[Row]) -> None:
    """Horizontal bars of each joiner's sustained rate over its run's raw ceiling, with the
    ceiling drawn at 1; a joiner without figures gets a label saying why instead of a bar."""
    import matplotlib

    matplotlib.use("Agg")  # files only: no display on the benchmark machines
    import matplotlib.pyplot as plt

    names = [row.joiner for row in table]
    ratios = [r.headline.ceiling_ratio if isinstance(r.headline, Headline) else 0.0 for r in table]
    figure, axes = plt.subplots(figsize=(8, 0.45 * len(names) + 1.3))
    bars = axes.barh(names, ratios, color="#d95f02")
    axes.invert_yaxis()  # the table's order, top to bottom
    labels = [
        f"{r.headline.ceiling_ratio:.2f} ({r.headline.sustained:,.0f} records/s)"
        if isinstance(r.headline, Headline)
        else r.headline
        for r in table
    ]
    axes.bar_label(bars, labels=labels, padding=3, fontsize=8)
    axes.axvline(1.0, color="#555555", linestyle="--", linewidth=1, label="the raw ceiling")
    axes.legend(loc="upper right", fontsize=8)
    axes.set_xlim(0, max(1.0, *ratios) * 1.35)
    axes.set_xlabel("enrichd sustained / the two-process raw ceiling of its run (higher is better)")
    axes.set_title("enrichd per joiner against the raw ceiling", fontsize=10)
    figure.tight_layout()
    figure.savefig(png, dpi=100)
    plt.close(figure)


def add_arguments(parser: argparse.ArgumentParser, default: Path) -> None:
    """``python -m bench summary``'s one option: the report whose summary to rebuild."""
    parser.add_argument(
        "--output",
        type=Path,
        default=default,
        help="the report whose summary to rebuild from its sections (default: BENCHMARKS.md)",
    )


def run(args: argparse.Namespace) -> int:
    """Rebuild the summary of ``args.output``; 1 with a one-line error when it has no
    section to build from."""
    report = Path(args.output)
    if not report.exists():
        print(
            f"error: {report} does not exist: run a workload first (python -m bench NAME)",
            file=sys.stderr,
        )
        return 1
    write_summary(report)
    print(f"rebuilt the summary of {report}")
    return 0
