"""Where each workload's section sits in a report, and where its chart goes.

A report (``BENCHMARKS.md``) holds one section per workload between ``<!-- bench:NAME -->``
and ``<!-- /bench:NAME -->``, and the summary at its top between the same kind of markers
(``NAME`` ``summary``); hand-written sections have no markers. Charts go to
:data:`CHARTS` beside the report.
"""

from __future__ import annotations

import re
from pathlib import Path

CHARTS = Path("bench", "charts")
"""The charts' folder, relative to the report's (``BENCHMARKS.md``'s: the repository top)."""


def markers(name: str) -> tuple[str, str]:
    """The opening and closing markers of section ``name``."""
    return f"<!-- bench:{name} -->", f"<!-- /bench:{name} -->"


def plot_path(report: Path, name: str) -> Path:
    """Where section ``name``'s chart goes: :data:`CHARTS` beside the report."""
    return report.parent / CHARTS / f"{name}.png"


def span(name: str) -> re.Pattern[str]:
    """A pattern matching section ``name``, its markers included."""
    start, end = markers(name)
    return re.compile(re.escape(start) + r".*?" + re.escape(end), re.DOTALL)


def section_text(text: str, name: str) -> str | None:
    """Section ``name`` of the report ``text``, markers included; None when it has none."""
    found = span(name).search(text)
    return found.group(0) if found else None
