"""The headline of a section written before sections carried one, read from its tables.

Those sections were written by ``python -m bench NAME`` too, so their tables have the
bench's fixed layout: the throughput table (``| run | records/s | ...``) with the two-process
raw ceiling, Quix Streams and enrichd's sustained rows, the key-count sweep (``| keys |``)
and the latency table (``| trigger |``), under a ``Date:`` line and a ``Machine:`` line that
names the Spark master. The commit they measured was not written down: the headline names
the commit that recorded the section instead (:func:`bench.commit.recorded_in`).

Once every joiner's section has been written again by a run, nothing here is used.
"""

from __future__ import annotations

import re
from pathlib import Path

from bench.commit import UNKNOWN, recorded_in
from bench.headline import MILLION, NO_MILLION, NOT_MEASURED, NOT_RUN, Headline

Table = list[list[str]]
"""A Markdown table's rows of cells, the header first (the alignment row left out)."""


def headline(joiner: str, section: str, report: Path) -> Headline | None:
    """``joiner``'s headline, read from ``section`` of ``report``; None when the section has
    no enrichd sustained row or no raw ceiling to read it against."""
    tables = _tables(section)
    throughput = _table(tables, "run")
    if throughput is None:
        return None
    rates = {row[0]: _number(row[1]) for row in throughput[1:]}
    sustained = rates.get(f"enrichd {joiner}, sustained")
    ceiling = rates.get("raw ceiling, 2 processes")
    if not sustained or not ceiling:
        return None
    date = _line(section, "Date: ")
    p99, offered, trigger = _latency(_table(tables, "trigger"))
    return Headline(
        joiner=joiner,
        sustained=sustained,
        ceiling_ratio=sustained / ceiling,
        quix_per_core=_per_core(sustained, throughput, _line(section, "Machine: ")),
        p99_ms=p99,
        offered_rate=offered,
        trigger_ms=trigger,
        memory_mib=_memory(_table(tables, "keys")),
        date=date,
        commit=_recorded(report, date),
    )


def _tables(section: str) -> list[Table]:
    """Every Markdown table of ``section``, in order."""
    tables: list[Table] = []
    current: Table = []
    for line in [*section.splitlines(), ""]:
        if line.startswith("|"):
            cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
            if not all(re.fullmatch(r":?-+:?", cell) for cell in cells):
                current.append(cells)
        elif current:
            tables.append(current)
            current = []
    return tables


def _table(tables: list[Table], first: str) -> Table | None:
    """The first table whose header starts with the column ``first``."""
    return next((t for t in tables if t[0][0] == first), None)


def _number(cell: str) -> float | None:
    """A cell's leading number (``"4,277; 4,720"`` -> 4277.0); None when it holds none."""
    found = re.match(r"[\d,]+(?:\.\d+)?", cell.strip())
    return float(found.group(0).replace(",", "")) if found else None


def _column(table: Table, name: str) -> int | None:
    return table[0].index(name) if name in table[0] else None


def _line(section: str, prefix: str) -> str:
    """The rest of the first line starting with ``prefix``, trailing spaces stripped."""
    found = re.search(rf"^{re.escape(prefix)}(.*?)\s*$", section, re.MULTILINE)
    return found.group(1) if found else ""


def _per_core(sustained: float, throughput: Table, machine: str) -> float | str:
    """enrichd per core over Quix per process: the Quix row's rate and processes (its note
    says ``N process(es)``) against the cores of the Machine line's ``local[N]`` master."""
    quix = next((row for row in throughput[1:] if row[0].startswith("Quix Streams")), None)
    if quix is None or _number(quix[1]) is None:
        return NOT_RUN
    processes = re.search(r"(\d+) process\(es\)", quix[-1])
    cores = re.search(r"Spark master local\[(\d+)\]", machine)
    rate = _number(quix[1])
    if processes is None or cores is None or not rate:
        return NOT_MEASURED
    return (sustained / int(cores.group(1))) / (rate / int(processes.group(1)))


def _latency(table: Table | None) -> tuple[float | str, int, int]:
    """(p99 ms, offered records/s, trigger ms) of the default trigger's row, else the first."""
    if table is None or len(table) < 2:
        return NOT_RUN, 0, 0
    p99, offered = _column(table, "p99 ms"), _column(table, "offered records/s")
    if p99 is None or offered is None:
        return NOT_MEASURED, 0, 0
    row = next((r for r in table[1:] if r[0] == "default"), table[1])
    trigger = 0 if row[0] == "default" else int(_number(row[0]) or 0)
    p99_ms, rate = _number(row[p99]), _number(row[offered])
    if p99_ms is None or rate is None:
        return NOT_MEASURED, 0, 0
    return p99_ms, int(rate), trigger


def _memory(sweep: Table | None) -> float | str:
    """Peak PSS in MiB at :data:`MILLION` keys, from the sweep's memory column."""
    if sweep is None:
        return NO_MILLION
    column = _column(sweep, "peak memory MiB (PSS; RSS sum)")
    row = next((r for r in sweep[1:] if _number(r[0]) == MILLION), None)
    if row is None:
        return NO_MILLION
    memory = _number(row[column]) if column is not None else None
    return NOT_MEASURED if memory is None else memory


def _recorded(report: Path, date: str) -> str:
    """ "recorded in HASH": the commit that added the section's ``Date:`` line."""
    commit = recorded_in(report, f"Date: {date}") if date else None
    return f"recorded in {commit}" if commit else UNKNOWN
