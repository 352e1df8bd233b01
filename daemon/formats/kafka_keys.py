"""Kafka keys in four formats: read into values, and written from a join key's text.

A Kafka key is read in the input's ``key_format`` (:data:`daemon.model.keys.KeyFormat`) by a
:class:`KafkaKeyCodec`: UTF-8 text, Avro (plain or Confluent framing, through
:class:`daemon.formats.avro.codec.AvroCodec`), JSON, or the bytes as they are. An output
writes its keys the same way, from the join key's text (:func:`daemon.model.keys.join_key`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from daemon.formats.avro.codec import AvroCodec
from daemon.model.keys import KeyFormat, key_texts

_CONFLUENT_MAGIC = 0
_CONFLUENT_HEADER = 5


@dataclass
class KafkaKeyCodec:
    """Reads and writes one topic's Kafka keys in its ``key_format``; picklable.

    Attributes:
        key_format: the format (:data:`KeyFormat`).
        avro: the codec of Avro keys (``key_format = "avro"`` only).
    """

    key_format: KeyFormat = "string"
    avro: AvroCodec | None = None

    def decode(self, raw: bytes) -> Any:
        """The key's value: text, an Avro value (a dict for a record), a JSON value, or bytes.

        Raises:
            ValueError: the bytes are not a key of this format; the message says why.
        """
        if self.key_format == "string":
            try:
                return raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise ValueError(f"not UTF-8 text ({exc.reason} at byte {exc.start})") from None
        if self.key_format == "bytes":
            return raw
        if self.key_format == "json":
            # Confluent's JSON Schema serializer frames JSON as Avro is framed; JSON text
            # never starts with a zero byte, so a framed key is told apart by its first byte.
            start = _CONFLUENT_HEADER if raw[:1] == bytes([_CONFLUENT_MAGIC]) else 0
            try:
                return json.loads(raw[start:])
            except (UnicodeDecodeError, json.JSONDecodeError) as exc:
                raise ValueError(f"not JSON ({exc})") from None
        assert self.avro is not None  # noqa: S101 - an Avro key format always has its codec
        return self.avro.decode(raw)

    def encode(self, key: str | bytes) -> bytes:
        """A Kafka key of this format for a key's text, as a joiner emits it.

        ``string`` and ``bytes`` write the text as UTF-8; ``json`` a JSON string, or the
        array of a key of several parts (a text that is a JSON array of strings, as
        :func:`~daemon.model.keys.join_key` writes them); ``avro`` converts the text to the
        key schema's types (:func:`avro_key`). Bytes (a key the joiner kept as it came, as
        ``lookup`` keeps the stream's) are written as they are.

        Raises:
            ValueError: the key does not fit the key schema.
        """
        if isinstance(key, bytes):
            return key
        if self.key_format in ("string", "bytes"):
            return key.encode("utf-8")
        if self.key_format == "json":
            texts = key_texts(key)
            value: Any = key if texts is None else texts
            return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
        assert self.avro is not None  # noqa: S101 - an Avro key format always has its codec
        return self.avro.encode(avro_key(self.avro.schema, key))

    def encode_value(self, key: Any) -> bytes | None:
        """A Kafka key of this format from a JSON value, as replay input files give keys.

        ``string``: a string as it is, other values as their JSON text; ``json``: the JSON
        text; ``avro``: the value encoded with the key schema (a record as an object);
        ``bytes``: a string of hex digits.

        Raises:
            ValueError: the value does not fit the format.
        """
        if key is None:
            return None
        if self.key_format == "string":
            return (key if isinstance(key, str) else json.dumps(key)).encode("utf-8")
        if self.key_format == "json":
            return json.dumps(key, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
        if self.key_format == "bytes":
            if not isinstance(key, str):
                raise ValueError("a bytes key is a string of hex digits")
            try:
                return bytes.fromhex(key)
            except ValueError:
                raise ValueError(f"{key!r} is not hex digits") from None
        assert self.avro is not None  # noqa: S101 - an Avro key format always has its codec
        return self.avro.encode(key)

    def to_json(self, raw: bytes) -> Any:
        """A key as replay prints it: the decoded value, bytes as hex; undecodable: its text."""
        try:
            value = self.decode(raw)
        except ValueError:
            return raw.decode("utf-8", "replace")
        return value.hex() if isinstance(value, bytes) else value


def avro_key(schema: Any, key: str) -> Any:
    """The Avro value of a key from its text: a scalar, or a record with a field per part.

    A record schema of several fields takes a key of as many parts (a JSON array of their
    texts, as :func:`~daemon.model.keys.join_key` writes it), in the order of its fields; a
    record of one field, or a scalar schema, takes the text as one part. Each part's text is
    converted to its field's type.

    Raises:
        ValueError: the key does not fit the schema.
    """
    if isinstance(schema, dict) and schema.get("type") == "record":
        fields = schema["fields"]
        texts = [key] if len(fields) == 1 else key_texts(key)
        if texts is None or len(texts) != len(fields):
            raise ValueError(
                f"key {key!r} does not have the {len(fields)} parts of key schema {schema['name']}"
            )
        return {f["name"]: _scalar(f["type"], text) for f, text in zip(fields, texts, strict=True)}
    return _scalar(schema, key)


def _scalar(schema: Any, text: str) -> Any:
    """``text`` as a value of the Avro type ``schema`` (the non-null branch of a union)."""
    if isinstance(schema, list):
        branches = [branch for branch in schema if branch != "null"]
        if len(branches) != 1:
            raise ValueError(f"a key part cannot be written as the union {schema}")
        schema = branches[0]
    kind = schema.get("type") if isinstance(schema, dict) else schema
    try:
        if kind in ("int", "long"):
            return int(text)
        if kind in ("float", "double"):
            return float(text)
        if kind == "boolean":
            if text.lower() not in ("true", "false"):
                raise ValueError
            return text.lower() == "true"
        if kind == "bytes":
            return bytes.fromhex(text)
    except ValueError:
        raise ValueError(f"key part {text!r} is not a {kind}") from None
    if kind in ("string", "enum"):
        return text
    raise ValueError(f"a key part cannot be written as Avro type {kind!r}")
