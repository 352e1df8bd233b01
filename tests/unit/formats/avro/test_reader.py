"""The compiled Avro reader: fastavro's value for all bytes it takes; fastavro for the rest."""

from __future__ import annotations

import io
import pickle
from pathlib import Path
from typing import Any

import fastavro
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from daemon.formats.avro.codec import AvroCodec, load_schema_file, parse_schema_text
from daemon.formats.avro.reader import compile_reader, compile_scanner
from tests.unit.formats.avro.test_writer import SCHEMAS, fastavro_bytes, values

EVERY_PLAIN_TYPE = parse_schema_text(
    """{"type": "record", "name": "Every", "fields": [
        {"name": "nothing", "type": "null"},
        {"name": "flag", "type": "boolean"},
        {"name": "small", "type": "int"},
        {"name": "big", "type": "long"},
        {"name": "ratio", "type": "float"},
        {"name": "exact", "type": "double"},
        {"name": "blob", "type": "bytes"},
        {"name": "hash", "type": {"type": "fixed", "name": "Hash", "size": 4}},
        {"name": "colour", "type": {"type": "enum", "name": "Colour", "symbols": ["RED", "BLUE"]}},
        {"name": "choice", "type": ["null", "string", "long", "Hash", "Colour"]},
        {"name": "point", "type": {"type": "record", "name": "Point", "fields": [
            {"name": "x", "type": "long"},
            {"name": "tags", "type": {"type": "array", "items": "string"}}]}},
        {"name": "points", "type": {"type": "array", "items": "Point"}},
        {"name": "counts", "type": {"type": "map", "values": ["null", "int"]}},
        {"name": "nested", "type": {"type": "array", "items": {"type": "map", "values": "bytes"}}}
    ]}"""
)


def fastavro_value(schema: Any, data: bytes) -> Any:
    """fastavro's decode of ``data``, which must use every byte (as ``AvroCodec.decode``)."""
    buffer = io.BytesIO(data)
    value = fastavro.schemaless_reader(buffer, schema, schema)
    if buffer.tell() != len(data):
        raise ValueError("bytes left")
    return value


@pytest.mark.parametrize("path", SCHEMAS, ids=[p.stem for p in SCHEMAS])
@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_the_projects_schemas_compile_and_read_fastavros_values(path: Path, data: Any) -> None:
    schema = load_schema_file(path)
    read = compile_reader(schema)
    assert read is not None
    encoded = fastavro_bytes(schema, data.draw(values(schema, schema["__named_schemas"])))
    # repr as well as ==: True == 1 and 1.0 == 1, but a bool or float must stay one
    assert repr(read(encoded, 0)) == repr(fastavro_value(schema, encoded))


@settings(max_examples=300, deadline=None)
@given(values(EVERY_PLAIN_TYPE, EVERY_PLAIN_TYPE["__named_schemas"]))
def test_every_type_reads_fastavros_value(value: dict[str, Any]) -> None:
    read = compile_reader(EVERY_PLAIN_TYPE)
    assert read is not None
    encoded = fastavro_bytes(EVERY_PLAIN_TYPE, value)
    assert repr(read(encoded, 0)) == repr(fastavro_value(EVERY_PLAIN_TYPE, encoded))
    framed = b"\x00\x00\x00\x00\x07" + encoded
    assert read(framed, 5) == read(encoded, 0)


