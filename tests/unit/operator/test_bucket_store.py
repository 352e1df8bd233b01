"""How the operator keeps a bucket: written back only when a call changed it, compressed, as
a delta of the keys that changed, its timer moved only to an earlier time, and a copy kept
decoded in the worker between calls.

The processor runs on an in-memory stand-in for its state handle (``processor_calls.py``),
which counts the writes and the timer calls.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from daemon.model.wire import OutputRow
from daemon.operator import bucket_delta, bucket_store, state_compression
from daemon.operator.bucket_cache import BucketCache
from daemon.operator.state_format import decode_bucket, encode_bucket
from daemon.plugin.joiner import JoinerContext, JoinerOptions
from tests.unit.operator.processor_calls import (
    BUCKET,
    INPUTS,
    NOW,
    Clock,
    Handle,
    Regions,
    call,
    click,
    codec,
    event,
    lookup_plan,
    plan_of,
    processor_on,
    region_of,
    region_update,
    stored_bucket,
    window_plan,
)


def test_stream_records_that_only_read_the_table_write_no_state() -> None:
    processor, state = processor_on()
    assert call(processor, [region_update("ada", "north", 1)]) == []
    assert state.writes == 1
    stored = state.value

    enriched = call(processor, [click("ada", 2), click("bob", 3), click("ada", 4)])

    assert [OutputRow._make(row).topic for row in enriched] == ["out"] * 3  # each click joined
    assert state.writes == 1 and state.value == stored  # the bucket was left as it was


def test_a_call_that_changes_no_key_does_not_encode_the_bucket(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    encoded: list[int] = []

    def counted(bucket: Any) -> bytes:
        encoded.append(len(bucket.keys))
        return encode_bucket(bucket)

    monkeypatch.setattr(bucket_store, "encode_bucket", counted)
    # Deltas off: a call that changes a key then encodes the bucket, which is counted.
    processor, state = processor_on(replace(lookup_plan(), state_deltas=False))
    call(processor, [region_update(f"user{n}", "north", 1) for n in range(100)])
    assert encoded == [100]

    call(processor, [click("user1", 2), click("user7", 3), click("nobody", 4)])
    assert encoded == [100]  # not encoded only to learn it had not changed
    call(processor, [click("user1", 5), region_update("user7", "south", 6)])
    assert encoded == [100, 100] and state.writes == 2


def test_a_table_update_is_written() -> None:
    processor, state = processor_on()
    call(processor, [region_update("ada", "north", 1)])

    call(processor, [click("ada", 2), region_update("ada", "south", 3)])
    deltas = processor.handle.lists["bucket_delta"]  # type: ignore[attr-defined]
    assert state.writes + deltas.writes == 2  # the bucket whole, or a delta

    # The stored bucket has the new value: a later click sees it.
    (row,) = call(processor, [click("ada", 4)])
    assert codec("enriched_click").decode(OutputRow._make(row).value)["region"] == {
        "user": "ada",
        "region": "south",
    }


def test_a_bucket_is_stored_compressed() -> None:
    processor, state = processor_on()
    call(processor, [region_update(f"user{n}", "north", n) for n in range(50)])

    assert state.value is not None
    (blob,) = state.value
    pickled = state_compression.decompress(blob)
    assert len(blob) < len(pickled) / 3  # fifty keys' pickles say much the same
    assert set(decode_bucket(pickled).keys) == {f"user{n}" for n in range(50)}


def test_the_timer_is_not_moved_later_when_touched_keys_are_due_later() -> None:
    processor, _ = processor_on(window_plan())
    timers = processor.handle.timers  # type: ignore[attr-defined]
    call(processor, [event(0, 1, 1), event(0, 2, 1)])
    assert timers == [("register", NOW + 60_000)]  # idle_timeout after the keys' records

    call(processor, [event(1, 1, 2)], now=NOW + 5_000)  # key 1 is due later now; key 2 not
    call(processor, [event(1, 2, 3)], now=NOW + 9_000)  # and now every key is
    assert timers == [("register", NOW + 60_000)]  # two calls to the JVM saved, twice


def test_a_timer_that_fires_before_any_key_is_due_is_set_again_at_the_earliest() -> None:
    processor, state = processor_on(window_plan())
    timers = processor.handle.timers  # type: ignore[attr-defined]
    call(processor, [event(0, 1, 1)])
    call(processor, [event(0, 1, 2)], now=NOW + 5_000)

    sent: list[tuple[Any, ...]] = []
    processor._wake_up(BUCKET, Clock(NOW + 60_000), sent.append)  # the first timer fires

    assert sent == []  # nothing was due: the key's record came 55 s ago
    assert timers == [("register", NOW + 60_000), ("register", NOW + 65_000)]
    assert state.value is not None  # and the stored bucket knows which timer is set
    assert stored_bucket(processor.handle).timer_ms == NOW + 65_000  # type: ignore[arg-type]


def test_a_key_due_earlier_than_the_timer_moves_it_earlier() -> None:
    processor, _ = processor_on(window_plan())
    timers = processor.handle.timers  # type: ignore[attr-defined]
    call(processor, [event(0, 1, 1)])
    processor.plan.joiner.idle_timeout = 10_000  # type: ignore[attr-defined] # as a joiner
    call(processor, [event(0, 2, 1)], now=NOW + 1_000)  # whose wake-ups differ by key

    assert timers == [
        ("register", NOW + 60_000),
        ("delete", NOW + 60_000),
        ("register", NOW + 11_000),
    ]


# The worker cache (daemon.operator.bucket_cache): the processors below share this process's
# cache, as the tasks of one Python worker do; the handle stands for Spark's state store.


def _bucket_reads(handle: Handle) -> int:
    return handle.state.reads


def test_a_cached_bucket_is_used_while_the_store_holds_its_stamp() -> None:
    handle = Handle()
    processor, _ = processor_on(handle=handle)
    call(processor, [region_update("ada", "north", 1)])
    reads = _bucket_reads(handle)

    (row,) = call(processor, [click("ada", 2)])
    (again,) = call(processor, [click("ada", 3)])

    assert region_of(row) == region_of(again) == {"user": "ada", "region": "north"}
    assert _bucket_reads(handle) == reads  # the bucket did not cross from the store again
    assert handle.values["bucket_stamp"].value is not None


def test_loads_are_counted_as_hits_and_misses_of_the_worker_cache() -> None:
    """A bucket the store has no stamp for (none stored yet) is not a load the cache could
    have saved; one whose stamp the worker's copy holds is a hit, any other a miss."""
    handle = Handle()
    processor, _ = processor_on(handle=handle)
    call(processor, [region_update("ada", "north", 1)])
    assert processor.buckets.loads == {}
    call(processor, [click("ada", 2)])
    call(processor, [click("ada", 3)])
    assert processor.buckets.loads == {"hit": 2}
    handle.values["bucket_stamp"].value = (7,)  # another worker's write
    call(processor, [click("ada", 4)])
    assert processor.buckets.loads == {"hit": 2, "miss": 1}


