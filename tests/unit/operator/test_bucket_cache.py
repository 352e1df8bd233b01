"""The worker cache of decoded buckets: stamps decide, a byte budget bounds it.

The bucket store's use of it (a retried task, another worker's write, a failed call) is in
``test_bucket_store.py``; the real path in ``tests/delivery/test_crash_recovery.py`` and
``tests/joins/test_micro_batches.py``.
"""

from __future__ import annotations

import pytest

from daemon.operator import bucket_cache
from daemon.operator.bucket_cache import BucketCache, CachedBucket, default_budget, new_stamp
from daemon.operator.state_format import Bucket


def _entry(stamp: int, size: int = 10) -> CachedBucket:
    return CachedBucket(Bucket(), b"blob", stamp, size)


def test_an_entry_is_taken_only_with_its_stamp() -> None:
    cache = BucketCache(100)
    entry = _entry(stamp=5)
    cache.put("b", entry)

    assert cache.take("b", 5) is entry


def test_taking_an_entry_removes_it_until_it_is_put_back() -> None:
    cache = BucketCache(100)
    cache.put("b", _entry(stamp=5))
    cache.take("b", 5)

    assert cache.take("b", 5) is None
    assert len(cache) == 0 and cache.size == 0


@pytest.mark.parametrize("stamp", [6, None])
def test_a_stamp_the_entry_does_not_have_drops_it(stamp: int | None) -> None:
    cache = BucketCache(100)
    cache.put("b", _entry(stamp=5))

    assert cache.take("b", stamp) is None
    assert cache.take("b", 5) is None  # gone, not kept for later
    assert cache.size == 0


def test_the_least_recently_used_entries_go_first_to_keep_within_the_budget() -> None:
    cache = BucketCache(30)
    for name in ("a", "b", "c"):
        cache.put(name, _entry(stamp=1))
    cache.put("a", cache.take("a", 1) or _entry(stamp=0))  # a used again: b is now oldest

    cache.put("d", _entry(stamp=1))

    assert cache.take("b", 1) is None
    assert [name for name in ("a", "c", "d") if cache.take(name, 1) is not None] == ["a", "c", "d"]


def test_a_bucket_larger_than_the_budget_is_not_kept_and_evicts_nothing() -> None:
    cache = BucketCache(30)
    cache.put("a", _entry(stamp=1))

    cache.put("huge", _entry(stamp=1, size=31))

    assert cache.take("huge", 1) is None
    assert cache.take("a", 1) is not None


def test_putting_a_key_again_replaces_its_entry_and_its_size() -> None:
    cache = BucketCache(100)
    cache.put("a", _entry(stamp=1, size=40))
    cache.put("a", _entry(stamp=2, size=20))

    assert cache.size == 20
    assert cache.take("a", 1) is None


def test_stamps_are_64_bit_signed_and_differ() -> None:
    stamps = {new_stamp() for _ in range(1000)}

    assert len(stamps) == 1000
    assert all(-(2**63) <= stamp < 2**63 for stamp in stamps)


def test_the_default_budget_is_a_quarter_of_the_pyspark_memory_when_spark_sets_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PYSPARK_EXECUTOR_MEMORY_MB", "2048")

    assert default_budget() == 512 * 2**20


def test_the_default_budget_without_a_pyspark_memory_is_a_share_of_the_machine(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("PYSPARK_EXECUTOR_MEMORY_MB", raising=False)
    pages = {"SC_PAGE_SIZE": 4096, "SC_PHYS_PAGES": 24 * 2**30 // 4096}
    monkeypatch.setattr(bucket_cache.os, "sysconf", pages.__getitem__)

    assert default_budget() == 24 * 2**30 // 128  # 192 MiB, under the 256 MiB cap

    pages["SC_PHYS_PAGES"] = 256 * 2**30 // 4096
    assert default_budget() == 256 * 2**20


def test_the_worker_cache_is_one_per_process_and_takes_the_latest_budget() -> None:
    first = bucket_cache.worker_cache(1000)
    second = bucket_cache.worker_cache(2000)

    assert first is second and second.budget == 2000
