"""A joiner's headline figures from one run: what the summary atop ``BENCHMARKS.md`` shows.

comap, lookup, asof and window each hand back a :class:`Headline` with their section
(:func:`measured` makes it from the run's own results). The section carries it as a hidden
line of JSON (:func:`comment`), written by the bench and never by hand, so that the summary
can be rebuilt from the sections alone (:mod:`bench.summary`), each row from its own run.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pydantic

from bench.latency import ENRICHD, YARDSTICK, LatencyResult, shown, yardstick_of
from bench.resources import MIB

if TYPE_CHECKING:
    from bench.quix import QuixResult
    from bench.runs import SweepPoint

MILLION = 1_000_000
"""The key count whose peak memory the summary shows (issue 52's targets are set there)."""
NOT_RUN = "not run"
"""A figure's cell when the run left that part out (``--no-quix``, ``--no-latency``)."""
NOT_MEASURED = "not measured"
"""A figure's cell when that part ran but gave no figure (see the section for why)."""
NO_MILLION = "no 1M point"
"""The memory cell of a run without a point at :data:`MILLION` keys."""
NO_YARDSTICK = "no yardstick"
"""The yardstick's figure of a section written before latency runs had one (issue 63)."""


@dataclass(frozen=True)
class Headline:
    """One joiner's figures from one run of its workload.

    A figure that is missing holds the reason instead (:data:`NOT_RUN`, :data:`NOT_MEASURED`,
    :data:`NO_MILLION`), so that no cell of the summary is blank.
    """

    joiner: str
    """The joiner the workload runs (``"comap"``), which names its summary row."""
    sustained: float
    """enrichd's sustained input records/s, the median of the run's enrichd runs."""
    ceiling_ratio: float
    """``sustained`` over the two-process raw ceiling measured in the same run."""
    quix_per_core: float | str
    """enrichd's records/s per Spark core over Quix Streams' records/s per process."""
    p99_ms: float | str
    """p99 end-to-end latency of the latency run (the default trigger's, if it ran)."""
    offered_rate: int
    """Records/s offered in that latency run (0 without one)."""
    trigger_ms: int
    """That latency run's processing-time trigger (0: the pipeline's default)."""
    memory_mib: float | str
    """Peak PSS of the benchmark's process tree at :data:`MILLION` keys, in MiB."""
    date: str
    """When the run ended, as its section's ``Date:`` line says (``2026-11-26 22:15 UTC``)."""
    commit: str
    """The commit the run measured (``-dirty``: with uncommitted changes), or, for a section
    written before sections carried a headline, the commit that recorded it."""
    yardstick_p99_ms: float | str = NO_YARDSTICK
    """p99 of the yardstick (:mod:`bench.yardstick`) at the rate of the latency run of
    :attr:`p99_ms`, in the same run: the raw exactly-once loop doing the same join."""

    @property
    def p99_ratio(self) -> float | str:
        """:attr:`p99_ms` over :attr:`yardstick_p99_ms`, or why there is none."""
        if isinstance(self.p99_ms, str):
            return self.p99_ms
        if isinstance(self.yardstick_p99_ms, str):
            return self.yardstick_p99_ms
        return self.p99_ms / self.yardstick_p99_ms if self.yardstick_p99_ms > 0 else NOT_MEASURED


_ADAPTER = pydantic.TypeAdapter(Headline)
_COMMENT = re.compile(r"^<!-- headline (\{.*\}) -->$", re.MULTILINE)


def comment(headline: Headline) -> str:
    """``headline`` as the hidden line its section carries: an HTML comment holding JSON."""
    payload = json.dumps(dataclasses.asdict(headline), ensure_ascii=False)
    if "-->" in payload:  # it would end the comment early; no figure or date holds it
        raise ValueError(f"a headline cannot hold '-->': {payload}")
    return f"<!-- headline {payload} -->"


def read(section: str) -> Headline | None:
    """The headline a section carries (:func:`comment`), None when it carries none.

    Raises:
        ValueError: the section carries a headline that is not valid (edited by hand?).
    """
    found = _COMMENT.search(section)
    if found is None:
        return None
    try:
        return _ADAPTER.validate_json(found.group(1))
    except pydantic.ValidationError as exc:
        raise ValueError(f"the section's headline is not valid: {exc}") from exc


def measured(
    joiner: str,
    sustained: float,
    ceiling: float,
    cores: int,
    quix: QuixResult,
    latencies: Sequence[LatencyResult],
    points: Sequence[SweepPoint],
    date: str,
    commit: str,
) -> Headline:
    """The headline of a run, from the values its section is written from.

    Args:
        joiner: the joiner the workload runs.
        sustained: enrichd's median sustained input records/s.
        ceiling: the two-process raw ceiling of the same run, input records/s.
        cores: the cores enrichd's Spark session runs tasks on.
        quix: the Quix Streams run (not run: ``quix.reason``).
        latencies: the latency runs, the yardstick's too (none with ``--no-latency``).
        points: the key-count sweep's points, the first one included (none without a sweep).
        date: the run's date, as its section's ``Date:`` line.
        commit: the commit the run measured (:func:`bench.commit.measured`).

    Returns:
        The headline, the reason in place of each figure the run did not give.
    """
    latency = shown(latencies)
    tried = any(r.contender == ENRICHD and not r.for_fit for r in latencies)
    return Headline(
        joiner=joiner,
        sustained=sustained,
        ceiling_ratio=sustained / ceiling,
        quix_per_core=_per_core(sustained, cores, quix),
        p99_ms=latency.p99_ms if latency else (NOT_MEASURED if tried else NOT_RUN),
        offered_rate=latency.offered_rate if latency else 0,
        trigger_ms=latency.trigger_ms if latency else 0,
        memory_mib=next(
            (p.enrichd.peak_pss / MIB for p in points if p.keys == MILLION), NO_MILLION
        ),
        date=date,
        commit=commit,
        yardstick_p99_ms=_yardstick_p99(latency, latencies),
    )


def _yardstick_p99(
    latency: LatencyResult | None, latencies: Sequence[LatencyResult]
) -> float | str:
    """The yardstick's p99 at the rate of the run shown, else at the latency rate (when no
    enrichd run was measured), or why there is none."""
    yardsticks = [r for r in latencies if r.contender == YARDSTICK]
    if not yardsticks:
        return NOT_RUN
    found = (
        yardstick_of(latency, latencies)
        if latency is not None
        else next((r for r in yardsticks if not r.reason and not r.for_fit), None)
    )
    return found.p99_ms if found is not None else NOT_MEASURED


def _per_core(sustained: float, cores: int, quix: QuixResult) -> float | str:
    """enrichd per core over Quix per process: the peer runs one process per core, but this
    holds when it does not."""
    if not quix.ran:
        return NOT_RUN
    if quix.rate <= 0 or cores <= 0:
        return NOT_MEASURED
    return (sustained / cores) / (quix.rate / quix.processes)
