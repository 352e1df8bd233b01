"""FieldScanner: the source reads a record's key and time fields without decoding the rest."""

from __future__ import annotations

import struct
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from daemon.formats.avro.codec import AvroCodec, parse_schema_text
from daemon.model.record_route import route

# Every Avro type sits in front of the routed fields, so reading them means stepping over each.
EVERY_TYPE = parse_schema_text(
    """{"type": "record", "name": "Every", "fields": [
        {"name": "nothing", "type": "null"},
        {"name": "flag", "type": "boolean"},
        {"name": "small", "type": "int"},
        {"name": "ratio", "type": "float"},
        {"name": "exact", "type": "double"},
        {"name": "blob", "type": "bytes"},
        {"name": "hash", "type": {"type": "fixed", "name": "Hash", "size": 4}},
        {"name": "colour", "type": {"type": "enum", "name": "Colour", "symbols": ["RED", "BLUE"]}},
        {"name": "choice", "type": ["null", "string", "long", "Hash"]},
        {"name": "point", "type": {"type": "record", "name": "Point", "fields": [
            {"name": "x", "type": "long"},
            {"name": "tags", "type": {"type": "array", "items": "string"}}]}},
        {"name": "points", "type": {"type": "array", "items": "Point"}},
        {"name": "counts", "type": {"type": "map", "values": ["null", "int"]}},
        {"name": "day", "type": {"type": "int", "logicalType": "date"}},
        {"name": "user_id", "type": ["null", "string"]},
        {"name": "author", "type": "long"},
        {"name": "at", "type": ["null", {"type": "long", "logicalType": "timestamp-millis"}]},
        {"name": "after", "type": {"type": "map", "values": "bytes"}}]}"""
)

texts = st.text(max_size=12)
points = st.fixed_dictionaries(
    {"x": st.integers(-(2**63), 2**63 - 1), "tags": st.lists(texts, max_size=3)}
)
records = st.fixed_dictionaries(
    {
        "nothing": st.none(),
        "flag": st.booleans(),
        "small": st.integers(-(2**31), 2**31 - 1),
        "ratio": st.floats(width=32, allow_nan=False),
        "exact": st.floats(allow_nan=False),
        "blob": st.binary(max_size=20),
        "hash": st.binary(min_size=4, max_size=4),
        "colour": st.sampled_from(["RED", "BLUE"]),
        "choice": st.none() | texts | st.integers(-(2**63), 2**63 - 1),
        "point": points,
        "points": st.lists(points, max_size=3),
        "counts": st.dictionaries(texts, st.none() | st.integers(0, 2**31 - 1), max_size=3),
        "day": st.dates(),
        "user_id": st.none() | texts,
        "author": st.integers(-(2**63), 2**63 - 1),
        "at": st.none()
        | st.integers(-(2**40), 2**42).map(
            lambda ms: datetime(1970, 1, 1, tzinfo=UTC) + timedelta(milliseconds=ms)
        ),
        "after": st.dictionaries(texts, st.binary(max_size=8), max_size=3),
    }
)


@settings(max_examples=300, deadline=None)
@given(records)
def test_read_fields_are_the_decoded_fields_and_route_alike(record: dict[str, Any]) -> None:
    codec = AvroCodec(EVERY_TYPE)
    data = codec.encode(record)
    decoded = codec.decode(data)
    assert codec.read_fields(data, ("user_id", "author")) == [
        decoded["user_id"],
        decoded["author"],
    ]
    key, at = codec.read_fields(data, ("author", "at"), millis=("at",)) or [None, None]
    assert key == decoded["author"]
    routed = route(
        decoded, None, 7, role="r", key_field="author", time_field="at", keyed_tombstones=False
    )
    assert routed.event_time == (7 if at is None else at)


@settings(max_examples=100, deadline=None)
@given(records, st.data())
def test_truncated_or_padded_records_are_refused(record: dict[str, Any], data: Any) -> None:
    codec = AvroCodec(EVERY_TYPE)
    encoded = codec.encode(record)
    cut = data.draw(st.integers(0, len(encoded) - 1))
    with pytest.raises(ValueError):
        codec.read_fields(encoded[:cut], ("author",))
    with pytest.raises(ValueError, match="bytes left after the record"):
        codec.read_fields(encoded + b"\x00", ("author",))


