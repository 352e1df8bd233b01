"""A bucket's deltas: when one may follow its value, and how value and deltas make the bucket.

The bucket store's use of them (which calls append, which fold, what the cache keeps) is
tested in ``test_bucket_store.py``, on an in-memory state handle.
"""

from __future__ import annotations

import pickle

import pytest

from daemon.operator import state_compression
from daemon.operator.bucket_delta import MAX_DELTAS, MAX_SHARE, SMALL, Pending, delta_of, load
from daemon.operator.state_format import (
    Bucket,
    StashCounts,
    UnknownStateFormatError,
    encode_bucket,
)


def _entry(n: int) -> tuple[int, int, int, int, bytes]:
    return (n, n, n, n, pickle.dumps({"n": n}))


def _bucket(keys: int) -> Bucket:
    return Bucket({f"k{n}": _entry(n) for n in range(keys)}, {"k0": 500}, 400, StashCounts())


def _stored(bucket: Bucket) -> bytes:
    """The bucket's value as the store holds it, in the format written before deltas."""
    return state_compression.compress(encode_bucket(bucket))


def _delta(bucket: Bucket, pending: Pending) -> bytes:
    delta, _ = delta_of(bucket, pending)
    bucket.touched.clear()
    return delta


def test_a_delta_follows_while_the_deltas_stay_under_their_share_of_the_value() -> None:
    base = 100 * SMALL
    share = int(base * MAX_SHARE)
    pending = Pending(base)
    assert pending.admits(share)
    assert not pending.admits(share + 1)
    grown = pending.after(300)
    assert (grown.size, grown.count) == (300, 1)
    assert grown.admits(share - 300) and not grown.admits(share - 299)


def test_a_small_buckets_deltas_may_take_a_few_kilobytes_whatever_the_share() -> None:
    pending = Pending(100)  # far less than its deltas may take
    assert pending.admits(SMALL) and not pending.admits(SMALL + 1)
    assert pending.may_admit(1, 1)  # one key of one: still a delta
    assert pending.after(SMALL - 10).admits(10) and not pending.after(SMALL - 10).admits(11)


def test_no_delta_follows_past_the_count_or_without_a_value() -> None:
    full = Pending(10**9, 10, MAX_DELTAS)
    assert not full.admits(1) and not full.may_admit(1, 1_000)
    assert Pending(10**9, 10, MAX_DELTAS - 1).admits(1)
    assert not Pending(0).admits(1) and not Pending(0).may_admit(1, 1_000)


def test_a_delta_naming_most_keys_of_a_larger_bucket_is_not_worth_making() -> None:
    assert Pending(100 * SMALL).may_admit(5, 10)
    assert not Pending(100 * SMALL).may_admit(6, 10)


def test_an_old_value_without_deltas_loads_as_it_was_written() -> None:
    bucket = _bucket(5)
    loaded = load(_stored(bucket), [])
    assert loaded.bucket == bucket
    assert loaded.pending == Pending(len(encode_bucket(bucket)))


def test_deltas_over_an_old_value_change_the_keys_they_name_and_nothing_else() -> None:
    bucket = _bucket(5)
    value = _stored(bucket)
    pending = Pending(len(encode_bucket(bucket)))
    bucket.keys["k1"] = _entry(101)
    bucket.touch("k1")
    bucket.keys["new"] = _entry(7)
    bucket.due["new"] = 900
    bucket.touch("new")
    bucket.timer_ms = 300
    bucket.stash = StashCounts(4, 3, 2, 1)
    first = _delta(bucket, pending)

    loaded = load(value, [first])

    assert loaded.bucket == bucket
    assert loaded.pending.count == 1 and loaded.pending.size > 0


def test_a_removed_key_goes_with_its_due_time() -> None:
    bucket = _bucket(5)
    value = _stored(bucket)
    del bucket.keys["k0"], bucket.due["k0"]
    bucket.touch("k0")

    loaded = load(value, [_delta(bucket, Pending(len(encode_bucket(bucket))))])

    assert "k0" not in loaded.bucket.keys and loaded.bucket.due == {}
    assert set(loaded.bucket.keys) == {"k1", "k2", "k3", "k4"}


def test_deltas_apply_in_the_order_written_however_they_come() -> None:
    """The state reader collects a bucket's deltas through a Spark shuffle, which keeps no
    order: each delta carries its sequence number."""
    bucket = _bucket(3)
    value = _stored(bucket)
    pending = Pending(len(encode_bucket(bucket)))
    written = []
    for n in range(4):
        bucket.keys["k1"] = _entry(200 + n)
        bucket.touch("k1")
        if n == 2:
            del bucket.keys["k2"]
            bucket.touch("k2")
        if n == 3:
            bucket.keys["k2"] = _entry(300)
            bucket.touch("k2")
        written.append(_delta(bucket, pending))
        pending = pending.after(1)

    assert load(value, written).bucket == bucket
    assert load(value, list(reversed(written))).bucket == bucket
    assert load(value, written[:3]).bucket.keys["k1"] == _entry(202)
    assert "k2" not in load(value, written[:3]).bucket.keys


def test_a_delta_of_an_unknown_format_is_refused_with_one_line() -> None:
    newer = pickle.dumps({"format": 99, "delta": 0, "keys": {}}, protocol=5)
    with pytest.raises(UnknownStateFormatError, match="bucket delta in state format 99"):
        load(_stored(_bucket(1)), [state_compression.compress(newer)])

