"""The operator writes a bucket's state back only when a call changed it, compressed.

The engine's path through Spark is covered by ``tests/test_lookup.py``; here the processor runs
on an in-memory stand-in for its state handle, which counts the writes.
"""

from __future__ import annotations

import pickle  # noqa: S403 - reads what the processor stored
from types import SimpleNamespace
from typing import Any

import pyarrow as pa

from daemon.avro import AvroCodec, load_schema_file
from daemon.engine import blobs
from daemon.engine.processor import JoinerProcessor, OperatorPlan
from daemon.joiners.base import JoinerContext
from daemon.joiners.lookup import Lookup, LookupOptions
from daemon.kafka.records import RECORD_ARROW, pack
from daemon.kafka.task_output import OutputSpec
from tests.kafka_helpers import SCHEMAS

INPUTS = (("stream", "clicks"), ("table", "regions"))


class _State:
    """A value state that counts the writes it is asked for."""

    def __init__(self) -> None:
        self.value: tuple[bytes] | None = None
        self.writes = 0

    def get(self) -> tuple[bytes] | None:
        return self.value

    def update(self, value: tuple[bytes]) -> None:
        self.writes += 1
        self.value = value

    def clear(self) -> None:
        self.writes += 1
        self.value = None


class _Handle:
    def __init__(self) -> None:
        self.state = _State()

    def getValueState(self, name: str, schema: Any) -> _State:  # noqa: N802
        return self.state

    def getListState(self, name: str, schema: Any) -> None:  # noqa: N802
        return None  # lookup stashes nothing


class _Clock:
    def getCurrentProcessingTimeInMs(self) -> int:  # noqa: N802
        return 1_700_000_000_000


def _codec(name: str) -> AvroCodec:
    return AvroCodec(load_schema_file(SCHEMAS / f"{name}.avsc"))


def _processor() -> tuple[JoinerProcessor, _State]:
    joiner = Lookup(
        LookupOptions(mode="left"),
        JoinerContext(pipeline="p", fields={"stream": "click", "table": "region"}),
    )
    plan = OperatorPlan(
        joiner=joiner,
        codecs={"stream": _codec("click"), "table": _codec("user_region")},
        output_codec=_codec("enriched_click"),
        output_topic="enriched",
        dead_letter_topic="enriched.dlq",
        plugin="enrichd",
        inputs=INPUTS,
    )
    processor = JoinerProcessor(plan, OutputSpec("p", {}, "exactly_once", "enriched"))
    handle = _Handle()
    processor.init(handle)  # type: ignore[arg-type]
    return processor, handle.state


def _call(processor: JoinerProcessor, records: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """One call with ``records`` (input, key, value, event_time) of one bucket; its output."""
    encode = {0: _codec("click").encode, 1: _codec("user_region").encode}
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
                "value": encode[r["input"]](r["value"]),
                "error": None,
            }
            for offset, r in zip(offsets, records, strict=True)
        ],
        schema=RECORD_ARROW,
    )
    blob = pack(batch, [0] * len(records)).column("records")[0].as_py()
    sent: list[tuple[Any, ...]] = []
    pack_row: Any = SimpleNamespace(records=blob)  # the field of a Spark row the call reads
    processor._input_rows(iter([pack_row]), _Clock(), sent.append)
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

    assert [row[0] for row in enriched] == ["enriched"] * 3  # each click joined
    assert state.writes == 1 and state.value == stored  # the bucket was left as it was


def test_a_table_update_is_written() -> None:
    processor, state = _processor()
    _call(processor, [_region("ada", "north", 1)])

    _call(processor, [_click("ada", 2), _region("ada", "south", 3)])
    assert state.writes == 2

    # The stored bucket has the new value: a later click sees it.
    (row,) = _call(processor, [_click("ada", 4)])
    assert _codec("enriched_click").decode(row[2])["region"] == {"user": "ada", "region": "south"}


def test_a_bucket_is_stored_compressed() -> None:
    processor, state = _processor()
    _call(processor, [_region(f"user{n}", "north", n) for n in range(50)])

    assert state.value is not None
    (blob,) = state.value
    pickled = blobs.decompress(blob)
    assert len(blob) < len(pickled) / 3  # fifty keys' pickles say much the same
    assert set(pickle.loads(pickled).keys) == {f"user{n}" for n in range(50)}  # noqa: S301


def test_a_bucket_stored_as_a_plain_pickle_by_an_earlier_build_is_read() -> None:
    processor, state = _processor()
    _call(processor, [_region("ada", "north", 1)])
    assert state.value is not None
    state.value = (blobs.decompress(state.value[0]),)  # as builds before compression wrote it

    (row,) = _call(processor, [_click("ada", 2)])
    assert _codec("enriched_click").decode(row[2])["region"] == {"user": "ada", "region": "north"}
    assert state.writes == 1  # and it was not rewritten: nothing changed