def test_a_bucket_another_worker_wrote_is_loaded_from_the_store() -> None:
    ours, theirs = Handle(), Handle()
    processor, _ = processor_on(handle=ours)
    call(processor, [region_update("ada", "north", 1)])
    # Another worker's task wrote the bucket (its own cache, the same store): what the
    # store then holds is a bucket and a stamp this worker's entry does not have.
    other, _ = processor_on(handle=theirs)
    other.buckets._cache = BucketCache(1 << 30)  # the other worker's
    call(other, [region_update("ada", "south", 2)])
    for name, state in theirs.values.items():
        ours.values[name].value = state.value
    for name, items in theirs.lists.items():
        ours.lists[name].items = list(items.items)
    ours.values["state_bucket"].reads = 0

    (row,) = call(processor, [click("ada", 3)])

    assert region_of(row) == {"user": "ada", "region": "south"}
    assert _bucket_reads(ours) == 1


def test_a_write_spark_does_not_commit_leaves_no_cached_bucket_ahead_of_the_store() -> None:
    """The task writes the bucket, puts it back into the cache, and fails before Spark
    commits its state: the store goes back to the committed value and stamp, which the
    cached entry (with the new stamp) no longer matches."""
    handle = Handle()
    processor, _ = processor_on(handle=handle)
    call(processor, [region_update("ada", "north", 1)])
    committed = {name: state.value for name, state in handle.values.items()}
    listed = {name: list(state.items) for name, state in handle.lists.items()}

    call(processor, [region_update("ada", "south", 2)])
    for name, value in committed.items():  # the task failed: its state is not committed
        handle.values[name].value = value
    for name, items in listed.items():
        handle.lists[name].items = items
    (row,) = call(processor, [click("ada", 3)])  # the retry

    assert region_of(row) == {"user": "ada", "region": "north"}


