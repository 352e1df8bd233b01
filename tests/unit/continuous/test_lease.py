"""A lease's share of the state buckets: every bucket joined by exactly one lease."""

from __future__ import annotations

from daemon.continuous.lease import Lease
from daemon.model.record_route import bucket_labels


def test_the_leases_share_the_buckets_between_them_once_each() -> None:
    shares = [Lease(0, i, {}, 0, index=i, of=3).owns(32) for i in range(3)]
    assert sorted(label for share in shares for label in share) == sorted(bucket_labels(32))
    assert [len(share) for share in shares] == [11, 11, 10]
    assert Lease(0, 0, {}, 0).owns(32) == frozenset(bucket_labels(32))
