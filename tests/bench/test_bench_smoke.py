"""The benchmark still runs: every workload end to end at tiny sizes (``python -m bench smoke``).

Nothing here is about speed. The smoke runs in a process of its own, since each enrichd run
goes through the service of ``daemon run``, which stops its Spark session when it ends; it
starts one embedded broker for all the workloads.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from bench import continuous, headline, summary
from bench.__main__ import WORKLOADS
from bench.sections import markers, plot_path
from bench.smoke import SIZES

if TYPE_CHECKING:
    from daemon.broker import EmbeddedBroker

REPO = Path(__file__).resolve().parents[2]
BENCHMARKS = REPO / "BENCHMARKS.md"


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _triggers(options: list[str]) -> list[str]:
    """The values of ``--trigger-ms`` among a workload's options (none: no enrichd latency)."""
    if "--trigger-ms" not in options:
        return []
    values = []
    for value in options[options.index("--trigger-ms") + 1 :]:
        if value.startswith("--"):
            break
        values.append(value)
    return values


def _smoke(output: Path, timeout_s: float) -> subprocess.CompletedProcess[str]:
    """``python -m bench smoke --output OUTPUT`` from the repository top."""
    return subprocess.run(
        [sys.executable, "-m", "bench", "smoke", "--output", str(output)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )


def test_the_smoke_has_tiny_sizes_for_every_workload() -> None:
    assert list(SIZES) == list(WORKLOADS)


def test_every_workload_runs_end_to_end_and_writes_its_section_to_the_given_report(
    tmp_path: Path,
) -> None:
    report = tmp_path / "report.md"
    before = _digest(BENCHMARKS)
    charts_before = {p: p.stat().st_mtime_ns for p in (REPO / "bench" / "charts").glob("*.png")}
    # A bound on a hang: 224 s on a fresh machine, 647 s in a CI run of the same commit.
    done = _smoke(report, timeout_s=1500)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-3000:]
    text = report.read_text(encoding="utf-8")
    for name in WORKLOADS:
        start, end = markers(name)
        assert start in text and end in text, name
        section = text[text.index(start) : text.index(end)]
        assert "Checks:" in section, name
    # Every workload but startup, commit_turn and continuous (which measure no throughput)
    # draws its chart, beside the report it wrote.
    for name in (n for n in WORKLOADS if n not in ("startup", "commit_turn", "continuous")):
        chart = plot_path(report, name)
        assert chart.stat().st_size > 0, name
        assert f"]({chart.relative_to(tmp_path).as_posix()})" in text, name
    # The summary atop the report: each joiner's row is the headline its section carries,
    # from this run of this checkout (no peer, no 1M-key point, latency where SIZES asks).
    top, bottom = markers("summary")
    assert text.index(bottom) < min(text.index(markers(name)[0]) for name in WORKLOADS)
    block = text[text.index(top) : text.index(bottom)]
    head = subprocess.run(
        ["git", "rev-parse", "--short=7", "HEAD"], cwd=REPO, capture_output=True, text=True
    ).stdout.strip()
    for joiner in summary.JOINERS:
        start, end = markers(joiner)
        figures = headline.read(text[text.index(start) : text.index(end)])
        assert figures is not None, joiner
        assert "| " + " | ".join(summary.cells(summary.Row(joiner, figures))) + " |" in block
        assert figures.sustained > 0 and head and figures.commit.startswith(head), figures
        assert (figures.quix_per_core, figures.memory_mib) == ("not run", "no 1M point")
        # Every joiner's yardstick ran; enrichd's latency where SIZES names a trigger.
        assert isinstance(figures.p99_ms, float) == bool(_triggers(SIZES[joiner]))
        assert isinstance(figures.yardstick_p99_ms, float), figures
        section = text[text.index(start) : text.index(end)]
        assert "| yardstick (raw loop, exactly once) | 200 |" in section, joiner
        assert "- Batch cost: " in section, joiner
    assert plot_path(report, "summary").stat().st_size > 0
    # continuous drains its 50 users and 300 tweets in continuous mode, in the smoke's own
    # process (--drain-here: no JVM start of its own), and says its memory, and whose.
    start, end = markers("continuous")
    section = text[text.index(start) : text.index(end)]
    assert "| continuous 1 | 350 |" in section
    assert f"Peak PSS of the service at 50 keys ({continuous.HERE_TREE})" in section
    assert _digest(BENCHMARKS) == before
    charts_after = {p: p.stat().st_mtime_ns for p in (REPO / "bench" / "charts").glob("*.png")}
    assert charts_after == charts_before


def test_the_smoke_refuses_to_write_the_repositorys_report() -> None:
    done = _smoke(BENCHMARKS, timeout_s=120)
    assert done.returncode != 0
    assert "not BENCHMARKS.md" in done.stderr


def test_peak_memory_leaves_the_test_broker_out(broker: EmbeddedBroker) -> None:
    """The embedded broker keeps every topic in memory: it is sampled, but not the service's."""
    from bench.resources import PeakMemory

    with PeakMemory(interval_s=3600) as memory:
        pass  # leaving samples the tree once
    peaks = memory.result

    assert peaks.samples == 1
    assert peaks.broker > 0  # this test session's broker, a child of this process
    assert peaks.other > 0  # this process
    assert peaks.total == peaks.jvm + peaks.python_workers + peaks.other
    assert "not counted: the test broker" in peaks.describe()