def test_a_call_that_fails_half_way_leaves_no_cached_bucket() -> None:
    handle = Handle()
    processor, _ = processor_on(handle=handle)
    call(processor, [region_update("ada", "north", 1)])
    apply = processor.core.apply

    def half_way(bucket: Any, *args: Any) -> None:
        bucket.keys.clear()  # the engine changes the bucket in place ...
        raise RuntimeError("the task dies here")  # ... and the call fails before its write

    processor.core.apply = half_way  # type: ignore[method-assign]
    with pytest.raises(RuntimeError):
        call(processor, [region_update("ada", "south", 2)])
    processor.core.apply = apply  # type: ignore[method-assign]
    (row,) = call(processor, [click("ada", 3)])

    assert region_of(row) == {"user": "ada", "region": "north"}


def test_with_the_cache_off_every_call_loads_and_no_stamp_is_written() -> None:
    handle = Handle()
    processor, _ = processor_on(replace(lookup_plan(), state_cache=False), handle)
    call(processor, [region_update("ada", "north", 1)])
    call(processor, [click("ada", 2)])
    call(processor, [click("ada", 3)])

    assert _bucket_reads(handle) == 3
    assert handle.values["bucket_stamp"].value is None


def test_the_cache_on_and_off_give_the_same_outputs_and_stored_bucket() -> None:
    calls = [
        [region_update(f"u{n}", f"r{n}", n) for n in range(20)],
        [click("u3", 30), region_update("u3", "east", 31), click("u3", 32), click("zed", 33)],
        [region_update("u4", "", 40), click("u4", 41), click("u5", 42)],
        [click(f"u{n}", 50 + n) for n in range(20)],
    ]
    results = {}
    for cache in (True, False):
        handle = Handle()
        processor, _ = processor_on(replace(lookup_plan(), state_cache=cache), handle)
        outputs = [call(processor, records) for records in calls]
        assert handle.state.value is not None
        results[cache] = outputs, stored_bucket(handle)

    assert results[True] == results[False]


# Deltas (daemon.operator.bucket_delta): a call that changes a few keys of a bucket appends
# them instead of writing the bucket whole.


def _table(users: range, region: str, at: int) -> list[dict[str, Any]]:
    return [region_update(f"u{n}", region, at) for n in users]


def test_a_call_that_changes_a_few_keys_appends_a_delta_and_leaves_the_value() -> None:
    handle = Handle()
    processor, state = processor_on(handle=handle)
    call(processor, _table(range(100), "north", 1))
    value = state.value

    call(processor, [region_update("u7", "south", 2), click("u8", 3)])

    assert state.value == value and state.writes == 1  # the value was not written again
    (delta,) = handle.lists["bucket_delta"].items
    plain = state_compression.decompress
    assert len(plain(delta[0])) < len(plain(value[0])) / 10  # type: ignore[index]
    stored = stored_bucket(handle)
    assert len(stored.keys) == 100
    assert processor.plan.joiner.initial_state() != stored.keys["u7"]
    uncached, _ = processor_on(replace(lookup_plan(), state_cache=False), handle)
    (row,) = call(uncached, [click("u7", 4)])
    assert region_of(row) == {"user": "u7", "region": "south"}  # read from value and delta


def test_deltas_past_their_share_of_the_value_are_folded_into_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(bucket_delta, "MAX_DELTAS", 1_000)  # the share, not the count
    monkeypatch.setattr(bucket_delta, "SMALL", 0)  # nor the small bucket's allowance
    handle = Handle()
    processor, state = processor_on(handle=handle)
    call(processor, _table(range(40), "north", 1))
    deltas = handle.lists["bucket_delta"]
    sizes = []
    for n in range(40):  # one key a call, each a delta, until they pass half the value
        call(processor, [region_update(f"u{n}", f"r{n}", 10 + n)])
        sizes.append(len(deltas.items))
        if state.writes > 1:
            break
    assert state.writes == 2, "the deltas were never folded"
    assert deltas.items == [] and sizes[-1] == 0 and max(sizes) > 3
    folded = stored_bucket(handle)
    assert [folded.keys[f"u{n}"] for n in range(len(sizes))] == [
        decode_bucket(state_compression.decompress(state.value[0])).keys[f"u{n}"]  # type: ignore[index]
        for n in range(len(sizes))
    ]


def test_a_delta_count_cap_folds_even_small_deltas(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bucket_delta, "MAX_DELTAS", 3)
    monkeypatch.setattr(bucket_delta, "MAX_SHARE", 100.0)  # the count, not the share
    handle = Handle()
    processor, state = processor_on(handle=handle)
    call(processor, _table(range(200), "north", 1))
    for n in range(4):
        call(processor, [region_update(f"u{n}", "south", 10 + n)])
    assert state.writes == 2 and handle.lists["bucket_delta"].items == []


