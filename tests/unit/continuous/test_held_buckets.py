"""A long batch's held buckets: a bucket it has not loaded is due by the timer the last long
batch left it, and the timers it leaves the next one; what they hold is counted as they are
loaded and changed."""

from __future__ import annotations

from daemon.continuous.held_buckets import HeldBuckets, frozen
from daemon.continuous.lease_processor import Stopped
from daemon.operator.bucket_cache import DECODED_FACTOR
from daemon.operator.stash_log import MemoryChunks
from daemon.operator.state_format import Bucket, encode_bucket, entry_bytes
from daemon.plugin.stash import Stash


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


def test_a_loaded_bucket_counts_its_decoded_keys_and_its_stash_chunks_once() -> None:
    stored = Bucket(keys={f"k{i}": (0, 0, 0, 0, b"s" * i) for i in range(50)})
    chunks = MemoryChunks([(b"c" * 300,), (b"c" * 200,)])
    buckets = HeldBuckets(lambda key: frozen(stored, chunks) if key == (3,) else None)
    assert buckets.held_bytes == 0
    buckets.load((3,))
    buckets.load((3,))  # held: not loaded, nor counted, again
    buckets.load((5,))  # nothing stored: an empty bucket
    assert buckets.held_bytes == DECODED_FACTOR * len(encode_bucket(stored)) + 500


def test_what_a_call_grew_or_shrank_a_bucket_by_is_counted_when_it_is_saved() -> None:
    buckets = HeldBuckets(lambda key: None)
    bucket, log, stored = buckets.load((3,))
    # A stashed value, appended to the log as a chunk when the bucket is saved.
    entry = (0, 0, 0, 0, log.dumps({"tweets": Stash([(1, "hi" * 100)])}))
    bucket.keys["k"] = entry
    bucket.grown += entry_bytes("k", entry)  # as the engine core adds it
    buckets.save((3,), bucket, log, stored)
    (chunk,) = [chunk for (chunk,) in buckets._held[(3,)][1].items]
    assert buckets.held_bytes == DECODED_FACTOR * entry_bytes("k", entry) + len(chunk)
    assert bucket.grown == 0  # counted: the next save adds only what changes after
    bucket, log, stored = buckets.load((3,))  # a call that changes nothing
    buckets.save((3,), bucket, log, stored)
    assert buckets.held_bytes == DECODED_FACTOR * entry_bytes("k", entry) + len(chunk)
    bucket, log, stored = buckets.load((3,))
    del bucket.keys["k"]
    bucket.grown -= entry_bytes("k", entry)
    buckets.save((3,), bucket, log, stored)  # no key left: the log is cleared too
    assert buckets.held_bytes == 0
