"""How the operator keeps a bucket: written back only when a call changed it, compressed, and
its timer moved only to an earlier time.

The engine's path through Spark is covered by ``tests/joins/test_lookup.py`` and
``tests/joins/test_engine_time.py``; here the processor runs on an in-memory stand-in for its state
handle, which counts the writes and the timer calls.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import replace
from types import SimpleNamespace
from typing import Any

import pyarrow as pa
import pytest

from daemon.formats.avro.codec import AvroCodec, load_schema_file
from daemon.joiners.lookup import Lookup, LookupOptions
from daemon.joiners.window import Window, WindowOptions
from daemon.model.wire import INPUT, OutputRow, pack
from daemon.operator import bucket_delta, state_compression
from daemon.operator import processor as processor_module
from daemon.operator.bucket_cache import BucketCache
from daemon.operator.processor import JoinerProcessor
from daemon.operator.spec import OperatorPlan
from daemon.operator.state_format import EVENT_TIME, Bucket, decode_bucket, encode_bucket
from daemon.plugin.joiner import (
    DeadLetter,
    Emit,
    InputRecord,
    Joiner,
    JoinerContext,
    JoinerOptions,
)
from daemon.sink.spec import OutputSpec
from tests.kafka_helpers import SCHEMAS

INPUTS = (("stream", "clicks"), ("table", "regions"))
NOW = 1_700_000_000_000
BUCKET = (7,)
"""The grouping key of every call here: one bucket."""


class _State:
    """A value state that counts the reads and writes it is asked for."""

    def __init__(self) -> None:
        self.value: tuple[Any] | None = None
        self.writes = 0
        self.reads = 0

    def get(self) -> tuple[Any] | None:
        self.reads += 1
        return self.value

    def update(self, value: tuple[Any]) -> None:
        self.writes += 1
        self.value = value

    def clear(self) -> None:
        self.writes += 1
        self.value = None


class _List:
    """A list state that counts the calls it is asked for."""

    def __init__(self) -> None:
        self.items: list[tuple[Any]] = []
        self.writes = 0
        self.reads = 0

    def get(self) -> Iterator[tuple[Any]]:
        self.reads += 1
        return iter(list(self.items))

    def appendValue(self, value: tuple[Any]) -> None:  # noqa: N802
        self.writes += 1
        self.items.append(value)

    def clear(self) -> None:
        self.writes += 1
        self.items = []


class _Handle:
    def __init__(self) -> None:
        self.values: dict[str, _State] = {}
        """Each value state by name (the bucket, its stamp)."""
        self.lists: dict[str, _List] = {}
        """Each list state by name (the bucket's deltas)."""
        self.timers: list[tuple[str, int]] = []
        """The timer calls, in order: ("register" or "delete", time)."""

    @property
    def state(self) -> _State:
        return self.values.setdefault("state_bucket", _State())

    def getValueState(self, name: str, schema: Any) -> _State:  # noqa: N802
        return self.values.setdefault(name, _State())

    def getListState(self, name: str, schema: Any) -> _List | None:  # noqa: N802
        if name == "stash_chunks":
            return None  # neither lookup nor window stashes anything
        return self.lists.setdefault(name, _List())

    def registerTimer(self, at: int) -> None:  # noqa: N802
        self.timers.append(("register", at))

    def deleteTimer(self, at: int) -> None:  # noqa: N802
        self.timers.append(("delete", at))


class _Clock:
    def __init__(self, now: int = NOW) -> None:
        self.now = now

    def getCurrentProcessingTimeInMs(self) -> int:  # noqa: N802
        return self.now


def _codec(name: str) -> AvroCodec:
    return AvroCodec(load_schema_file(SCHEMAS / f"{name}.avsc"))


def _plan(joiner: Any, codecs: dict[str, str], output: str, inputs: Any) -> OperatorPlan:
    return OperatorPlan(
        joiner=joiner,
        codecs={role: _codec(schema) for role, schema in codecs.items()},
        output_codec=_codec(output),
        output_topic="out",
        dead_letter_topic="out.dlq",
        plugin="enrichd",
        inputs=inputs,
    )


def _lookup() -> OperatorPlan:
    context = JoinerContext(pipeline="p", fields={"stream": "click", "table": "region"})
    joiner = Lookup(LookupOptions(mode="left"), context)
    codecs = {"stream": "click", "table": "user_region"}
    return _plan(joiner, codecs, "enriched_click", INPUTS)


def _window() -> OperatorPlan:
    context = JoinerContext(pipeline="p", fields={"left": "left", "right": "right"})
    joiner = Window(WindowOptions(window=10_000, idle_timeout=60_000), context)
    codecs = {"left": "left_event", "right": "right_event"}
    return _plan(joiner, codecs, "joined_pair", (("left", "lefts"), ("right", "rights")))


def _stored_bucket(handle: _Handle) -> Bucket:
    """The bucket the store holds: its value with its deltas applied."""
    value = handle.state.value
    deltas = handle.lists.get("bucket_delta", _List()).items
    return bucket_delta.load(value[0] if value else None, [d for (d,) in deltas]).bucket


def _processor(
    plan: OperatorPlan | None = None, handle: _Handle | None = None
) -> tuple[JoinerProcessor, _State]:
    processor = JoinerProcessor(plan or _lookup(), OutputSpec("p", {}, "exactly_once", "out"))
    handle = handle or _Handle()
    processor.init(handle)  # type: ignore[arg-type]
    return processor, handle.state


def _call(
    processor: JoinerProcessor, records: list[dict[str, Any]], now: int = NOW
) -> list[tuple[Any, ...]]:
    """One call with ``records`` (input, key, value, event_time) of one bucket; its output."""
    plan = processor.plan
    offsets = range(len(records))
    batch = pa.RecordBatch.from_pylist(
        [
            {
                "input": r["input"],
                "key": r["key"],
                "event_time": r["event_time"],
                "partition": 0,
                "offset": offset,
                "timestamp": r["event_time"],
                "kafka_key": r["key"].encode(),
                "value": plan.codecs[plan.inputs[r["input"]][0]].encode(r["value"]),
                "error": None,
            }
            for offset, r in zip(offsets, records, strict=True)
        ],
        schema=INPUT.arrow,
    )
    blob = pack(batch, [0] * len(records)).column("records")[0].as_py()
    sent: list[tuple[Any, ...]] = []
    pack_row: Any = SimpleNamespace(records=blob)  # the field of a Spark row the call reads
    processor._input_rows(BUCKET, iter([pack_row]), _Clock(now), sent.append)
    return sent


def _region(user: str, region: str, at: int) -> dict[str, Any]:
    return {"input": 1, "key": user, "value": {"user": user, "region": region}, "event_time": at}


def _click(user: str, at: int) -> dict[str, Any]:
    value = {"id": f"c{at}", "user": user, "clicks": 1}
    return {"input": 0, "key": user, "value": value, "event_time": at}


def test_stream_records_that_only_read_the_table_write_no_state() -> None:
    processor, state = _processor()
    assert _call(processor, [_region("ada", "north", 1)]) == []
    assert state.writes == 1
    stored = state.value

    enriched = _call(processor, [_click("ada", 2), _click("bob", 3), _click("ada", 4)])

    assert [OutputRow._make(row).topic for row in enriched] == ["out"] * 3  # each click joined
    assert state.writes == 1 and state.value == stored  # the bucket was left as it was


def test_a_call_that_changes_no_key_does_not_encode_the_bucket(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    encoded: list[int] = []

    def counted(bucket: Any) -> bytes:
        encoded.append(len(bucket.keys))
        return encode_bucket(bucket)

    monkeypatch.setattr(processor_module, "encode_bucket", counted)
    # Deltas off: a call that changes a key then encodes the bucket, which is counted.
    processor, state = _processor(replace(_lookup(), state_deltas=False))
    _call(processor, [_region(f"user{n}", "north", 1) for n in range(100)])
    assert encoded == [100]

    _call(processor, [_click("user1", 2), _click("user7", 3), _click("nobody", 4)])
    assert encoded == [100]  # not encoded only to learn it had not changed
    _call(processor, [_click("user1", 5), _region("user7", "south", 6)])
    assert encoded == [100, 100] and state.writes == 2


def test_a_table_update_is_written() -> None:
    processor, state = _processor()
    _call(processor, [_region("ada", "north", 1)])

    _call(processor, [_click("ada", 2), _region("ada", "south", 3)])
    deltas = processor.handle.lists["bucket_delta"]  # type: ignore[attr-defined]
    assert state.writes + deltas.writes == 2  # the bucket whole, or a delta

    # The stored bucket has the new value: a later click sees it.
    (row,) = _call(processor, [_click("ada", 4)])
    assert _codec("enriched_click").decode(OutputRow._make(row).value)["region"] == {
        "user": "ada",
        "region": "south",
    }


def test_a_bucket_is_stored_compressed() -> None:
    processor, state = _processor()
    _call(processor, [_region(f"user{n}", "north", n) for n in range(50)])

    assert state.value is not None
    (blob,) = state.value
    pickled = state_compression.decompress(blob)
    assert len(blob) < len(pickled) / 3  # fifty keys' pickles say much the same
    assert set(decode_bucket(pickled).keys) == {f"user{n}" for n in range(50)}


def test_a_key_remembers_the_newest_event_time_that_changed_its_state() -> None:
    processor, state = _processor()
    _call(processor, [_region("ada", "north", 10)])
    _call(processor, [_click("ada", 30)])  # reads the table value, changes nothing
    assert state.value is not None
    assert _stored_bucket(processor.handle).keys["ada"][EVENT_TIME] == 10

    _call(processor, [_region("ada", "south", 20), _click("ada", 40)])
    assert state.value is not None
    assert _stored_bucket(processor.handle).keys["ada"][EVENT_TIME] == 40


def _event(side: int, key: int, at: int) -> dict[str, Any]:
    return {
        "input": side,
        "key": str(key),
        "value": {"k": key, "v": "e", "at": at},
        "event_time": at,
    }


def test_the_timer_is_not_moved_later_when_touched_keys_are_due_later() -> None:
    processor, _ = _processor(_window())
    timers = processor.handle.timers  # type: ignore[attr-defined]
    _call(processor, [_event(0, 1, 1), _event(0, 2, 1)])
    assert timers == [("register", NOW + 60_000)]  # idle_timeout after the keys' records

    _call(processor, [_event(1, 1, 2)], now=NOW + 5_000)  # key 1 is due later now; key 2 not
    _call(processor, [_event(1, 2, 3)], now=NOW + 9_000)  # and now every key is
    assert timers == [("register", NOW + 60_000)]  # two calls to the JVM saved, twice


def test_a_timer_that_fires_before_any_key_is_due_is_set_again_at_the_earliest() -> None:
    processor, state = _processor(_window())
    timers = processor.handle.timers  # type: ignore[attr-defined]
    _call(processor, [_event(0, 1, 1)])
    _call(processor, [_event(0, 1, 2)], now=NOW + 5_000)

    sent: list[tuple[Any, ...]] = []
    processor._wake_up(BUCKET, _Clock(NOW + 60_000), sent.append)  # the first timer fires

    assert sent == []  # nothing was due: the key's record came 55 s ago
    assert timers == [("register", NOW + 60_000), ("register", NOW + 65_000)]
    assert state.value is not None  # and the stored bucket knows which timer is set
    assert _stored_bucket(processor.handle).timer_ms == NOW + 65_000  # type: ignore[arg-type]


def test_a_key_due_earlier_than_the_timer_moves_it_earlier() -> None:
    processor, _ = _processor(_window())
    timers = processor.handle.timers  # type: ignore[attr-defined]
    _call(processor, [_event(0, 1, 1)])
    processor.plan.joiner.idle_timeout = 10_000  # type: ignore[attr-defined] # as a joiner
    _call(processor, [_event(0, 2, 1)], now=NOW + 1_000)  # whose wake-ups differ by key

    assert timers == [
        ("register", NOW + 60_000),
        ("delete", NOW + 60_000),
        ("register", NOW + 11_000),
    ]


def test_data_and_an_expired_timer_in_one_micro_batch_apply_the_data_first() -> None:
    """Spark's Python runner hands a task's data to the processor before its expired timers
    (pyspark.sql.streaming.stateful_processor_util: PROCESS_TIMER after PROCESS_DATA). A key
    quiet past its idle timeout that gets a record in the same micro-batch as the timer is
    then not woken: the record joins as it would have in an earlier micro-batch, where the
    timer would not have fired at all."""
    context = JoinerContext(pipeline="p", fields={"left": "left", "right": "right"})
    joiner = Window(WindowOptions(window=10_000, idle_timeout=60_000, mode="left"), context)
    codecs = {"left": "left_event", "right": "right_event"}
    processor, _ = _processor(
        _plan(joiner, codecs, "joined_pair", (("left", "lefts"), ("right", "rights")))
    )
    _call(processor, [_event(0, 1, 1_000)])

    later = NOW + 61_000  # the key's timer is due
    joined = _call(processor, [_event(1, 1, 1_500)], now=later)
    woken: list[tuple[Any, ...]] = []
    processor._wake_up(BUCKET, _Clock(later), woken.append)

    pairs = _codec("joined_pair")
    assert [pairs.decode(OutputRow._make(row).value) for row in joined] == [
        {"left": {"k": 1, "v": "e", "at": 1_000}, "right": {"k": 1, "v": "e", "at": 1_500}}
    ]
    assert woken == []  # not a null result for the left record, nor the right one late


class _Regions(Joiner[JoinerOptions, dict[str, Any]]):
    """Keeps each user's region; an empty region forgets it. Uses the default ``is_empty``."""

    name, description, roles = "regions", "regions", ("stream", "table")

    def initial_state(self) -> dict[str, Any]:
        return {"region": None}

    def process(
        self, key: str, state: dict[str, Any], records: Sequence[InputRecord], ctx: JoinerContext
    ) -> Iterator[Emit | DeadLetter]:
        for record in records:
            if record.role == "table" and record.value is not None:
                state["region"] = record.value["region"] or None
        return iter(())


def test_a_key_whose_state_is_back_to_a_new_keys_is_dropped_by_default() -> None:
    context = JoinerContext(pipeline="p", fields={"stream": "click", "table": "region"})
    joiner = _Regions(JoinerOptions(), context)
    codecs = {"stream": "click", "table": "user_region"}
    processor, state = _processor(_plan(joiner, codecs, "enriched_click", INPUTS))
    _call(processor, [_region("ada", "north", 1), _region("bob", "south", 1)])

    _call(processor, [_region("ada", "", 2)])  # ada's state is {"region": None} again

    assert state.value is not None
    assert set(_stored_bucket(processor.handle).keys) == {"bob"}


# The worker cache (daemon.operator.bucket_cache): the processors below share this process's
# cache, as the tasks of one Python worker do; the handle stands for Spark's state store.


def _bucket_reads(handle: _Handle) -> int:
    return handle.state.reads


def _region_of(row: tuple[Any, ...]) -> Any:
    return _codec("enriched_click").decode(OutputRow._make(row).value)["region"]


def test_a_cached_bucket_is_used_while_the_store_holds_its_stamp() -> None:
    handle = _Handle()
    processor, _ = _processor(handle=handle)
    _call(processor, [_region("ada", "north", 1)])
    reads = _bucket_reads(handle)

    (row,) = _call(processor, [_click("ada", 2)])
    (again,) = _call(processor, [_click("ada", 3)])

    assert _region_of(row) == _region_of(again) == {"user": "ada", "region": "north"}
    assert _bucket_reads(handle) == reads  # the bucket did not cross from the store again
    assert handle.values["bucket_stamp"].value is not None


def test_a_bucket_another_worker_wrote_is_loaded_from_the_store() -> None:
    ours, theirs = _Handle(), _Handle()
    processor, _ = _processor(handle=ours)
    _call(processor, [_region("ada", "north", 1)])
    # Another worker's task wrote the bucket (its own cache, the same store): what the
    # store then holds is a bucket and a stamp this worker's entry does not have.
    other, _ = _processor(handle=theirs)
    other._cache = BucketCache(1 << 30)  # the other worker's
    _call(other, [_region("ada", "south", 2)])
    for name, state in theirs.values.items():
        ours.values[name].value = state.value
    for name, items in theirs.lists.items():
        ours.lists[name].items = list(items.items)
    ours.values["state_bucket"].reads = 0

    (row,) = _call(processor, [_click("ada", 3)])

    assert _region_of(row) == {"user": "ada", "region": "south"}
    assert _bucket_reads(ours) == 1


def test_a_write_spark_does_not_commit_leaves_no_cached_bucket_ahead_of_the_store() -> None:
    """The task writes the bucket, puts it back into the cache, and fails before Spark
    commits its state: the store goes back to the committed value and stamp, which the
    cached entry (with the new stamp) no longer matches."""
    handle = _Handle()
    processor, _ = _processor(handle=handle)
    _call(processor, [_region("ada", "north", 1)])
    committed = {name: state.value for name, state in handle.values.items()}
    listed = {name: list(state.items) for name, state in handle.lists.items()}

    _call(processor, [_region("ada", "south", 2)])
    for name, value in committed.items():  # the task failed: its state is not committed
        handle.values[name].value = value
    for name, items in listed.items():
        handle.lists[name].items = items
    (row,) = _call(processor, [_click("ada", 3)])  # the retry

    assert _region_of(row) == {"user": "ada", "region": "north"}


def test_a_call_that_fails_half_way_leaves_no_cached_bucket() -> None:
    handle = _Handle()
    processor, _ = _processor(handle=handle)
    _call(processor, [_region("ada", "north", 1)])
    apply = processor.core.apply

    def half_way(bucket: Any, *args: Any) -> None:
        bucket.keys.clear()  # the engine changes the bucket in place ...
        raise RuntimeError("the task dies here")  # ... and the call fails before its write

    processor.core.apply = half_way  # type: ignore[method-assign]
    with pytest.raises(RuntimeError):
        _call(processor, [_region("ada", "south", 2)])
    processor.core.apply = apply  # type: ignore[method-assign]
    (row,) = _call(processor, [_click("ada", 3)])

    assert _region_of(row) == {"user": "ada", "region": "north"}


def test_with_the_cache_off_every_call_loads_and_no_stamp_is_written() -> None:
    handle = _Handle()
    processor, _ = _processor(replace(_lookup(), state_cache=False), handle)
    _call(processor, [_region("ada", "north", 1)])
    _call(processor, [_click("ada", 2)])
    _call(processor, [_click("ada", 3)])

    assert _bucket_reads(handle) == 3
    assert handle.values["bucket_stamp"].value is None


def test_the_cache_on_and_off_give_the_same_outputs_and_stored_bucket() -> None:
    calls = [
        [_region(f"u{n}", f"r{n}", n) for n in range(20)],
        [_click("u3", 30), _region("u3", "east", 31), _click("u3", 32), _click("zed", 33)],
        [_region("u4", "", 40), _click("u4", 41), _click("u5", 42)],
        [_click(f"u{n}", 50 + n) for n in range(20)],
    ]
    results = {}
    for cache in (True, False):
        handle = _Handle()
        processor, _ = _processor(replace(_lookup(), state_cache=cache), handle)
        outputs = [_call(processor, records) for records in calls]
        assert handle.state.value is not None
        results[cache] = outputs, _stored_bucket(handle)

    assert results[True] == results[False]


# Deltas (daemon.operator.bucket_delta): a call that changes a few keys of a bucket appends
# them instead of writing the bucket whole.


def _table(users: range, region: str, at: int) -> list[dict[str, Any]]:
    return [_region(f"u{n}", region, at) for n in users]


def test_a_call_that_changes_a_few_keys_appends_a_delta_and_leaves_the_value() -> None:
    handle = _Handle()
    processor, state = _processor(handle=handle)
    _call(processor, _table(range(100), "north", 1))
    value = state.value

    _call(processor, [_region("u7", "south", 2), _click("u8", 3)])

    assert state.value == value and state.writes == 1  # the value was not written again
    (delta,) = handle.lists["bucket_delta"].items
    plain = state_compression.decompress
    assert len(plain(delta[0])) < len(plain(value[0])) / 10  # type: ignore[index]
    stored = _stored_bucket(handle)
    assert len(stored.keys) == 100
    assert processor.plan.joiner.initial_state() != stored.keys["u7"]
    (row,) = _call(_processor(replace(_lookup(), state_cache=False), handle)[0], [_click("u7", 4)])
    assert _region_of(row) == {"user": "u7", "region": "south"}  # read from value and delta


def test_deltas_past_their_share_of_the_value_are_folded_into_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(bucket_delta, "MAX_DELTAS", 1_000)  # the share, not the count
    monkeypatch.setattr(bucket_delta, "SMALL", 0)  # nor the small bucket's allowance
    handle = _Handle()
    processor, state = _processor(handle=handle)
    _call(processor, _table(range(40), "north", 1))
    deltas = handle.lists["bucket_delta"]
    sizes = []
    for n in range(40):  # one key a call, each a delta, until they pass half the value
        _call(processor, [_region(f"u{n}", f"r{n}", 10 + n)])
        sizes.append(len(deltas.items))
        if state.writes > 1:
            break
    assert state.writes == 2, "the deltas were never folded"
    assert deltas.items == [] and sizes[-1] == 0 and max(sizes) > 3
    folded = _stored_bucket(handle)
    assert [folded.keys[f"u{n}"] for n in range(len(sizes))] == [
        decode_bucket(state_compression.decompress(state.value[0])).keys[f"u{n}"]  # type: ignore[index]
        for n in range(len(sizes))
    ]


def test_a_delta_count_cap_folds_even_small_deltas(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bucket_delta, "MAX_DELTAS", 3)
    monkeypatch.setattr(bucket_delta, "MAX_SHARE", 100.0)  # the count, not the share
    handle = _Handle()
    processor, state = _processor(handle=handle)
    _call(processor, _table(range(200), "north", 1))
    for n in range(4):
        _call(processor, [_region(f"u{n}", "south", 10 + n)])
    assert state.writes == 2 and handle.lists["bucket_delta"].items == []


def test_a_call_that_changes_most_keys_writes_the_value_whole_at_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(bucket_delta, "SMALL", 0)  # as in a bucket of many more keys
    handle = _Handle()
    processor, state = _processor(handle=handle)
    _call(processor, _table(range(10), "north", 1))
    _call(processor, _table(range(8), "south", 2))
    assert state.writes == 2 and handle.lists["bucket_delta"].writes == 0


def test_a_key_removed_by_a_delta_is_gone_for_a_load_from_the_store() -> None:
    context = JoinerContext(pipeline="p", fields={"stream": "click", "table": "region"})
    joiner = _Regions(JoinerOptions(), context)
    plan = _plan(joiner, {"stream": "click", "table": "user_region"}, "enriched_click", INPUTS)
    handle = _Handle()
    processor, state = _processor(plan, handle)
    _call(processor, _table(range(20), "north", 1))

    _call(processor, [_region("u3", "", 2)])  # u3's state is a new key's: dropped

    assert state.writes == 1 and len(handle.lists["bucket_delta"].items) == 1
    assert "u3" not in _stored_bucket(handle).keys and len(_stored_bucket(handle).keys) == 19


def test_every_write_delta_or_whole_renews_the_stamp() -> None:
    handle = _Handle()
    processor, _ = _processor(handle=handle)
    _call(processor, _table(range(50), "north", 1))
    stamps = [handle.values["bucket_stamp"].value]
    _call(processor, [_region("u1", "south", 2)])  # a delta
    stamps.append(handle.values["bucket_stamp"].value)
    _call(processor, [_click("u1", 3)])  # nothing written
    stamps.append(handle.values["bucket_stamp"].value)
    assert stamps[0] != stamps[1] == stamps[2]


def test_a_cached_bucket_is_not_used_once_another_worker_appended_a_delta() -> None:
    handle = _Handle()
    processor, _ = _processor(handle=handle)
    _call(processor, _table(range(50), "north", 1))
    other, _ = _processor(handle=handle)
    other._cache = BucketCache(1 << 30)  # the other worker's, which loads from the store
    _call(other, [_region("u1", "south", 2)])  # appends a delta with a new stamp

    (row,) = _call(processor, [_click("u1", 3)])

    assert _region_of(row) == {"user": "u1", "region": "south"}


def test_deltas_switched_off_fold_what_is_pending_at_the_next_write() -> None:
    handle = _Handle()
    processor, state = _processor(handle=handle)
    _call(processor, _table(range(50), "north", 1))
    _call(processor, [_region("u1", "south", 2)])
    assert len(handle.lists["bucket_delta"].items) == 1

    off, _ = _processor(replace(_lookup(), state_deltas=False), handle)
    _call(off, [_region("u2", "east", 3)])

    assert handle.lists["bucket_delta"].items == [] and state.writes == 2
    whole = decode_bucket(state_compression.decompress(state.value[0]))  # type: ignore[index]
    assert whole == _stored_bucket(handle)
    (row,) = _call(off, [_click("u1", 4)])
    assert _region_of(row) == {"user": "u1", "region": "south"}


def test_deltas_on_and_off_give_the_same_outputs_and_stored_bucket() -> None:
    calls = [
        _table(range(60), "north", 1),
        *([_click(f"u{n}", 10 + n), _region(f"u{n}", f"r{n}", 11 + n)] for n in range(30)),
        [_click(f"u{n}", 100 + n) for n in range(60)],
    ]
    results = {}
    for deltas in (True, False):
        handle = _Handle()
        processor, _ = _processor(replace(_lookup(), state_deltas=deltas), handle)
        outputs = [_call(processor, records) for records in calls]
        results[deltas] = outputs, _stored_bucket(handle)
    assert results[True] == results[False]


def test_a_bucket_of_one_key_takes_deltas_too() -> None:
    """A small bucket's deltas may take a few kilobytes (``bucket_delta.SMALL``): so a
    pipeline of few keys writes deltas as a large one does, rather than fold every time."""
    handle = _Handle()
    processor, state = _processor(handle=handle)
    _call(processor, [_region("ada", "north", 1)])
    for n in range(3):
        _call(processor, [_region("ada", f"r{n}", 2 + n)])
    assert state.writes == 1 and len(handle.lists["bucket_delta"].items) == 3
    (row,) = _call(_processor(replace(_lookup(), state_cache=False), handle)[0], [_click("ada", 9)])
    assert _region_of(row) == {"user": "ada", "region": "r2"}


def _reported_timers(processor: JoinerProcessor) -> list[dict[str, int | None]]:
    """The timers the counts rows of the calls since the last ones report."""
    return [json.loads(row.value)["timers"] for row in processor._counts()]


def test_each_call_reports_the_timer_its_bucket_holds_after_it() -> None:
    processor, _ = _processor(_window())
    _call(processor, [_event(0, 1, 1)])
    assert _reported_timers(processor) == [{"7": NOW + 60_000}]
    processor._wake_up(BUCKET, _Clock(NOW + 60_000), [].append)  # key 1 is woken, and gone
    assert _reported_timers(processor) == [{"7": None}]
    assert _reported_timers(processor) == []  # nothing since


def test_a_replay_that_counts_nothing_still_reports_its_timers() -> None:
    processor, _ = _processor(_window())
    processor.output = SimpleNamespace(skipped=True)  # type: ignore[assignment]
    processor.plan.joiner.context.count("matched")
    _call(processor, [_event(0, 1, 1)])
    assert [json.loads(row.value) for row in processor._counts()] == [
        {"timers": {"7": NOW + 60_000}}
    ]
