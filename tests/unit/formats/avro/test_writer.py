"""The compiled Avro writer: fastavro's bytes for every value it takes; fastavro for the rest."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import fastavro
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from daemon.formats.avro.codec import AvroCodec, load_schema_file, parse_schema_text
from daemon.formats.avro.writer import DECLINES, Unwritable, compile_field_writers, compile_writer
from tests.unit.formats.avro.test_fields import EVERY_TYPE

SCHEMAS = sorted((Path(__file__).resolve().parents[4] / "schemas").glob("*.avsc"))
texts = st.text(max_size=12)


def values(schema: Any, named: dict[str, Any]) -> st.SearchStrategy[Any]:
    """Values of a parsed schema, of the Python types the compiled writer takes."""
    if isinstance(schema, list):
        return st.one_of([values(branch, named) for branch in schema])
    if isinstance(schema, str) and schema in named:
        return values(named[schema], named)
    kind = schema if isinstance(schema, str) else schema["type"]
    if isinstance(kind, (dict, list)):
        return values(kind, named)
    simple: dict[str, st.SearchStrategy[Any]] = {
        "null": st.none(),
        "boolean": st.booleans(),
        "int": st.integers(-(2**31), 2**31 - 1),
        "long": st.integers(-(2**63), 2**63 - 1),
        "float": st.floats(width=32, allow_nan=False),
        "double": st.floats(allow_nan=False),
        "string": texts,
        "bytes": st.binary(max_size=20),
    }
    if kind in simple:
        return simple[kind]
    if kind == "enum":
        return st.sampled_from(schema["symbols"])
    if kind == "fixed":
        return st.binary(min_size=schema["size"], max_size=schema["size"])
    if kind == "array":
        return st.lists(values(schema["items"], named), max_size=3)
    if kind == "map":
        return st.dictionaries(texts, values(schema["values"], named), max_size=3)
    if kind == "record":
        fields = {f["name"]: values(f["type"], named) for f in schema["fields"]}
        # A field with a default may be left out: the writer fills it in.
        optional = [f["name"] for f in schema["fields"] if "default" in f]
        return st.builds(
            lambda record, left_out: {k: v for k, v in record.items() if k not in left_out},
            st.fixed_dictionaries(fields),
            st.sets(st.sampled_from(optional)) if optional else st.just(set()),
        )
    return values(named[kind], named)


def fastavro_bytes(schema: Any, value: Any) -> bytes:
    buffer = io.BytesIO()
    fastavro.schemaless_writer(buffer, schema, value, strict_allow_default=True)
    return buffer.getvalue()


@pytest.mark.parametrize("path", SCHEMAS, ids=[p.stem for p in SCHEMAS])
@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_the_projects_schemas_compile_and_write_fastavros_bytes(path: Path, data: Any) -> None:
    schema = load_schema_file(path)
    write = compile_writer(schema)
    assert write is not None
    value = data.draw(values(schema, schema["__named_schemas"]))
    assert write(value) == fastavro_bytes(schema, value)


@settings(max_examples=300, deadline=None)
@given(values(EVERY_TYPE, EVERY_TYPE["__named_schemas"]))
def test_every_type_writes_fastavros_bytes(value: dict[str, Any]) -> None:
    write = compile_writer(EVERY_TYPE)
    assert write is not None
    assert write(value) == fastavro_bytes(EVERY_TYPE, value)


WRONG = [
    1.5,  # a float where an int is wanted, and so on
    "1",
    b"1",
    True,
    None,
    2**63,
    -(2**63) - 1,
    [1],
    {"x": 1},
    ("tuple",),
]


def broken_copies(value: dict[str, Any]) -> list[dict[str, Any]]:
    """``value`` with each field left out, or set to each wrong value; and with an extra one."""
    copies = [{**value, "unknown": 1}]
    for name in value:
        copies.append({k: v for k, v in value.items() if k != name})
        copies.extend({**value, name: wrong} for wrong in WRONG)
    return copies


@settings(max_examples=25, deadline=None)
@given(values(EVERY_TYPE, EVERY_TYPE["__named_schemas"]))
def test_a_value_it_does_not_take_goes_to_fastavro_and_ends_as_fastavro_says(
    value: dict[str, Any],
) -> None:
    """Wrong types, missing and unknown fields: ``encode`` gives fastavro's bytes or error."""
    codec = AvroCodec(EVERY_TYPE)
    for broken in broken_copies(value):
        try:
            expected = fastavro_bytes(EVERY_TYPE, broken)
        except TypeError:  # fastavro's wrong-type error, which the codec makes a ValueError
            with pytest.raises(ValueError):
                codec.encode(broken)
        except Exception as exc:
            with pytest.raises(type(exc)):
                codec.encode(broken)
        else:
            assert codec.encode(broken) == expected