def test_fields_it_cannot_read_without_a_decode_are_declined() -> None:
    codec = AvroCodec(EVERY_TYPE)
    data = codec.encode(
        {
            **dict.fromkeys(("nothing", "choice", "user_id", "at")),
            "flag": True,
            "small": 1,
            "ratio": 1.0,
            "exact": 1.0,
            "blob": b"",
            "hash": b"abcd",
            "colour": "RED",
            "point": {"x": 1, "tags": []},
            "points": [],
            "counts": {},
            "day": datetime(2026, 1, 1).date(),
            "author": 5,
            "after": {},
        }
    )
    assert codec.read_fields(data, ("author",)) == [5]
    for unreadable in ("day", "choice", "point", "point.x", "no_such_field", "at"):
        assert codec.read_fields(data, (unreadable,)) is None, unreadable


def test_a_writer_schema_is_walked_and_a_changed_field_type_declines() -> None:
    old = parse_schema_text(
        """{"type": "record", "name": "U", "fields": [
            {"name": "name", "type": "string"}, {"name": "id", "type": "long"}]}"""
    )
    new = parse_schema_text(
        """{"type": "record", "name": "U", "fields": [
            {"name": "id", "type": "long"}, {"name": "region", "type": "string", "default": "eu"},
            {"name": "score", "type": "double", "default": 0}]}"""
    )
    data = AvroCodec(old).encode({"name": "Ada", "id": 9})
    reader = AvroCodec(new, writer_schema=old)
    assert reader.read_fields(data, ("id",)) == [9]
    assert reader.read_fields(data, ("region",)) is None  # only a decode fills the default
    framed = b"\x00" + struct.pack(">I", 3) + data
    registry = AvroCodec(new, registry_url="http://registry.invalid:8081")
    registry._writers[3] = old
    assert registry.read_fields(framed, ("id",)) == [9]
    with pytest.raises(ValueError, match="Confluent framing"):
        registry.read_fields(data, ("id",))
    promoted = parse_schema_text(
        """{"type": "record", "name": "U", "fields": [{"name": "id", "type": "double"}]}"""
    )
    assert AvroCodec(promoted, writer_schema=old).read_fields(data, ("id",)) is None


def test_a_schema_the_registry_says_it_does_not_know_routes_the_record_to_dead_letters() -> None:
    """The registry's own "schema not found" (40403), from the stand-in over HTTP (the
    client's mock registry answers a code no registry gives, 40400, which is held back)."""
    from daemon.source.reading import _route
    from daemon.source.spec import SourceInput
    from tests.registry import RegistryServer

    with RegistryServer() as server:
        settings = server.client_settings()
        codec = AvroCodec(EVERY_TYPE, registry_url=server.url, registry_settings=settings)
        framed = b"\x00" + struct.pack(">I", 404) + b"\x02"
        routing = _route(SourceInput("r", "t", "author", None, codec), framed, None, 5)
    assert routing.key is None and routing.event_time == 5
    assert (routing.error or "").startswith("UndecodableRecord: ValueError: schema id 404: ")
    assert "SR code 40403" in (routing.error or "")


def test_a_bug_in_the_compiled_scanner_dead_letters_the_record_not_hidden_by_a_decode() -> None:
    from daemon.formats.avro.codegen import CompiledCodecError
    from daemon.source.reading import _route
    from daemon.source.spec import SourceInput

    codec = AvroCodec(
        parse_schema_text(
            """{"type": "record", "name": "T", "fields": [{"name": "author", "type": "long"}]}"""
        )
    )
    data = codec.encode({"author": 7})

    def buggy(*_: Any) -> list[Any]:
        raise CompiledCodecError.of("scanner", KeyError("x"))

    codec.read_fields = buggy  # type: ignore[method-assign]
    routing = _route(SourceInput("r", "t", "author", None, codec), data, None, 5)
    assert routing.key is None and routing.event_time == 5
    assert (routing.error or "").startswith("CompiledCodecError: ")
