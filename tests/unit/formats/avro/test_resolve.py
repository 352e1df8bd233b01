"""Conforming decoded values to a newer schema, as Avro resolves old data (no broker)."""

from __future__ import annotations

from typing import Any

import fastavro

from daemon.formats.avro.codec import AvroCodec
from daemon.formats.avro.resolve import conform

USER_V2 = fastavro.parse_schema(
    {
        "type": "record",
        "name": "User",
        "fields": [
            {"name": "id", "type": "long"},
            {"name": "email", "type": "string", "default": ""},
            {"name": "tags", "type": {"type": "array", "items": "string"}, "default": []},
        ],
    }
)
VIEW_V2 = fastavro.parse_schema(
    {
        "type": "record",
        "name": "View",
        "fields": [
            {"name": "author", "type": ["null", USER_V2]},
            {"name": "others", "type": {"type": "array", "items": "User"}},
            {"name": "by_name", "type": {"type": "map", "values": "User"}},
            {"name": "n", "type": "long"},
        ],
    }
)


def test_a_record_of_the_old_schema_takes_the_new_defaults_and_drops_what_went() -> None:
    old = {"id": 7, "avatar": "a.png"}  # decoded when User had an optional avatar, no email
    assert conform(old, USER_V2) == {"id": 7, "email": "", "tags": []}
    assert old == {"id": 7, "avatar": "a.png"}  # left as it was


def test_nested_records_in_unions_arrays_maps_and_named_references_conform() -> None:
    old = {"id": 1, "avatar": None}
    view: dict[str, Any] = {"author": old, "others": [old], "by_name": {"ada": old}, "n": 3}
    conformed = conform(view, VIEW_V2)
    new = {"id": 1, "email": "", "tags": []}
    assert conformed == {"author": new, "others": [new], "by_name": {"ada": new}, "n": 3}
    assert AvroCodec(VIEW_V2).decode(AvroCodec(VIEW_V2).encode(conformed)) == conformed
    assert conform({**view, "author": None}, VIEW_V2)["author"] is None


def test_a_field_without_default_stays_missing_so_the_encoding_says_so() -> None:
    assert conform({"email": "a@b"}, USER_V2) == {"email": "a@b", "tags": []}


def test_a_value_of_the_current_schema_is_unchanged() -> None:
    current = {"id": 2, "email": "x", "tags": ["t"]}
    assert conform(current, USER_V2) == current
