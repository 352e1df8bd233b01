"""The state format: plain data that names none of enrichd's classes, and knows its version.

A checkpoint made with this format is read through the real engine by
``tests/test_state_fixture.py``; here the format's pieces are taken one at a time.
"""

from __future__ import annotations

import pickle  # noqa: S403 - the test's own data
import pickletools

import pytest

from daemon.joiners.versions import Kept
from daemon.operator import state_compression, state_format
from daemon.operator.stash_log import StashLog
from daemon.operator.state_format import (
    RECORD,
    RECORD_WITH_HEADERS,
    STATE,
    STATE_FORMAT,
    Bucket,
    UnknownStateFormatError,
    decode_bucket,
    decode_chunk,
    decode_delta,
    decode_portable,
    dump_portable,
    encode_bucket,
    encode_delta,
    encode_portable,
    load_state,
)
from daemon.plugin import Stash
from daemon.plugin.joiner import input_record
from tests.unit.plugin.test_stash import Chunks


def names_in(pickled: bytes) -> list[str]:
    """Every module and name a pickle would import to load (GLOBAL, STACK_GLOBAL)."""
    found, strings = [], []
    for opcode, argument, _ in pickletools.genops(pickled):
        if opcode.name in ("SHORT_BINUNICODE", "BINUNICODE", "UNICODE"):
            strings.append(argument)
        elif opcode.name == "STACK_GLOBAL":
            found.append(".".join(strings[-2:]))
        elif opcode.name == "GLOBAL":
            found.append(str(argument).replace(" ", "."))
    return found


def record(offset: int) -> object:
    return input_record("left", "k", {"id": offset}, 1000 + offset, "lefts", 0, offset, b"k", 5)


def stored_key(state: object) -> tuple[Bucket, Chunks, bytes]:
    """``state`` stored as the processor stores a key's state: a bucket, its log, the pickle."""
    chunks, bucket = Chunks(), Bucket()
    log = StashLog(chunks, bucket.stash)
    pickled = log.dumps(state)
    bucket.keys["k"] = (7, 8, 9, 1000, pickled)
    log.flush(bucket.keys)
    return bucket, chunks, pickled


def test_a_bucket_is_plain_data_with_its_format_version() -> None:
    bucket, _, _ = stored_key({"held": [record(1)], "many": Stash([("t1", {"id": 1})])})
    bucket.due["k"] = 123
    encoded = encode_bucket(bucket)

    assert names_in(encoded) == []
    plain = pickle.loads(encoded)  # noqa: S301
    assert plain["format"] == STATE_FORMAT == 2
    assert plain["keys"]["k"][:4] == (7, 8, 9, 1000) and plain["due"] == {"k": 123}
    assert decode_bucket(encoded) == bucket


def test_records_and_stashes_in_a_key_state_are_written_without_names() -> None:
    state = {"held": [record(1), record(2)], "many": Stash([("t1", {"id": 1})])}
    bucket, chunks, pickled = stored_key(state)

    assert names_in(pickled) == []
    assert b"daemon" not in pickled
    ((chunk,),) = chunks.items
    assert all(names_in(value) == [] for value in decode_chunk(chunk).values())

    loaded = StashLog(chunks, bucket.stash).loads("k", bucket.keys["k"][STATE])
    assert loaded["held"] == [record(1), record(2)]
    assert dict(loaded["many"]) == {"t1": {"id": 1}}


def test_a_joiners_own_class_keeps_its_name() -> None:
    from daemon.joiners.asof import AsOfState

    _, _, pickled = stored_key(AsOfState())
    assert names_in(pickled) == ["daemon.joiners.asof.AsOfState"]


def test_state_of_a_newer_format_is_refused_with_one_line() -> None:
    newer = pickle.dumps({"format": STATE_FORMAT + 1, "keys": {}}, protocol=5)
    with pytest.raises(UnknownStateFormatError) as caught:
        decode_bucket(newer)
    message = str(caught.value)
    assert "state format 3" in message and "state formats 1 to 2" in message
    assert "\n" not in message
    with pytest.raises(UnknownStateFormatError):
        decode_chunk(state_compression.compress(newer))


