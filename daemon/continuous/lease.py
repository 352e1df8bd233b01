"""What one task of a long batch reads, and where it stopped."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from daemon.model.record_route import bucket_labels
from daemon.model.wire import split_range_name


@dataclass(frozen=True)
class Lease:
    """One task's share of a long batch: partitions from offsets, until a time.

    Attributes:
        batch: the long batch (Spark's batch id).
        task: the lease's number: its transactional id and marker group are the task's.
        starts: where each partition is read from, by name (``"tweets/0"``).
        until_ms: the wall-clock time after which the long batch reads nothing new.
        commit_interval_ms: how often the task commits what it joined.
        stopping: a file whose presence ends the long batch early (empty: none).
        index: the lease's place among the pipeline's leases: it joins the state buckets
            whose place is ``index`` modulo ``of`` (:meth:`owns`).
        of: how many leases the pipeline has; each reads every input partition.
        held_state_budget: the bytes of state the task may hold before it ends the long
            batch early (0: no budget).
    """

    batch: int
    task: int
    starts: dict[str, int]
    until_ms: int
    commit_interval_ms: int = 100
    stopping: str = ""
    index: int = 0
    of: int = 1
    held_state_budget: int = 0

    def owns(self, buckets: int) -> frozenset[int]:
        """The labels of the state buckets (of ``buckets``) this lease joins."""
        labels = bucket_labels(buckets)
        return frozenset(label for i, label in enumerate(labels) if i % self.of == self.index)

    def stopped(self) -> bool:
        """Whether the long batch is asked to end now (``daemon run`` stops)."""
        return asked_to_stop(self.stopping)

    def over_budget(self, held_bytes: int) -> bool:
        """Whether holding ``held_bytes`` of state passes the budget."""
        return 0 < self.held_state_budget < held_bytes


def asked_to_stop(stopping: str) -> bool:
    """Whether the file ``stopping`` asks the long batches to end (empty: none asks)."""
    return bool(stopping) and os.path.exists(stopping)


@dataclass
class Positions:
    """Where a lease's partitions are read up to: what the last sub-batch committed covers."""

    at: dict[str, int] = field(default_factory=dict)

    def ranges(self, reached: dict[str, int]) -> dict[str, tuple[int, int]]:
        """The ranges from here to ``reached`` of the partitions that moved."""
        return {name: (self.at[name], end) for name, end in reached.items() if end > self.at[name]}

    def cover(self, ranges: set[str]) -> None:
        """Move past ranges a sub-batch committed (:func:`~daemon.model.wire.range_name`)."""
        for name in ranges:
            partition, _, end = split_range_name(name)
            self.at[partition] = max(self.at.get(partition, end), end)
