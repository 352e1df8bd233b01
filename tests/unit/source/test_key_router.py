"""Routing by composite keys, Kafka keys and Debezium envelopes (daemon/source/key_router.py)."""

from __future__ import annotations

from typing import Any

import fastavro
import pytest

from daemon.formats.avro.codec import AvroCodec
from daemon.formats.kafka_keys import KafkaKeyCodec
from daemon.model.keys import key_parts
from daemon.model.record_route import Routing, route
from daemon.source.key_router import KeyRouter

ID_KEY = AvroCodec(
    fastavro.parse_schema(
        {"type": "record", "name": "Key", "fields": [{"name": "id", "type": "long"}]}
    )
)


def router(key: Any, *, time: str | None = None, keyed: bool = True, **extra: Any) -> KeyRouter:
    return KeyRouter("table", key_parts(key), time, keyed, **extra)


def test_a_composite_key_joins_its_parts() -> None:
    routed = router(["tenant", "user_id"]).route({"tenant": "acme", "user_id": 7}, None, 5)
    assert routed == Routing('["acme","7"]', 5, None)


def test_a_missing_part_names_its_field() -> None:
    routed = router(["tenant", "user_id"]).route({"tenant": "acme", "user_id": None}, None, 5)
    assert routed == Routing(None, 5, "MissingKey: no join key field 'user_id'")


def test_event_time_comes_from_the_value_as_before() -> None:
    routed = router(["a", "b"], time="at").route({"a": 1, "b": 2, "at": 99}, None, 5)
    assert routed == Routing('["1","2"]', 99, None)
    late = router(["a", "b"], time="at").route({"a": 1, "b": 2, "at": "x"}, None, 5)
    assert late.error is not None and late.error.startswith("MissingEventTime")


def test_a_key_from_the_kafka_key_in_each_format() -> None:
    value = {"name": "ada"}
    assert router("kafka_key").route(value, b"u1", 1).key == "u1"
    json_keys = KafkaKeyCodec("json")
    assert router("kafka_key.id", kafka_keys=json_keys).route(value, b'{"id":3}', 1).key == "3"
    assert router("kafka_key", kafka_keys=json_keys).route(value, b"3", 1).key == "3"
    avro = KafkaKeyCodec("avro", ID_KEY)
    raw = avro.encode_value({"id": 3})
    assert router("kafka_key.id", kafka_keys=avro).route(value, raw, 1).key == "3"
    assert router("kafka_key", kafka_keys=KafkaKeyCodec("bytes")).route(value, b"\x01", 1).key == (
        "01"
    )
    both = router(["kafka_key.id", "name"], kafka_keys=avro).route(value, raw, 1)
    assert both.key == '["3","ada"]'


def test_bad_kafka_keys_go_to_dead_letters_with_the_reason() -> None:
    avro = KafkaKeyCodec("avro", ID_KEY)
    undecodable = router("kafka_key.id", kafka_keys=avro).route({}, b"\xff\xff\xff", 1)
    assert undecodable.error is not None
    assert undecodable.error.startswith("UndecodableKey: key_format 'avro': ")
    missing = router("kafka_key").route({}, None, 1)
    assert missing.error == "MissingKey: the record has no Kafka key"
    record = router("kafka_key", kafka_keys=avro).route({}, avro.encode_value({"id": 3}), 1)
    assert record.error is not None and "name its field, e.g. 'kafka_key.id'" in record.error
    one_value = router("kafka_key.id", kafka_keys=KafkaKeyCodec("json")).route({}, b"3", 1)
    assert one_value.error == (
        "MissingKey: no join key field 'kafka_key.id': the Kafka key is one value, not a record"
    )
    no_field = router("kafka_key.id", kafka_keys=KafkaKeyCodec("json")).route({}, b"{}", 1)
    assert no_field.error == "MissingKey: no join key field 'kafka_key.id'"


