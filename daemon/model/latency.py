"""End-to-end latency: from a source record's Kafka timestamp to the commit of what it caused.

How it is measured: the joiner operator notes, per output topic, the source timestamp of
every record it writes, and passes them with its counts (counts rows,
:data:`daemon.model.wire.COUNTS_TOPIC`) to the query's sink, as :func:`compact` pairs. The
sink's task sees the end of those rows only once the operator's task has committed its Kafka
transaction (Spark closes the operator, which commits, before it ends the operator's output),
so the moment the sink's task has read them all is just after the commit, by tens of
milliseconds; there :func:`tally` turns the timestamps into the histogram's bucket counts,
which reach the daemon's ``enrichd_end_to_end_latency_seconds`` with the batch's other
counts. So the figure errs long, never short. Output that no source record caused (a window
closed by a wake-up) has no timestamp and is not counted.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import numpy as np

LATENCY_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0)
"""Upper bounds (seconds) of the latency histogram: a kept-up pipeline's records take a
micro-batch or two (about a second); a backlog's, up to hours."""

Tally = tuple[list[int], float]
"""A histogram's counts per bucket (not cumulative, one more than :data:`LATENCY_BUCKETS`
for +Inf) and the sum of its latencies in seconds."""


def compact(stamps: Iterable[int]) -> list[list[int]]:
    """Timestamps as ``[distinct values, their counts]``: a batch's records share milliseconds."""
    values, counts = np.unique(np.fromiter(stamps, dtype=np.int64), return_counts=True)
    return [values.tolist(), counts.tolist()]


def merge(into: dict[int, int], pairs: list[list[int]]) -> None:
    """Add :func:`compact` pairs to counts by timestamp."""
    for value, count in zip(pairs[0], pairs[1], strict=True):
        into[value] = into.get(value, 0) + count


def tally(stamps: Mapping[int, int], now_ms: int) -> Tally:
    """The histogram of ``now_ms`` minus each timestamp (a negative one counts as 0)."""
    if not stamps:
        return [0] * (len(LATENCY_BUCKETS) + 1), 0.0
    values = np.fromiter(stamps.keys(), dtype=np.int64, count=len(stamps))
    weights = np.fromiter(stamps.values(), dtype=np.int64, count=len(stamps))
    seconds = np.maximum(now_ms - values, 0) / 1000.0
    where = np.searchsorted(np.asarray(LATENCY_BUCKETS), seconds, side="left")
    counts = np.bincount(where, weights=weights, minlength=len(LATENCY_BUCKETS) + 1)
    return [int(n) for n in counts], float(np.dot(seconds, weights))


def add(into: dict[str, Tally], other: Mapping[str, Tally]) -> None:
    """Add tallies per output topic."""
    for topic, (counts, total) in other.items():
        mine = into.get(topic)
        if mine is None:
            into[topic] = (list(counts), float(total))
        else:
            into[topic] = ([a + b for a, b in zip(mine[0], counts, strict=True)], mine[1] + total)
