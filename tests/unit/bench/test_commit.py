"""Which commit a run measured, and which commit recorded an older section
(``bench/commit.py``), on a git repository made for each test."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from bench import commit


def _git(repo: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-c", "user.name=bench", "-c", "user.email=bench@example.invalid", *args],
        cwd=repo,
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.strip()


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A repository with the report, a chart and a module committed."""
    _git(tmp_path, "init", "-q")
    (tmp_path / "bench" / "charts").mkdir(parents=True)
    (tmp_path / "bench" / "charts" / "comap.png").write_bytes(b"png")
    (tmp_path / "bench" / "comap.py").write_text("RUNS = 3\n")
    (tmp_path / "BENCHMARKS.md").write_text("# Benchmarks\n")
    _git(tmp_path, "add", ".")
    _git(tmp_path, "commit", "-q", "-m", "first")
    return tmp_path


def test_a_clean_checkout_is_named_by_its_short_hash(repo: Path) -> None:
    assert commit.measured(repo) == _git(repo, "rev-parse", "--short=7", "HEAD")


def test_a_changed_tracked_file_marks_the_commit_dirty(repo: Path) -> None:
    (repo / "bench" / "comap.py").write_text("RUNS = 5\n")
    head = _git(repo, "rev-parse", "--short=7", "HEAD")
    assert commit.measured(repo) == f"{head}-dirty"


def test_the_report_its_charts_and_untracked_files_leave_the_commit_clean(repo: Path) -> None:
    # `bench all` rewrites the report and charts between workloads: not a change to the code.
    (repo / "BENCHMARKS.md").write_text("# Benchmarks\n\nnew figures\n")
    (repo / "bench" / "charts" / "comap.png").write_bytes(b"another png")
    (repo / "notes.txt").write_text("scratch\n")
    assert commit.measured(repo) == _git(repo, "rev-parse", "--short=7", "HEAD")


def test_outside_a_checkout_the_commit_is_unknown(tmp_path: Path) -> None:
    assert commit.measured(tmp_path) == commit.UNKNOWN


def test_a_line_is_traced_to_the_commit_that_first_added_it(repo: Path) -> None:
    report = repo / "BENCHMARKS.md"
    report.write_text("# Benchmarks\n\nDate: 2026-11-26 22:15 UTC  \n")
    _git(repo, "commit", "-q", "-am", "comap's figures")
    added = _git(repo, "rev-parse", "--short=7", "HEAD")
    report.write_text("# Benchmarks\n\nDate: 2026-11-26 22:15 UTC  \nmore, by hand\n")
    _git(repo, "commit", "-q", "-am", "a correction")

    assert commit.recorded_in(report, "Date: 2026-11-26 22:15 UTC") == added
    assert commit.recorded_in(report, "Date: 2026-11-27 08:00 UTC") is None
