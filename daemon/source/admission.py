"""Which records a micro-batch capped at ``max_records_per_batch`` admits: the earliest.

The planner (:mod:`daemon.source.planning`) reads the *heads* of the records a capped plan may
admit (:class:`Heads`: each record's timestamp, offset and whether it is an end-of-input
marker) and cuts each partition where :func:`admit_earliest` says, so that a capped
micro-batch is a prefix of the input in time order across partitions.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

import numpy as np

from daemon.model.wire import split_partition_name


@dataclass
class Heads:
    """What planning a capped batch needs of a partition's records ``[start, end)``.

    Each record's timestamp and offset, and whether it is an end-of-input marker, in offset
    order, as columns: planning reads them for hundreds of thousands of records per batch.
    """

    start: int
    end: int
    timestamps: list[int] = field(default_factory=list)
    offsets: list[int] = field(default_factory=list)
    markers: list[bool] = field(default_factory=list)

    def drop_before(self, first: int) -> None:
        """Forget the records before offset ``first``."""
        cut = bisect.bisect_left(self.offsets, first)
        del self.timestamps[:cut], self.offsets[:cut], self.markers[:cut]
        self.start = first

    def before(self, stop: int) -> Heads:
        """The records before offset ``stop``."""
        cut = bisect.bisect_left(self.offsets, stop)
        return Heads(
            self.start, stop, self.timestamps[:cut], self.offsets[:cut], self.markers[:cut]
        )


def admit_earliest(heads: dict[str, Heads], ranks: dict[str, int], budget: int) -> dict[str, int]:
    """Where a capped batch ends in each partition: its ``budget`` earliest records.

    Earliest in the order of a k-way merge that always takes the partition whose next record
    is smallest by (timestamp, rank, partition number, offset), so that each partition is
    admitted as a prefix of its own order. A record's rank is its input's (``ranks``: the
    joiner's role order); an end-of-input marker ranks after every input, so at a tied
    timestamp the end of input comes after the records of every input (docs/semantics.md).

    Such a merge takes a record only after every record before it in its partition: that is
    the order of each record's *running maximum* (timestamp, rank) in its partition, then
    partition and offset. So one sort finds the cut, much faster than a merge record by
    record in Python.

    End-of-input markers are not records to join: they ride along free, taken as they come
    up to the ``budget``-th record and right after it, so a cap spends no batch on them.

    Returns:
        The admitted end offset of each partition that admits any record.
    """
    names = sorted(
        (name for name in heads if heads[name].offsets),
        key=lambda n: (ranks[n], split_partition_name(n)),
    )
    if not names:
        return {}
    parts = [heads[name] for name in names]
    marker_rank = max(ranks.values()) + 1
    levels = marker_rank + 1
    # (timestamp, rank) as one number, so that a running maximum orders by both.
    keys = [
        np.maximum.accumulate(
            np.asarray(p.timestamps, dtype=np.int64) * levels
            + np.where(np.asarray(p.markers, dtype=bool), marker_rank, ranks[name])
        )
        for name, p in zip(names, parts, strict=True)
    ]
    times = np.concatenate(keys)
    offsets = np.concatenate([np.asarray(p.offsets, dtype=np.int64) for p in parts])
    markers = np.concatenate([np.asarray(p.markers, dtype=bool) for p in parts])
    which = np.repeat(np.arange(len(parts)), [len(p.offsets) for p in parts])
    order = np.lexsort((offsets, which, times))  # the last key sorts first
    is_marker = markers[order]
    records = np.cumsum(~is_marker)
    taken = int(np.searchsorted(records, budget))  # the budget-th record's place
    if taken < len(order):
        following = np.flatnonzero(~is_marker[taken + 1 :])  # markers right after it ride
        taken = taken + 1 + (int(following[0]) if following.size else len(order) - taken - 1)
    last = np.full(len(parts), -1, dtype=np.int64)
    np.maximum.at(last, which[order[:taken]], offsets[order[:taken]])
    return {name: int(end) + 1 for name, end in zip(names, last, strict=True) if end >= 0}
