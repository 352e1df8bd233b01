"""What a micro-batch costs: a fixed part per batch and a part per record, fitted.

Spark's progress reports give each batch's ``addBatch`` time (reading, the joiner, the
transactional produce and commit) and the batch's records. Over batches of different sizes,
a least-squares line ``addBatch = F + c * records`` separates the fixed part ``F`` (the
batch's tasks, Python workers and round trips, whatever its size) from the part ``c`` each
record adds (:func:`fit`). Latency at a modest rate is mostly ``F``: a record waits for the
batch before its own and then its own, and at 5,000 records/s a batch is a few thousand
records. :func:`fit_batches` fits the batches of a size range, the latency runs' 1,000 to
10,000 records (:data:`FIT_RECORDS`) by default.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from bench.enrichd import Batch

FIT_RECORDS = (1_000, 10_000)
"""The batch sizes the latency runs' fit is over, inclusive (issue 63)."""


@dataclass(frozen=True)
class BatchCost:
    """``ms = fixed_ms + per_record_ms * records``, fitted over ``batches`` batches."""

    fixed_ms: float
    """``F``: what a batch costs whatever its size."""
    per_record_ms: float
    """``c``: what each record adds."""
    batches: int
    smallest: int
    """The fewest records of a batch fitted."""
    largest: int
    """The most records of a batch fitted."""
    r_squared: float
    """The share of the batches' spread in time the line explains (1: all of it)."""

    def at(self, records: float) -> float:
        """The fitted time of a batch of ``records``, in ms."""
        return self.fixed_ms + self.per_record_ms * records

    def fixed_share(self, records: float) -> float:
        """The fixed part's share of a batch of ``records`` (0 when the fit says nothing)."""
        total = self.at(records)
        return self.fixed_ms / total if total > 0 else 0.0


def fit(points: Sequence[tuple[int, float]]) -> BatchCost | None:
    """Least squares over ``(records, ms)`` points; None without two distinct sizes."""
    if len({records for records, _ in points}) < 2:
        return None
    n = len(points)
    mean_x = sum(x for x, _ in points) / n
    mean_y = sum(y for _, y in points) / n
    sxx = sum((x - mean_x) ** 2 for x, _ in points)
    slope = sum((x - mean_x) * (y - mean_y) for x, y in points) / sxx
    fixed = mean_y - slope * mean_x
    total = sum((y - mean_y) ** 2 for _, y in points)
    residual = sum((y - fixed - slope * x) ** 2 for x, y in points)
    r_squared = 1.0 - residual / total if total > 0 else 1.0
    sizes = [x for x, _ in points]
    return BatchCost(fixed, slope, n, min(sizes), max(sizes), r_squared)


def in_range(batches: Iterable[Batch], records: tuple[int, int] = FIT_RECORDS) -> list[Batch]:
    """The batches whose size is within ``records`` (lowest, highest), inclusive."""
    low, high = records
    return [b for b in batches if low <= b.rows <= high]


def fit_batches(
    batches: Iterable[Batch], records: tuple[int, int] = FIT_RECORDS
) -> BatchCost | None:
    """:func:`fit` of ``addBatch`` over the batches of :func:`in_range`."""
    return fit([(b.rows, b.durations_ms.get("addBatch", 0)) for b in in_range(batches, records)])
