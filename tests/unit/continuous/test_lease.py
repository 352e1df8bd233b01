"""A lease's share of the state buckets: every bucket joined by exactly one lease."""

from __future__ import annotations

from daemon.continuous.lease import Lease
from daemon.model.record_route import bucket_labels


def test_the_leases_share_the_buckets_between_them_once_each() -> None:
    shares = [Lease(0, i, {}, 0, index=i, of=3).owns(32) for i in range(3)]
    assert sorted(label for share in shares for label in share) == sorted(bucket_labels(32))
    assert [len(share) for share in shares] == [11, 11, 10]
    assert Lease(0, 0, {}, 0).owns(32) == frozenset(bucket_labels(32))


def test_a_lease_is_over_its_budget_only_past_it_and_never_without_one() -> None:
    lease = Lease(0, 0, {}, 0, held_state_budget=1_000)
    assert not lease.over_budget(1_000)
    assert lease.over_budget(1_001)
    assert not Lease(0, 0, {}, 0).over_budget(1 << 40)
