"""The long batches' leases: grouping keys that Spark's shuffle keeps apart."""

from __future__ import annotations

from daemon.continuous.lease_source import LongBatches
from daemon.model.record_route import _spark_hash_int


def test_each_lease_lands_in_a_shuffle_partition_of_its_own() -> None:
    for partitions in (2, 3, 4, 8):
        labels = LongBatches(leases=partitions).labels(partitions)
        assert sorted(_spark_hash_int(label) % partitions for label in labels) == list(
            range(partitions)
        )
