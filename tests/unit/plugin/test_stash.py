"""Stash and the bucket's stash log: values kept apart from key states, read back on demand.

The log runs here over an in-memory list in place of Spark's list state; the comap tests run
it through the real engine.
"""

from __future__ import annotations

import pickle  # noqa: S403 - the test's own state
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from daemon.operator import stash_log
from daemon.operator.stash_log import MemoryChunks, StashLog
from daemon.operator.state_format import STATE, Bucket, KeyEntry, decode_chunk
from daemon.plugin import Stash


class Chunks(MemoryChunks):
    """A list state in memory, counting the reads."""

    reads = 0

    def get(self) -> list[tuple[bytes]]:
        self.reads += 1
        return super().get()


def stored_entries(chunks: Chunks) -> int:
    return sum(len(decode_chunk(chunk)) for (chunk,) in chunks.items)


def entry(state: bytes) -> KeyEntry:
    """A key's entry in its bucket holding ``state`` (the clock does not matter here)."""
    return (0, 0, 0, 0, state)


def test_a_stash_is_a_mapping_that_pickles_with_its_values() -> None:
    stash = Stash([("a", 1), ("b", 2)])
    stash["a"] = 3  # replacing keeps the key's place
    stash["c"] = {"x": [1]}
    del stash["b"]
    assert list(stash.items()) == [("a", 3), ("c", {"x": [1]})]
    assert "b" not in stash and len(stash) == 2
    copy = pickle.loads(pickle.dumps({"many": stash}))["many"]  # noqa: S301
    assert isinstance(copy, Stash) and dict(copy) == {"a": 3, "c": {"x": [1]}}
    assert stash == {"a": 3, "c": {"x": [1]}}


def test_a_change_made_only_in_place_is_lost_in_tests_as_in_the_engine() -> None:
    def next_batch(stash: Stash) -> Stash:
        copy: Stash = pickle.loads(pickle.dumps(stash))  # noqa: S301 - as daemon.testing does
        return copy

    stash = next_batch(Stash([("a", {"n": 1})]))
    stash["a"]["n"] = 2  # in place, on a value read back: not stored
    stash = next_batch(stash)
    assert stash["a"] == {"n": 1}
    stash["a"] = {**stash["a"], "n": 3}  # set again: stored
    stash["b"] = value = {"n": 4}
    value["n"] = 5  # in place before the state is stored: stored with it
    assert dict(next_batch(stash)) == {"a": {"n": 3}, "b": {"n": 5}}

    chunks, bucket = Chunks(), Bucket()
    log = StashLog(chunks, bucket.stash)
    bucket.keys["k"] = entry(log.dumps(Stash([("a", {"n": 1})])))
    log.flush(bucket.keys)
    loaded = StashLog(chunks, bucket.stash).loads("k", bucket.keys["k"][STATE])
    loaded["a"]["n"] = 2
    log = StashLog(chunks, bucket.stash)
    bucket.keys["k"] = entry(log.dumps(loaded))
    log.flush(bucket.keys)
    assert StashLog(chunks, bucket.stash).loads("k", bucket.keys["k"][STATE])["a"] == {"n": 1}


def test_chunks_are_stored_compressed() -> None:
    chunks, bucket = Chunks(), Bucket()
    log = StashLog(chunks, bucket.stash)
    bucket.keys["k"] = entry(
        log.dumps(Stash({f"t{i}": {"region": "north"} for i in range(50)}.items()))
    )
    log.flush(bucket.keys)
    ((chunk,),) = chunks.items
    assert len(chunk) < sum(map(len, decode_chunk(chunk).values())) / 2  # values say the same
    loaded = StashLog(chunks, bucket.stash).loads("k", bucket.keys["k"][STATE])
    assert loaded["t7"] == {"region": "north"}


