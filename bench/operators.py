"""The stateful operators of a micro-batch, from its progress report's ``stateOperators``.

A chain of tables runs one stateful operator per table in one query, each behind a shuffle by
its own key: what each costs is what sets a chain's rate against one table's. Spark lists a
query's stateful operators as it finds them walking the plan from the sink, so the last
stage comes first; :func:`operators_of` gives them in the query's own order, source first.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Operator:
    """One stateful operator's figures in one micro-batch."""

    updates_ms: int
    """``allUpdatesTimeMs``: the time its tasks spent applying the batch's rows, summed."""
    commit_ms: int
    """``commitTimeMs``: the time its tasks spent committing their state stores, summed."""
    state_bytes: int
    """Its state stores' RocksDB files (``customMetrics.rocksdbSstFileSize``)."""
    partitions: int
    """``numShufflePartitions``: the partitions of the shuffle in front of it."""


def operators_of(report: Any) -> tuple[Operator, ...]:
    """The stateful operators of the progress ``report``, source first."""
    found = []
    for op in report.stateOperators:
        custom = dict(op.customMetrics or {})
        found.append(
            Operator(
                op.allUpdatesTimeMs,
                op.commitTimeMs,
                int(custom.get("rocksdbSstFileSize", 0)),
                op.numShufflePartitions,
            )
        )
    return tuple(reversed(found))


def mean_operators(batches: Sequence[Sequence[Operator]]) -> list[Operator]:
    """Each operator's mean figures over ``batches`` (their operators, all alike); its state
    as in the last batch."""
    if not batches or not batches[0]:
        return []
    count = len(batches)
    return [
        Operator(
            round(sum(b[i].updates_ms for b in batches) / count),
            round(sum(b[i].commit_ms for b in batches) / count),
            batches[-1][i].state_bytes,
            batches[-1][i].partitions,
        )
        for i in range(len(batches[0]))
    ]