def test_a_tombstone_routes_by_its_decoded_key() -> None:
    avro = KafkaKeyCodec("avro", ID_KEY)
    raw = avro.encode_value({"id": 3})
    # key = "id" (a value field): the Avro key's field of that name.
    assert router("id", kafka_keys=avro).route(None, raw, 1) == Routing("3", 1, None)
    assert router("kafka_key.id", kafka_keys=avro).route(None, raw, 1) == Routing("3", 1, None)
    scalar = KafkaKeyCodec("json")
    assert router("id", kafka_keys=scalar).route(None, b"3", 1) == Routing("3", 1, None)
    # A text key is the join key's text, of one part or several.
    assert router(["a", "b"]).route(None, b'["x","y"]', 1) == Routing('["x","y"]', 1, None)
    json_record = KafkaKeyCodec("json")
    composite = router(["tenant", "user_id"], kafka_keys=json_record)
    assert composite.route(None, b'{"tenant":"acme","user_id":7}', 1).key == '["acme","7"]'
    lacking = composite.route(None, b'{"tenant":"acme"}', 1)
    assert lacking.error == "UnroutableTombstone: the tombstone's Kafka key has no 'user_id'"


def test_a_tombstone_on_a_role_without_keyed_tombstones_is_refused() -> None:
    routed = router(["a", "b"], keyed=False).route(None, b"x", 1)
    assert routed.error is not None and routed.error.startswith("UnroutableTombstone")


def test_one_value_field_routes_as_the_common_path_does() -> None:
    """The KeyRouter must agree with the source's own path for what both can route."""
    for value, kafka_key in (({"id": 7}, b"k"), ({"id": "x"}, None), (None, b"7"), ({}, b"1")):
        assert router("id").route(value, kafka_key, 3) == route(
            value,
            kafka_key,
            3,
            role="table",
            key_field="id",
            time_field=None,
            keyed_tombstones=True,
        )


ENVELOPE = {"before": None, "source": {"db": "shop"}, "ts_ms": 1}


@pytest.mark.parametrize("op", ["c", "u", "r"])
def test_a_debezium_row_routes_by_its_fields(op: str) -> None:
    event = {**ENVELOPE, "op": op, "after": {"id": 5, "name": "ada"}}
    assert router("id", envelope="debezium").route(event, None, 9) == Routing("5", 9, None)


def test_a_debezium_delete_routes_by_its_kafka_key() -> None:
    avro = KafkaKeyCodec("avro", ID_KEY)
    event = {**ENVELOPE, "op": "d", "before": {"id": 5}, "after": None}
    table = router("id", kafka_keys=avro, envelope="debezium")
    assert table.route(event, avro.encode_value({"id": 5}), 9) == Routing("5", 9, None)
    stream = router("id", kafka_keys=avro, envelope="debezium", keyed=False)
    refused = stream.route(event, avro.encode_value({"id": 5}), 9).error
    assert refused is not None and refused.startswith("UnroutableTombstone: a 'table' delete")


@pytest.mark.parametrize(
    ("event", "why"),
    [
        ({"after": {"id": 5}}, "no 'op' field"),
        ({"op": None, "after": {"id": 5}}, "no 'op' field"),
        ({"op": "u", "after": None}, "without its 'after' row"),
        ({"op": "t", "after": None}, "truncate"),
        ({"op": "x", "after": {"id": 5}}, "op 'x' is none of c, u, r, d"),
    ],
)
def test_a_value_that_is_no_change_event_says_why(event: dict[str, Any], why: str) -> None:
    routed = router("id", envelope="debezium").route(event, b"5", 9)
    assert routed.key is None and routed.error is not None
    assert routed.error.startswith("InvalidEnvelope: ") and why in routed.error


def test_scanned_fields_are_the_value_parts_then_the_time() -> None:
    assert router(["a", "kafka_key", "b"], time="t").scanned_fields == ("a", "b", "t")
    assert router(["a", "b.c"]).scanned_fields is None  # nested: decoded
    assert router("a", envelope="debezium").scanned_fields is None
    routed = router(["a", "kafka_key", "b"], time="t").route_scanned([1, 2, 40], b"k", 3)
    assert routed == Routing('["1","k","2"]', 40, None)
