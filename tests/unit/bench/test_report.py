"""Writing a section into the report (``bench/report.py``): a joiner's section carries its
headline and rewrites its own row of the summary, keeping the other rows as they were."""

from __future__ import annotations

from pathlib import Path

from bench import headline
from bench.headline import NO_MILLION, NOT_RUN, Headline
from bench.report import Section, write_section
from bench.sections import markers, section_text


def _headline(joiner: str, sustained: float, commit: str) -> Headline:
    return Headline(
        joiner=joiner,
        sustained=sustained,
        ceiling_ratio=sustained / 60_000,
        quix_per_core=NOT_RUN,
        p99_ms=NOT_RUN,
        offered_rate=0,
        trigger_ms=0,
        memory_mib=NO_MILLION,
        date="2026-11-27 19:00 UTC",
        commit=commit,
    )


def _section(name: str, figures: Headline | None) -> Section:
    return Section(name, f"## {name}", ["Checks: fine."], [], headline=figures)


def _summary(report: Path) -> str:
    block = section_text(report.read_text(encoding="utf-8"), "summary")
    assert block is not None
    return block


def _row(report: Path, joiner: str) -> str:
    return next(line for line in _summary(report).splitlines() if line.startswith(f"| {joiner} |"))


def test_a_joiners_section_carries_its_headline_and_rewrites_only_its_row(tmp_path: Path) -> None:
    report = tmp_path / "BENCHMARKS.md"
    write_section(report, _section("passthrough", None))
    write_section(report, _section("lookup", _headline("lookup", 60_688, "028dee8")))
    write_section(report, _section("comap", _headline("comap", 36_601, "3762234")))
    lookup_row = _row(report, "lookup")
    assert lookup_row.startswith("| lookup | 60,688 | 1.01 |")

    rerun = _headline("comap", 42_000, "4444444-dirty")
    write_section(report, _section("comap", rerun))

    text = report.read_text(encoding="utf-8")
    assert text.index(markers("summary")[0]) < text.index(markers("passthrough")[0])
    assert _row(report, "comap").startswith("| comap | 42,000 | 0.70 |")
    assert _row(report, "comap").endswith("| 2026-11-27 19:00 UTC, 4444444-dirty |")
    assert _row(report, "lookup") == lookup_row
    comap = section_text(text, "comap")
    assert comap is not None and headline.read(comap) == rerun
    assert text.count(markers("summary")[0]) == 1


def test_a_section_of_no_joiner_leaves_the_summary_as_it_was(tmp_path: Path) -> None:
    report = tmp_path / "BENCHMARKS.md"
    write_section(report, _section("comap", _headline("comap", 36_601, "3762234")))
    before = _summary(report)

    write_section(report, _section("state", None))

    assert _summary(report) == before
