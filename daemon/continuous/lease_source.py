"""The Spark source of a continuous pipeline: one row per lease per long batch.

Each plan is a long batch: its number and the time after which it takes no new records,
which Spark writes to its offset log, so that a long batch it runs again after a crash ends
when the first try was to end. The rows name the leases; what each reads is its own state
(:mod:`daemon.continuous.lease_processor`), not the plan's. The one exception is a
bootstrap's ends: the checkpoint's first long batch carries them in its plan, so that a run
of it again after a crash bootstraps to the same ends.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition

from daemon.continuous.lease import asked_to_stop
from daemon.model.record_route import bucket_labels
from daemon.model.wire import BOOTSTRAP

LEASE_DDL = "lease int, until long, bootstrap string"
"""A lease row: the lease (an ``int``, which Spark hashes as the grouping key expects), the
time its long batch stops taking records, in milliseconds, and the bootstrap's ends (JSON
``{partition name: end}``, ``{}`` but in the checkpoint's first long batch)."""


@dataclass(frozen=True)
class LongBatches:
    """How a continuous pipeline's long batches are cut (the source's ``spec`` option)."""

    leases: int = 1
    """How many tasks share the pipeline's state buckets, each holding a task slot."""
    long_batch_ms: int = 120_000
    commit_interval_ms: int = 100
    stopping: str = ""
    """A file that asks the long batch running to end and no other to start, while it is
    there (``daemon run`` stopping); empty: none."""
    held_state_budget: int = 0
    """The bytes of state a lease may hold before its long batch ends early (0: no budget)."""
    bootstrap: dict[str, int] = field(default_factory=dict)
    """Where the bootstrapped inputs' partitions ended when the query started (``{}``: none
    bootstraps): the checkpoint's first long batch reads them to there before anything else."""

    def stopped(self) -> bool:
        """Whether the long batches are asked to stop (:attr:`stopping` is there)."""
        return asked_to_stop(self.stopping)

    def labels(self, partitions: int) -> tuple[int, ...]:
        """Each lease's grouping key, in lease order.

        Chosen as a state bucket's label is, so that Spark's shuffle into ``partitions`` puts
        each lease in a partition of its own: two leases in one task would run one long
        batch after the other.
        """
        return bucket_labels(self.leases, spread=max(partitions, self.leases))

    def owners(self, partitions: int, buckets: int) -> dict[int, int]:
        """The grouping key of each bucket's lease, by bucket label (as ``Lease.owns`` deals)."""
        labels = self.labels(partitions)
        return {bucket: labels[i % self.leases] for i, bucket in enumerate(bucket_labels(buckets))}

    def encode(self) -> str:
        """The option's text."""
        return json.dumps(self.__dict__)

    @staticmethod
    def decode(text: str) -> LongBatches:
        """The option's text back."""
        return LongBatches(**json.loads(text))


@dataclass(frozen=True)
class LongBatchPartition(InputPartition):
    """The one read task of a long batch: its rows."""

    until: int
    labels: tuple[int, ...]
    bootstrap: str


class LeaseReader(DataSourceStreamReader):
    """Plans a long batch after another (see the module docstring)."""

    def __init__(self, batches: LongBatches, shuffle_partitions: int) -> None:
        self.batches = batches
        self.shuffle_partitions = shuffle_partitions

    def initialOffset(self) -> dict[str, int]:  # noqa: N802 - Spark's name
        """Before the first long batch."""
        return {"long_batch": 0, "until": 0}

    def latestOffset(self, start: dict[str, Any], limit: Any) -> dict[str, Any]:  # noqa: N802
        """The next long batch, until its length from now; none while stopping.

        The checkpoint's first long batch also carries the bootstrap's ends, if any.
        """
        if self.batches.stopped():
            return start
        now = time.time_ns() // 1_000_000
        batch = int(start["long_batch"]) + 1
        end: dict[str, Any] = {"long_batch": batch, "until": now + self.batches.long_batch_ms}
        if batch == 1 and self.batches.bootstrap:
            end[BOOTSTRAP] = dict(self.batches.bootstrap)
        return end

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[InputPartition]:
        """One task makes the long batch's rows."""
        labels = self.batches.labels(self.shuffle_partitions)
        bootstrap = json.dumps(end.get(BOOTSTRAP, {}), sort_keys=True)
        return [LongBatchPartition(int(end["until"]), labels, bootstrap)]

    def read(self, partition: InputPartition) -> Iterator[tuple[int, int, str]]:
        """A row per lease."""
        assert isinstance(partition, LongBatchPartition)  # noqa: S101 - ours
        for label in partition.labels:
            yield (label, partition.until, partition.bootstrap)


class LeaseSource(DataSource):
    """``enrichd-leases``: a continuous pipeline's long batches (see the module docstring)."""

    @classmethod
    def name(cls) -> str:
        """The format's name."""
        return "enrichd-leases"

    def schema(self) -> str:
        """A lease row."""
        return LEASE_DDL

    def streamReader(self, schema: Any) -> DataSourceStreamReader:  # noqa: N802 - Spark's name
        """The planner of long batches."""
        partitions = int(self.options["partitions"])
        return LeaseReader(LongBatches.decode(self.options["spec"]), partitions)