def test_key_states_carry_only_the_index_and_values_are_read_once_when_looked_at() -> None:
    chunks, bucket = Chunks(), Bucket()
    log = StashLog(chunks, bucket.stash)
    state = {"one": "ada", "many": Stash({f"t{i}": "x" * 1000 for i in range(50)}.items())}
    bucket.keys["k"] = entry(log.dumps(state))
    log.flush(bucket.keys)
    assert len(bucket.keys["k"][STATE]) < 2000  # the 50,000 bytes of values went to the log
    assert len(chunks.items) == 1 and bucket.stash.live == bucket.stash.entries == 50

    log = StashLog(chunks, bucket.stash)
    loaded = log.loads("k", bucket.keys["k"][STATE])
    loaded["many"]["t50"] = "new"
    del loaded["many"]["t0"]
    assert len(loaded["many"]) == 50 and chunks.reads == 0  # counting and writing read nothing
    assert loaded["many"]["t1"] == "x" * 1000 and loaded["many"]["t2"] == "x" * 1000
    assert chunks.reads == 1  # one read of the log per call, however many values are looked at
    bucket.keys["k"] = entry(log.dumps(loaded))
    log.flush(bucket.keys)
    assert len(chunks.items) == 2 and bucket.stash.entries == 51 and bucket.stash.live == 50


def test_a_dropped_key_and_an_emptied_bucket_leave_nothing_behind() -> None:
    chunks, bucket = Chunks(), Bucket()
    log = StashLog(chunks, bucket.stash)
    bucket.keys["a"] = entry(log.dumps(Stash({"1": 1}.items())))
    bucket.keys["b"] = entry(log.dumps(Stash({"2": 2, "3": 3}.items())))
    log.flush(bucket.keys)
    log = StashLog(chunks, bucket.stash)
    log.loads("b", bucket.keys["b"][STATE])
    log.forget("b")
    del bucket.keys["b"]
    log.flush(bucket.keys)
    assert bucket.stash.live == 1 and bucket.stash.entries == 3
    log = StashLog(chunks, bucket.stash)
    log.loads("a", bucket.keys["a"][STATE])
    log.forget("a")
    del bucket.keys["a"]
    log.flush(bucket.keys)
    assert chunks.items == [] and (bucket.stash.entries, bucket.stash.live) == (0, 0)


operation = st.tuples(
    st.sampled_from(["k1", "k2", "k3"]),  # join key
    st.sampled_from(["a", "b", "c", "d"]),  # stash key
    st.one_of(st.none(), st.integers(0, 9)),  # None: delete
)


@settings(max_examples=200, deadline=None)
@given(calls=st.lists(st.lists(operation, max_size=12), max_size=12), drop=st.booleans())
def test_every_call_reads_back_what_the_stashes_hold(
    calls: list[list[tuple[str, str, int | None]]], drop: bool
) -> None:
    """Many calls of sets and deletes, keys dropped when empty: the log agrees with dicts."""
    chunks, bucket = Chunks(), Bucket()
    model: dict[str, dict[str, int]] = {}
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(stash_log, "COMPACT_SLACK", 2)  # compact often
        for ops in calls:
            log = StashLog(chunks, bucket.stash)
            states: dict[str, Any] = {}
            for group, key, value in ops:
                if group not in states:
                    found = bucket.keys.get(group)
                    states[group] = Stash() if found is None else log.loads(group, found[STATE])
                stash, expected = states[group], model.setdefault(group, {})
                if value is None:
                    if key in stash:
                        del stash[key]
                        del expected[key]
                else:
                    stash[key] = expected[key] = value
            for group, stash in states.items():
                if drop and not stash:
                    log.forget(group)
                    bucket.keys.pop(group, None)
                    del model[group]
                else:
                    bucket.keys[group] = entry(log.dumps(stash))
            log.flush(bucket.keys)

            reader = StashLog(chunks, bucket.stash)
            loaded = {
                group: dict(reader.loads(group, e[STATE])) for group, e in bucket.keys.items()
            }
            assert loaded == model
            live = sum(len(stash) for stash in model.values())
            assert bucket.stash.live == live
            assert stored_entries(chunks) == bucket.stash.entries
            assert bucket.stash.entries - live <= live + stash_log.COMPACT_SLACK


def test_comparing_with_a_new_keys_state_reads_no_stored_value() -> None:
    # What the default Joiner.is_empty does with a state that holds a stash.
    chunks, bucket = Chunks(), Bucket()
    log = StashLog(chunks, bucket.stash)
    state = {"one": None, "many": Stash({"t1": "x", "t2": "y"}.items())}
    bucket.keys["k"] = entry(log.dumps(state))
    log.flush(bucket.keys)

    loaded = StashLog(chunks, bucket.stash).loads("k", bucket.keys["k"][STATE])
    assert loaded != {"one": None, "many": Stash()}
    assert chunks.reads == 0
    assert loaded["many"] == Stash({"t1": "x", "t2": "y"}.items())  # same size: values compared
