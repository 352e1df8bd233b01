"""The headline of a section written before sections carried one, read back from the tables
the bench's own helpers write (``bench/legacy.py``): it must agree with the headline the
same run gives today (:func:`bench.headline.measured`)."""

from __future__ import annotations

import dataclasses
import subprocess
from pathlib import Path

import pytest

from bench import commit, headline, legacy
from bench.enrichd import Batch, EnrichdResult
from bench.headline import NO_MILLION, NO_YARDSTICK, NOT_RUN, Headline
from bench.latency import LatencyResult, trigger_name
from bench.quix import QuixResult
from bench.report import Section, render
from bench.resources import MIB, Peaks
from bench.runs import Repeated, SweepPoint, sweep_lines
from bench.wording import Contender, markdown_table, run_header, throughput_table

DATE = "2026-11-26 22:15 UTC"
MACHINE = (
    "2 cores (AMD EPYC), 24 GiB, Python 3.11.7, PySpark 4.3.0, Spark master local[2]; load "
    "average before the run: 1.22, 1.78, 1.24"
)
QUIX = QuixResult(input_records=30_000, version="3.28.1", seconds=10.0, processes=2)


def _run(rate: int, peak_mib: int) -> EnrichdResult:
    """A run of seven batches of ``rate`` records a second apart: sustained ``rate``/s."""
    result = EnrichdResult(input_records=7 * rate, session_start_s=0.0, query_started=0.0)
    result.batches = [Batch(i, rate, float(i), {"triggerExecution": 1_000}) for i in range(7)]
    result.peaks = Peaks(total=peak_mib * MIB, rss_total=peak_mib * MIB)
    return result


def _section(
    joiner: str,
    quix: QuixResult,
    points: list[SweepPoint],
    latencies: list[LatencyResult],
) -> str:
    """A section as ``python -m bench JOINER`` wrote it before headlines, from its helpers."""
    runs = points[0].enrichd
    contenders = [
        Contender("raw ceiling, 1 process", 35_000.0, 90.0, "assign + dicts"),
        Contender("raw ceiling, 2 processes", points[0].ceiling, 50.0, "the issue's reference"),
        Contender(
            "Quix Streams co-map",
            quix.rate if quix.ran else None,
            quix.seconds if quix.ran else None,
            "3.28.1, 2 process(es) (15,000 + 15,000 records seen)"
            if quix.ran
            else f"not run: {quix.reason}",
        ),
        Contender(f"enrichd {joiner}, sustained", runs.sustained, 60.0, runs.note()),
    ]
    table = throughput_table(contenders, points[0].ceiling, quix.rate if quix.ran else None)
    lines = [
        *run_header(f".venv/bin/python -m bench {joiner}", MACHINE, DATE),
        *markdown_table(table, left=(0, 5)),
        "",
        *sweep_lines(points),
        *_latency_lines(latencies),
        "Checks: fine.",
    ]
    return render(Section(joiner, f"## {joiner}", lines, table), None)


def _latency_lines(latencies: list[LatencyResult]) -> list[str]:
    """The latency table as the bench wrote it before the yardstick (issue 63)."""
    if not latencies:
        return []
    return [
        "### End-to-end latency (enrichd comap)",
        "",
        "| trigger | offered records/s | views | p50 ms | p99 ms | max ms | batches "
        "| records per batch | ms per batch | drain s |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        *(
            f"| {trigger_name(r.trigger_ms)} | {r.offered_rate:,} | {r.outputs:,} | "
            f"{r.p50_ms:,.0f} | {r.p99_ms:,.0f} | {r.max_ms:,.0f} | 0 | 0 | 0 | 0.0 |"
            for r in latencies
        ),
        "",
    ]


def _points(*keys_rate_mib: tuple[int, int, int]) -> list[SweepPoint]:
    return [
        SweepPoint(keys, 60_000.0, Repeated([_run(rate, mib)])) for keys, rate, mib in keys_rate_mib
    ]


LATENCIES = [
    LatencyResult(5_000, 30.0, 0, offered=150_000, outputs=150_000, p99_ms=1_396.0),
    LatencyResult(5_000, 30.0, 1_000, offered=150_000, outputs=150_000, p99_ms=1_800.0),
]


def _today(joiner: str, quix: QuixResult, points: list[SweepPoint]) -> Headline:
    """The headline today's bench gives for the same run, the commit aside."""
    runs = points[0].enrichd
    return headline.measured(
        joiner, runs.sustained, points[0].ceiling, 2, quix, LATENCIES, points, DATE, "-"
    )


def test_an_older_sections_tables_give_the_headline_the_run_gives_today(tmp_path: Path) -> None:
    points = _points((20_000, 36_000, 3_800), (200_000, 30_000, 3_900), (1_000_000, 27_000, 4_277))
    section = _section("comap", QUIX, points, LATENCIES)
    assert "<!-- headline" not in section

    read = legacy.headline("comap", section, tmp_path / "BENCHMARKS.md")

    today = _today("comap", QUIX, points)  # no yardstick then: the section cannot say one
    expected = dataclasses.replace(today, commit=commit.UNKNOWN, yardstick_p99_ms=NO_YARDSTICK)
    assert read == expected


def test_an_older_section_without_the_peer_latency_or_sweep_says_so(tmp_path: Path) -> None:
    no_quix = QuixResult(input_records=1, reason="--no-quix")
    section = _section("asof", no_quix, _points((1_000, 52_000, 3_000)), [])

    read = legacy.headline("asof", section, tmp_path / "BENCHMARKS.md")

    assert read is not None
    assert (read.sustained, read.ceiling_ratio) == (52_000.0, pytest.approx(52_000 / 60_000))
    assert (read.quix_per_core, read.p99_ms, read.memory_mib) == (NOT_RUN, NOT_RUN, NO_MILLION)


def test_a_section_without_an_enrichd_row_has_no_headline(tmp_path: Path) -> None:
    section = _section("comap", QUIX, _points((20_000, 36_000, 3_800)), [])
    assert legacy.headline("lookup", section, tmp_path / "BENCHMARKS.md") is None


def test_an_older_section_names_the_commit_that_recorded_it(tmp_path: Path) -> None:
    report = tmp_path / "BENCHMARKS.md"
    section = _section("comap", QUIX, _points((20_000, 36_000, 3_800)), LATENCIES)
    report.write_text(f"# Benchmarks\n\n{section}\n")
    git = ["git", "-c", "user.name=bench", "-c", "user.email=bench@example.invalid"]
    subprocess.run([*git, "init", "-q"], cwd=tmp_path, check=True)
    subprocess.run([*git, "add", "."], cwd=tmp_path, check=True)
    subprocess.run([*git, "commit", "-q", "-m", "comap's figures"], cwd=tmp_path, check=True)
    recorded = subprocess.run(
        ["git", "rev-parse", "--short=7", "HEAD"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()

    read = legacy.headline("comap", report.read_text(), report)

    assert read is not None and read.commit == f"recorded in {recorded}"