def test_a_call_that_changes_most_keys_writes_the_value_whole_at_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(bucket_delta, "SMALL", 0)  # as in a bucket of many more keys
    handle = Handle()
    processor, state = processor_on(handle=handle)
    call(processor, _table(range(10), "north", 1))
    call(processor, _table(range(8), "south", 2))
    assert state.writes == 2 and handle.lists["bucket_delta"].writes == 0


def test_a_key_removed_by_a_delta_is_gone_for_a_load_from_the_store() -> None:
    context = JoinerContext(pipeline="p", fields={"stream": "click", "table": "region"})
    joiner = Regions(JoinerOptions(), context)
    plan = plan_of(joiner, {"stream": "click", "table": "user_region"}, "enriched_click", INPUTS)
    handle = Handle()
    processor, state = processor_on(plan, handle)
    call(processor, _table(range(20), "north", 1))

    call(processor, [region_update("u3", "", 2)])  # u3's state is a new key's: dropped

    assert state.writes == 1 and len(handle.lists["bucket_delta"].items) == 1
    assert "u3" not in stored_bucket(handle).keys and len(stored_bucket(handle).keys) == 19


def test_every_write_delta_or_whole_renews_the_stamp() -> None:
    handle = Handle()
    processor, _ = processor_on(handle=handle)
    call(processor, _table(range(50), "north", 1))
    stamps = [handle.values["bucket_stamp"].value]
    call(processor, [region_update("u1", "south", 2)])  # a delta
    stamps.append(handle.values["bucket_stamp"].value)
    call(processor, [click("u1", 3)])  # nothing written
    stamps.append(handle.values["bucket_stamp"].value)
    assert stamps[0] != stamps[1] == stamps[2]


def test_a_cached_bucket_is_not_used_once_another_worker_appended_a_delta() -> None:
    handle = Handle()
    processor, _ = processor_on(handle=handle)
    call(processor, _table(range(50), "north", 1))
    other, _ = processor_on(handle=handle)
    other.buckets._cache = BucketCache(1 << 30)  # the other worker's, which loads from the store
    call(other, [region_update("u1", "south", 2)])  # appends a delta with a new stamp

    (row,) = call(processor, [click("u1", 3)])

    assert region_of(row) == {"user": "u1", "region": "south"}


def test_deltas_switched_off_fold_what_is_pending_at_the_next_write() -> None:
    handle = Handle()
    processor, state = processor_on(handle=handle)
    call(processor, _table(range(50), "north", 1))
    call(processor, [region_update("u1", "south", 2)])
    assert len(handle.lists["bucket_delta"].items) == 1

    off, _ = processor_on(replace(lookup_plan(), state_deltas=False), handle)
    call(off, [region_update("u2", "east", 3)])

    assert handle.lists["bucket_delta"].items == [] and state.writes == 2
    whole = decode_bucket(state_compression.decompress(state.value[0]))  # type: ignore[index]
    assert whole == stored_bucket(handle)
    (row,) = call(off, [click("u1", 4)])
    assert region_of(row) == {"user": "u1", "region": "south"}


def test_deltas_on_and_off_give_the_same_outputs_and_stored_bucket() -> None:
    calls = [
        _table(range(60), "north", 1),
        *([click(f"u{n}", 10 + n), region_update(f"u{n}", f"r{n}", 11 + n)] for n in range(30)),
        [click(f"u{n}", 100 + n) for n in range(60)],
    ]
    results = {}
    for deltas in (True, False):
        handle = Handle()
        processor, _ = processor_on(replace(lookup_plan(), state_deltas=deltas), handle)
        outputs = [call(processor, records) for records in calls]
        results[deltas] = outputs, stored_bucket(handle)
    assert results[True] == results[False]


def test_a_bucket_of_one_key_takes_deltas_too() -> None:
    """A small bucket's deltas may take a few kilobytes (``bucket_delta.SMALL``): so a
    pipeline of few keys writes deltas as a large one does, rather than fold every time."""
    handle = Handle()
    processor, state = processor_on(handle=handle)
    call(processor, [region_update("ada", "north", 1)])
    for n in range(3):
        call(processor, [region_update("ada", f"r{n}", 2 + n)])
    assert state.writes == 1 and len(handle.lists["bucket_delta"].items) == 3
    uncached, _ = processor_on(replace(lookup_plan(), state_cache=False), handle)
    (row,) = call(uncached, [click("ada", 9)])
    assert region_of(row) == {"user": "ada", "region": "r2"}