@settings(max_examples=200, deadline=None)
@given(values(EVERY_PLAIN_TYPE, EVERY_PLAIN_TYPE["__named_schemas"]), st.data())
def test_broken_bytes_are_refused_or_read_as_fastavro_reads_them(
    value: dict[str, Any], data: Any
) -> None:
    """Truncated, padded or overwritten bytes: whatever the compiled reader takes, fastavro
    reads to the same value; whatever it refuses, the codec decodes as fastavro says."""
    encoded = bytearray(fastavro_bytes(EVERY_PLAIN_TYPE, value))
    cut = data.draw(st.integers(0, len(encoded)))
    broken = data.draw(
        st.sampled_from(
            [
                bytes(encoded[:cut]),
                bytes(encoded) + data.draw(st.binary(min_size=1, max_size=3)),
                bytes(encoded[:cut]) + data.draw(st.binary(max_size=4)) + bytes(encoded[cut:]),
                bytes(encoded[:cut]) + data.draw(st.binary(max_size=4)) + bytes(encoded[cut + 4 :]),
            ]
        )
    )
    read = compile_reader(EVERY_PLAIN_TYPE)
    assert read is not None
    try:
        taken = repr(read(broken, 0))
    except Exception:  # IndexError, ValueError, ...: the codec asks fastavro
        taken = "refused"
    codec = AvroCodec(EVERY_PLAIN_TYPE)
    try:
        expected = repr(fastavro_value(EVERY_PLAIN_TYPE, broken))
    except Exception:
        assert taken == "refused"
        with pytest.raises(ValueError, match="not a record of this schema|bytes left"):
            codec.decode(broken)
        return
    assert taken in (expected, "refused")  # refused: stricter than fastavro (a boolean 2, ...)
    assert repr(codec.decode(broken)) == expected


def test_blocks_with_a_byte_size_are_read() -> None:
    """Writers may give an array block's count as negative, followed by its byte size."""
    schema = parse_schema_text('{"type": "array", "items": "long"}')
    data = bytes([3, 4, 2, 4, 0])  # count -2, 2 bytes: longs 1 and 2; end
    read = compile_reader(schema)
    assert read is not None
    assert read(data, 0) == fastavro_value(schema, data) == [1, 2]


def test_a_scanner_steps_over_a_block_by_its_byte_size() -> None:
    schema = parse_schema_text(
        '{"type": "record", "name": "R", "fields": [{"name": "xs", "type": '
        '{"type": "array", "items": "long"}}, {"name": "id", "type": "long"}]}'
    )
    data = bytes([3, 4, 2, 4, 0, 14])  # xs: count -2, 2 bytes (longs 1 and 2), end; id 7
    scan = compile_scanner(schema, ("id",))
    assert scan is not None
    assert scan(data, 0) == [7]
    assert fastavro_value(schema, data) == {"xs": [1, 2], "id": 7}
    with pytest.raises(ValueError, match="block"):
        scan(bytes([3, 40, 2, 4, 0, 14]), 0)  # a byte size past the end


@pytest.mark.parametrize(
    "schema",
    [
        '{"type": "int", "logicalType": "date"}',
        '{"type": "record", "name": "T", "fields": [{"name": "at", "type": '
        '["null", {"type": "long", "logicalType": "timestamp-millis"}]}]}',
        '{"type": "string", "logicalType": "uuid"}',
        '{"type": "record", "name": "Node", "fields": ['
        '{"name": "next", "type": ["null", "Node"]}]}',  # recursive
    ],
)
def test_logical_and_recursive_types_are_not_compiled(schema: str) -> None:
    assert compile_reader(parse_schema_text(schema)) is None


def test_a_codec_resolving_an_older_writer_schema_decodes_with_fastavro() -> None:
    old = parse_schema_text(
        '{"type": "record", "name": "U", "fields": [{"name": "id", "type": "long"}]}'
    )
    new = parse_schema_text(
        '{"type": "record", "name": "U", "fields": [{"name": "id", "type": "long"},'
        '{"name": "name", "type": "string", "default": "?"}]}'
    )
    data = fastavro_bytes(old, {"id": 5})
    assert AvroCodec(new, writer_schema=old).decode(data) == {"id": 5, "name": "?"}


def test_a_codec_that_compiled_its_reader_still_pickles() -> None:
    schema = load_schema_file(SCHEMAS[0].parent / "click.avsc")
    codec = AvroCodec(schema)
    data = fastavro_bytes(schema, {"id": "c1", "user": None, "clicks": 3})
    assert codec.decode(data) == {"id": "c1", "user": None, "clicks": 3}
    assert pickle.loads(pickle.dumps(codec)).decode(data) == codec.decode(data)  # noqa: S301
