"""AvroCodec: plain and Confluent-framed round trips, schema evolution, and bad data (no Spark)."""

from __future__ import annotations

import pickle
import struct
from typing import Any

import pytest
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

from daemon.formats.avro.codec import AvroCodec, load_schema_file, parse_schema_text
from tests.kafka_helpers import SCHEMAS

USER = load_schema_file(SCHEMAS / "user.avsc")
TWEET = load_schema_file(SCHEMAS / "tweet.avsc")
VIEW = load_schema_file(SCHEMAS / "tweet_view.avsc")

OLD_USER_TEXT = """{"type": "record", "name": "User", "namespace": "enrichd.examples",
    "fields": [{"name": "id", "type": "long"}, {"name": "name", "type": "string"}]}"""
OLD_USER = parse_schema_text(OLD_USER_TEXT)
USER_TEXT = (SCHEMAS / "user.avsc").read_text(encoding="utf-8")

ADA = {"id": 1, "name": "Ada", "avatar": None, "updated_at": 1000}
GRACE = {"id": -(2**62), "name": "Grace ✓", "avatar": "grace.png", "updated_at": 2**40}
TWEET_1 = {"id": 100, "author_id": 1, "content": ""}
VIEWS = [
    {"id": 100, "tweet": TWEET_1, "author": ADA},
    {"id": 101, "tweet": {**TWEET_1, "id": 101}, "author": GRACE},
    {"id": 102, "tweet": None, "author": None},
]


def confluent(schema: Any, schema_id: int, writers: dict[int, Any] | None = None) -> AvroCodec:
    codec = AvroCodec(schema, registry_url="http://registry.invalid:8081", schema_id=schema_id)
    codec._writers.update(writers or {schema_id: schema})
    return codec


def mock_registry() -> Any:
    return SchemaRegistryClient.new_client({"url": "mock://enrichd-tests"})


@pytest.mark.parametrize(
    ("schema", "record"),
    [(USER, ADA), (USER, GRACE), (TWEET, TWEET_1)] + [(VIEW, view) for view in VIEWS],
)
def test_round_trips_plain_and_confluent(schema: Any, record: dict[str, Any]) -> None:
    plain = AvroCodec(schema)
    assert plain.decode(plain.encode(record)) == record

    framed = confluent(schema, 7)
    data = framed.encode(record)
    assert data[:5] == b"\x00" + struct.pack(">I", 7)
    assert data[5:] == plain.encode(record)
    assert framed.decode(data) == record


def test_defaults_fill_fields_left_out_when_encoding() -> None:
    codec = AvroCodec(USER)
    assert codec.decode(codec.encode({"id": 3, "name": "Lin"})) == {
        "id": 3,
        "name": "Lin",
        "avatar": None,
        "updated_at": 0,
    }


def test_old_writer_new_reader_fills_the_added_fields_with_defaults() -> None:
    old = AvroCodec(OLD_USER).encode({"id": 1, "name": "Ada"})
    expected = {"id": 1, "name": "Ada", "avatar": None, "updated_at": 0}
    assert AvroCodec(USER, writer_schema=OLD_USER).decode(old) == expected
    framed = b"\x00" + struct.pack(">I", 1) + old
    assert confluent(USER, 2, {1: OLD_USER, 2: USER}).decode(framed) == expected


def test_new_writer_old_reader_ignores_the_extra_fields() -> None:
    new = AvroCodec(USER).encode(GRACE)
    expected = {"id": GRACE["id"], "name": GRACE["name"]}
    assert AvroCodec(OLD_USER, writer_schema=USER).decode(new) == expected
    framed = b"\x00" + struct.pack(">I", 2) + new
    assert confluent(OLD_USER, 1, {1: OLD_USER, 2: USER}).decode(framed) == expected


def test_confluent_writer_schema_comes_from_the_registry_by_id() -> None:
    registry = mock_registry()
    old_id = registry.register_schema("users-value", Schema(OLD_USER_TEXT, "AVRO"))
    reader = AvroCodec(USER, registry_url="mock://enrichd-tests")
    reader._client = registry
    framed = (
        b"\x00" + struct.pack(">I", old_id) + AvroCodec(OLD_USER).encode({"id": 9, "name": "N"})
    )
    assert reader.decode(framed) == {"id": 9, "name": "N", "avatar": None, "updated_at": 0}
    assert old_id in reader._writers  # fetched once, then cached
    copy = pickle.loads(pickle.dumps(reader))  # noqa: S301 - what Spark ships to executors
    assert copy._client is None and copy._writers == reader._writers
    assert copy.decode(framed) == reader.decode(framed)


def test_a_record_missing_a_field_fails_to_encode_naming_it() -> None:
    with pytest.raises(ValueError, match="name"):
        AvroCodec(USER).encode({"id": 1})
    with pytest.raises(ValueError, match="content"):
        AvroCodec(TWEET).encode({"id": 1, "author_id": 2})
    with pytest.raises(ValueError, match="tweet"):
        AvroCodec(VIEW).encode({"id": 1, "tweet": {"id": 1, "author_id": 2}, "author": None})


def test_a_field_of_the_wrong_type_fails_to_encode_naming_it() -> None:
    with pytest.raises(ValueError, match="id"):
        AvroCodec(USER).encode({"id": "one", "name": "Ada"})


@pytest.mark.parametrize("framing", ["plain", "confluent"])
def test_trailing_garbage_fails_to_decode(framing: str) -> None:
    codec = AvroCodec(USER) if framing == "plain" else confluent(USER, 4)
    data = codec.encode(ADA)
    assert codec.decode(data) == ADA
    with pytest.raises(ValueError, match="2 bytes left"):
        codec.decode(data + b"\x00\x01")


@pytest.mark.parametrize("framing", ["plain", "confluent"])
@pytest.mark.parametrize("data", [b"", b"\x02", b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff"])
def test_truncated_or_random_bytes_fail_to_decode_with_value_error(
    framing: str, data: bytes
) -> None:
    codec = AvroCodec(USER) if framing == "plain" else confluent(USER, 4)
    if framing == "confluent":
        data = b"\x00" + struct.pack(">I", 4) + data
    with pytest.raises(ValueError):
        codec.decode(data)


def test_confluent_codec_rejects_unframed_bytes() -> None:
    plain = AvroCodec(USER).encode(ADA)
    with pytest.raises(ValueError, match="not Confluent framing"):
        confluent(USER, 4).decode(plain)