def test_values_of_other_python_types_are_left_to_fastavro() -> None:
    from datetime import date

    schema = parse_schema_text(
        """{"type": "record", "name": "D", "fields": [
            {"name": "day", "type": {"type": "int", "logicalType": "date"}}]}"""
    )
    write = compile_writer(schema)
    assert write is not None
    assert write({"day": 3}) == fastavro_bytes(schema, {"day": 3})
    with pytest.raises(Unwritable):
        write({"day": date(1970, 1, 4)})
    assert AvroCodec(schema).encode({"day": date(1970, 1, 4)}) == fastavro_bytes(schema, {"day": 3})


@pytest.mark.parametrize(
    "schema",
    [
        '{"type": "bytes", "logicalType": "decimal", "precision": 4, "scale": 2}',
        '["int", "long"]',  # one Python type for two branches
        '{"type": "record", "name": "Node", "fields": ['
        '{"name": "next", "type": ["null", "Node"]}]}',  # recursive
    ],
)
def test_schemas_it_cannot_tell_apart_or_follow_are_not_compiled(schema: str) -> None:
    assert compile_writer(parse_schema_text(schema)) is None


def test_a_codec_that_compiled_its_writer_still_pickles_and_frames() -> None:
    import pickle

    schema = load_schema_file(SCHEMAS[0].parent / "tweet_view.avsc")
    view = {"id": 1, "tweet": None, "author": {"id": 2, "name": "Ada"}}
    codec = AvroCodec(schema, registry_url="http://registry.invalid:8081", schema_id=7)
    framed = codec.encode(view)
    assert framed == b"\x00\x00\x00\x00\x07" + fastavro_bytes(schema, view)
    assert pickle.loads(pickle.dumps(codec)).encode(view) == framed  # noqa: S301


def whole(schema: Any) -> st.SearchStrategy[Any]:
    """Values of a record schema with every field given (none left to its default)."""
    named = schema["__named_schemas"]
    return st.fixed_dictionaries({f["name"]: values(f["type"], named) for f in schema["fields"]})


@pytest.mark.parametrize("path", SCHEMAS, ids=[p.stem for p in SCHEMAS])
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_a_records_fields_written_apart_and_joined_are_the_records_bytes(
    path: Path, data: Any
) -> None:
    schema = load_schema_file(path)
    codec = AvroCodec(schema, registry_url="http://registry.invalid:8081", schema_id=3)
    writers = codec.field_writers()
    assert writers is not None
    assert [name for name, _ in writers] == [f["name"] for f in schema["fields"]]
    value = data.draw(whole(schema))
    joined = codec.joined([write(value[name]) for name, write in writers])
    assert joined == codec.encode(value) == b"\x00\x00\x00\x00\x03" + fastavro_bytes(schema, value)


def test_a_field_writer_declines_what_the_records_writer_declines() -> None:
    writers = compile_field_writers(EVERY_TYPE)
    assert writers is not None
    for _, write in writers:
        with pytest.raises(DECLINES):
            write(("tuple",))  # no Avro type is written from a tuple


@pytest.mark.parametrize("schema", ['"string"', '{"type": "array", "items": "int"}'])
def test_only_a_record_is_written_by_fields(schema: str) -> None:
    assert compile_field_writers(parse_schema_text(schema)) is None
    assert AvroCodec(parse_schema_text(schema)).field_writers() is None
