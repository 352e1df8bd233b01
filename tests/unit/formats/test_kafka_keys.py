"""The four Kafka key formats: keys read, and written from a join key's text."""

from __future__ import annotations

import fastavro
import pytest

from daemon.formats.avro.codec import AvroCodec
from daemon.formats.kafka_keys import KafkaKeyCodec, avro_key

KEY_RECORD = fastavro.parse_schema(
    {
        "type": "record",
        "name": "Key",
        "fields": [{"name": "tenant", "type": "string"}, {"name": "user_id", "type": "long"}],
    }
)


def test_each_format_decodes_its_keys() -> None:
    assert KafkaKeyCodec("string").decode(b"ada") == "ada"
    assert KafkaKeyCodec("bytes").decode(b"\x01") == b"\x01"
    assert KafkaKeyCodec("json").decode(b'{"id": 7}') == {"id": 7}
    framed = b"\x00\x00\x00\x00\x05" + b'{"id": 7}'  # Confluent's JSON Schema framing
    assert KafkaKeyCodec("json").decode(framed) == {"id": 7}
    avro = KafkaKeyCodec("avro", AvroCodec(KEY_RECORD))
    assert avro.decode(avro.encode_value({"tenant": "acme", "user_id": 7})) == {
        "tenant": "acme",
        "user_id": 7,
    }


@pytest.mark.parametrize(
    ("codec", "raw", "why"),
    [
        (KafkaKeyCodec("string"), b"\xff\xfe", "not UTF-8"),
        (KafkaKeyCodec("json"), b"{nope", "not JSON"),
        (KafkaKeyCodec("avro", AvroCodec(KEY_RECORD)), b"\x02", "not a record of this schema"),
    ],
)
def test_a_key_that_does_not_decode_says_why(codec: KafkaKeyCodec, raw: bytes, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        codec.decode(raw)


def test_output_keys_in_each_format() -> None:
    assert KafkaKeyCodec("string").encode("9") == b"9"
    assert KafkaKeyCodec("json").encode("9") == b'"9"'
    assert KafkaKeyCodec("json").encode('["acme","7"]') == b'["acme","7"]'
    assert KafkaKeyCodec("json").encode(b"raw") == b"raw"  # a kept key goes as it came
    long_key = KafkaKeyCodec("avro", AvroCodec(fastavro.parse_schema("long")))
    assert long_key.decode(long_key.encode("9")) == 9
    record_key = KafkaKeyCodec("avro", AvroCodec(KEY_RECORD))
    assert record_key.decode(record_key.encode('["acme","7"]')) == {
        "tenant": "acme",
        "user_id": 7,
    }


def test_an_output_key_that_does_not_fit_the_key_schema_says_why() -> None:
    with pytest.raises(ValueError, match="is not a long"):
        avro_key(fastavro.parse_schema("long"), "ada")
    with pytest.raises(ValueError, match="does not have the 2 parts"):
        avro_key(KEY_RECORD, "acme")


def test_replay_keys_follow_the_key_format() -> None:
    assert KafkaKeyCodec("string").encode_value(1) == b"1"
    assert KafkaKeyCodec("string").encode_value("a") == b"a"
    assert KafkaKeyCodec("json").encode_value("a") == b'"a"'
    assert KafkaKeyCodec("json").encode_value({"id": 1}) == b'{"id":1}'
    assert KafkaKeyCodec("bytes").encode_value("00ff") == b"\x00\xff"
    assert KafkaKeyCodec("string").encode_value(None) is None
    with pytest.raises(ValueError, match="not hex"):
        KafkaKeyCodec("bytes").encode_value("zz")
    assert KafkaKeyCodec("bytes").to_json(b"\x00\xff") == "00ff"
