"""Join keys: their parts as configured, and their one text form."""

from __future__ import annotations

import json

from daemon.model.keys import join_key, key_parts, part_text


def test_a_single_part_reads_as_it_always_did() -> None:
    assert join_key(["ada"]) == "ada"
    assert join_key([42]) == "42"  # an int field matches a string "42" elsewhere, as before


def test_a_composite_key_is_the_json_array_of_its_parts_texts() -> None:
    assert join_key(["acme", 42]) == '["acme","42"]'
    assert join_key(["a", "b"]) == '["a","b"]'


def test_composite_keys_cannot_collide_through_separators() -> None:
    # Joined with a separator, ("a,b", "c") and ("a", "b,c") would be the same key.
    assert join_key(["a,b", "c"]) != join_key(["a", "b,c"])
    assert join_key(['a"', "b"]) != join_key(["a", '"b'])
    assert json.loads(join_key(['a"]', "ü"])) == ['a"]', "ü"]


def test_bytes_are_written_as_hex() -> None:
    assert part_text(b"\x00\xff") == "00ff"


def test_key_parts_tell_value_fields_from_the_kafka_key() -> None:
    tenant, whole, field = key_parts(["tenant", "kafka_key", "kafka_key.id"])
    assert (tenant.from_kafka_key, tenant.path) == (False, "tenant")
    assert (whole.from_kafka_key, whole.path) == (True, "")
    assert (field.from_kafka_key, field.path, field.name) == (True, "id", "kafka_key.id")
    (nested,) = key_parts("author.id")
    assert (nested.from_kafka_key, nested.path) == (False, "author.id")
