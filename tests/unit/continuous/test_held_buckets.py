"""A long batch's held buckets: a bucket it has not loaded is due by the timer the last long
batch left it, and the timers it leaves the next one."""

from __future__ import annotations

from daemon.continuous.held_buckets import HeldBuckets, frozen
from daemon.continuous.lease_processor import Stopped
from daemon.operator.stash_log import MemoryChunks
from daemon.operator.state_format import Bucket


def _blob(due: int) -> bytes:
    bucket = Bucket(keys={"k": (0, 0, 0, 0, b"state")}, due={"k": due}, timer_ms=due)
    return frozen(bucket, MemoryChunks())


def test_a_bucket_not_loaded_is_due_by_its_timer_from_the_last_long_batch() -> None:
    buckets = HeldBuckets(lambda key: None, timers={3: 500, 7: 900})
    assert buckets.due(499) == []
    assert buckets.due(500) == [(3,)]
    assert buckets.due(1_000) == [(3,), (7,)]


def test_a_loaded_bucket_is_due_by_its_own_timer_not_the_stored_one() -> None:
    buckets = HeldBuckets(lambda key: _blob(800), timers={3: 500})
    bucket, log, stored = buckets.load((3,))
    assert bucket.timer_ms == 800
    assert buckets.due(600) == []
    assert buckets.due(800) == [(3,)]


def test_the_timers_left_are_the_loaded_buckets_and_those_never_loaded() -> None:
    buckets = HeldBuckets(lambda key: _blob(800), timers={3: 500, 7: 900})
    bucket, log, stored = buckets.load((3,))
    bucket.due["k"] = 1_200
    buckets.save((3,), bucket, log, stored)
    assert buckets.timers() == {3: 1_200, 7: 900}
    bucket.keys.clear()  # emptied: no timer left
    bucket.due.clear()
    buckets.save((3,), bucket, log, stored)
    assert buckets.timers() == {7: 900}


def test_where_a_lease_stopped_reads_back_and_reads_the_first_builds_ends() -> None:
    stopped = Stopped({"tweets/0": 12}, {3: 500})
    assert Stopped.read(stopped.text()) == stopped
    assert Stopped.read('{"tweets/0": 12}') == Stopped({"tweets/0": 12}, {})
    assert Stopped.read(None) == Stopped({}, {})