def test_values_of_format_1_read_as_format_2s() -> None:
    """Format 2 added the deltas beside the values; a bucket, a chunk and a moved key keep
    format 1's shapes, so a format-1 checkpoint is read without a rewrite (the kept
    checkpoint of format 1 is read through the engine in tests/state/test_state_commands.py)."""
    bucket, chunks, _ = stored_key({"one": "ada", "many": Stash([("t1", {"id": 1})])})
    old = pickle.loads(encode_bucket(bucket))  # noqa: S301 - the test's own data
    old["format"] = 1
    assert decode_bucket(pickle.dumps(old, protocol=5)) == bucket
    ((chunk,),) = chunks.items
    plain = pickle.loads(state_compression.decompress(chunk))  # noqa: S301
    plain["format"] = 1
    again = state_compression.compress(pickle.dumps(plain, protocol=5))
    assert decode_chunk(again) == decode_chunk(chunk)
    bucket.touch("k")
    delta = pickle.loads(encode_delta(bucket, 0))  # noqa: S301 - deltas an enrichd wrote as 1
    delta["format"] = 1
    assert decode_delta(pickle.dumps(delta, protocol=5))["keys"] == {"k": (bucket.keys["k"], None)}
    entry, state = bucket.keys["k"], load_state(dump_portable({"one": "ada"}), None)
    moved = pickle.loads(encode_portable(entry, 5, state))  # noqa: S301
    assert decode_portable(pickle.dumps((1, *moved[1:]), protocol=5))[1:] == (5, {"one": "ada"})


def test_a_portable_state_carries_its_stash_values_into_another_log() -> None:
    bucket, chunks, _ = stored_key({"one": "ada", "many": Stash([("t1", {"id": 1})])})
    loaded = StashLog(chunks, bucket.stash).loads("k", bucket.keys["k"][STATE])

    portable = dump_portable(loaded)
    assert names_in(portable) == []

    moved = load_state(portable, None)
    other, other_chunks, _ = stored_key(moved)
    again = StashLog(other_chunks, other.stash).loads("k", other.keys["k"][STATE])
    assert again["one"] == "ada" and dict(again["many"]) == {"t1": {"id": 1}}
    assert other.stash.live == 1


HEADERS = (("traceparent", b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"),)


def test_a_record_with_headers_keeps_them_in_its_own_maker_and_one_without_is_unchanged() -> None:
    headed = input_record("left", "k", {"id": 1}, 1001, "lefts", 0, 1, b"k", 5, HEADERS)
    bucket, chunks, pickled = stored_key({"held": [headed, record(2)]})

    assert names_in(pickled) == []
    loaded = StashLog(chunks, bucket.stash).loads("k", bucket.keys["k"][STATE])
    assert loaded["held"] == [headed, record(2)]
    assert [r.headers for r in loaded["held"]] == [HEADERS, None]
    # A state whose records carry no headers is pickled as before they existed: an enrichd of
    # then reads it, and an enrichd of now reads what one of then wrote.
    _, _, plain = stored_key({"held": [record(2)]})
    assert (RECORD_WITH_HEADERS, RECORD) == (4, 1)
    assert _makers_called(plain) == [RECORD]
    assert _makers_called(pickled) == [RECORD_WITH_HEADERS, RECORD]


def test_an_enrichd_before_headers_refuses_a_record_with_them_in_one_line() -> None:
    headed = input_record("l", "k", {}, 1, "t", 0, 1, None, 5, HEADERS)
    _, _, pickled = stored_key({"held": [headed]})
    known = state_format._MAKERS.pop(RECORD_WITH_HEADERS)
    try:
        with pytest.raises(UnknownStateFormatError, match="maker 4, which this enrichd does not"):
            load_state(pickled, None)
    finally:
        state_format._MAKERS[RECORD_WITH_HEADERS] = known


def test_a_kept_answer_keeps_its_events_headers_and_one_kept_before_them_loads() -> None:
    kept = Kept(10, {"id": "c1"}, {"region": "eu"}, 0, b"c1", HEADERS)
    assert pickle.loads(pickle.dumps(kept)) == kept  # noqa: S301
    before = Kept(10, {"id": "c1"}, {"region": "eu"}, 0, b"c1")
    assert before.__reduce__() == (Kept, (10, {"id": "c1"}, {"region": "eu"}, 0, b"c1"))
    assert pickle.loads(pickle.dumps(before)).headers is None  # noqa: S301


def _makers_called(pickled: bytes) -> list[int]:
    """The maker numbers a key state's pickle calls, in order (EXT1/EXT2 then its number)."""
    ops = list(pickletools.genops(pickled))
    return [
        argument
        for (before, _, _), (opcode, argument, _) in zip(ops, ops[1:], strict=False)
        if before.name in ("EXT1", "EXT2", "EXT4") and opcode.name == "BININT1"
    ]
