"""Which code a run measured: the commit it ran from, or the commit that recorded a section.

A run names the commit checked out when it started, with ``-dirty`` when tracked files
differ from it (as ``git describe --dirty`` says), so that a figure can be traced to the
code behind it. The report and its charts are left out of that check: ``python -m bench
all`` rewrites them between one workload and the next. A section written before runs named
their commit can only be traced to the commit that recorded it (:func:`recorded_in`).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
UNKNOWN = "unknown"
"""The commit of a run from outside a git checkout (or without git)."""

_CODE = (".", ":(exclude)BENCHMARKS.md", ":(exclude)bench/charts")
"""What a run measures: the checkout but the report and the charts the bench rewrites."""


def _git(folder: Path, *args: str) -> str | None:
    """``git args`` in ``folder``, its output stripped; None when git fails or is missing."""
    try:
        done = subprocess.run(  # noqa: S603 - git, with arguments of this module
            ["git", *args],  # noqa: S607 - whichever git the user has on PATH
            cwd=folder,
            capture_output=True,
            text=True,
            check=False,
        )
    except OSError:
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def measured(repo: Path = REPO) -> str:
    """The short hash of ``repo``'s checked-out commit, ``-dirty`` when tracked files other
    than the report and its charts differ from it; :data:`UNKNOWN` outside a checkout."""
    head = _git(repo, "rev-parse", "--short=7", "HEAD")
    if not head:
        return UNKNOWN
    changed = _git(repo, "status", "--porcelain", "--untracked-files=no", "--", *_CODE)
    return f"{head}-dirty" if changed else head


def recorded_in(report: Path, line: str) -> str | None:
    """The short hash of the commit that first added ``line`` to ``report``; None when no
    commit did (a report outside git, or not committed yet)."""
    found = _git(
        report.resolve().parent,
        "log",
        "--reverse",
        "--abbrev=7",
        "--format=%h",
        "-S",
        line,
        "--",
        report.name,
    )
    return found.splitlines()[0] if found else None
