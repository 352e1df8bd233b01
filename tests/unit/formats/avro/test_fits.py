"""Whether values of one Avro type can be written as another, as enrichd writes output."""

from __future__ import annotations

from typing import Any

import pytest

from daemon.formats.avro.codec import parse_schema_text
from daemon.formats.avro.fits import misfit, named_types

NULLABLE = 'it may be null, which {} cannot hold; make it a union with "null"'
INNER = {"type": "record", "name": "Inner", "fields": [{"name": "x", "type": "int"}]}


def record(name: str, *fields: dict[str, Any]) -> dict[str, Any]:
    return {"type": "record", "name": name, "fields": list(fields)}


@pytest.mark.parametrize(
    ("source", "target", "why"),
    [
        ("int", "long", None),
        ("long", "double", None),
        ("long", "int", "a long does not fit an int"),
        ("string", "bytes", "a string does not fit a bytes"),
        ("null", ["null", "string"], None),
        ("null", "string", NULLABLE.format("a string")),
        (["null", "int"], ["null", "long"], None),
        (["null", "int"], "long", NULLABLE.format("a long")),
        ({"type": "enum", "name": "E", "symbols": ["A"]}, "string", None),
        ({"type": "enum", "name": "E", "symbols": ["A", "B"]},
         {"type": "enum", "name": "F", "symbols": ["A"]}, "enum symbol 'B' is not in enum F"),
        ({"type": "array", "items": "int"}, {"type": "array", "items": "long"}, None),
        ({"type": "map", "values": "long"}, {"type": "map", "values": "int"},
         "values: a long does not fit an int"),
        (INNER, record("Out", {"name": "x", "type": "long"}), None),
        (INNER, record("Out", {"name": "y", "type": "int"}), "field 'x' is not in record Out"),
        (INNER, record("Out", {"name": "x", "type": "int"}, {"name": "z", "type": "int"}),
         "record Out has field 'z', which has no default and no value"),
        (INNER,
         record("Out", {"name": "x", "type": "int"}, {"name": "z", "type": "int", "default": 0}),
         None),
        (INNER, ["null", record("Out", {"name": "x", "type": "string"})],
         "field 'x': an int does not fit a string"),
    ],
)  # fmt: skip
def test_what_fits_and_why_not(source: Any, target: Any, why: str | None) -> None:
    assert misfit(source, {}, target, {}) == why


def test_named_types_are_looked_up_in_their_own_schemas() -> None:
    source = parse_schema_text(
        '{"type": "record", "name": "A", "fields": [{"name": "i", "type": '
        '{"type": "record", "name": "I", "fields": [{"name": "x", "type": "int"}]}}, '
        '{"name": "j", "type": "I"}]}'
    )
    target = parse_schema_text(
        '{"type": "record", "name": "B", "fields": [{"name": "i", "type": '
        '{"type": "record", "name": "J", "fields": [{"name": "x", "type": "long"}]}}, '
        '{"name": "j", "type": "J"}]}'
    )
    assert misfit(source, named_types(source), target, named_types(target)) is None
    narrow = parse_schema_text(
        '{"type": "record", "name": "C", "fields": [{"name": "i", "type": '
        '{"type": "record", "name": "K", "fields": [{"name": "x", "type": "long"}]}}, '
        '{"name": "j", "type": "string"}]}'
    )
    assert misfit(source, named_types(source), narrow, named_types(narrow)) == (
        "field 'j': a record I does not fit a string"
    )


def test_a_recursive_type_is_checked_once() -> None:
    node = parse_schema_text(
        '{"type": "record", "name": "Node", "fields": [{"name": "v", "type": "int"}, '
        '{"name": "next", "type": ["null", "Node"]}]}'
    )
    assert misfit(node, named_types(node), node, named_types(node)) is None
