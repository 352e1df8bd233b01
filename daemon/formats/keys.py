"""Join keys: where their parts come from, their one text form, and Kafka keys in four formats.

How it works: an input's ``key`` names one part (``"user"``) or several (``["tenant",
"user_id"]``); each part is a dotted path into the record's value, or, spelled
``kafka_key`` or ``kafka_key.FIELD``, the decoded Kafka key or one of its fields
(:func:`key_parts`). Records match when every part is equal, compared as text: a join key is
one string (:func:`join_key`), a single part's text as it is, several parts' texts as a JSON
array (``["acme","42"]``), which no separator inside a part can make ambiguous.

A Kafka key is read in the input's ``key_format`` (:data:`KeyFormat`) by a
:class:`KafkaKeyCodec`: UTF-8 text, Avro (plain or Confluent framing, through
:class:`daemon.formats.avro.codec.AvroCodec`), JSON, or the bytes as they are. An output
writes its keys the same way, from the join key's text.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from daemon.formats.avro.codec import AvroCodec

KeyFormat = Literal["string", "avro", "json", "bytes"]
"""How a topic's Kafka keys are encoded: ``string`` (UTF-8 text, the default), ``avro``
(a schema from an .avsc file or the registry's ``<topic>-key`` subject), ``json`` (JSON
text, with or without Confluent's 5-byte framing), ``bytes`` (taken as they are; their
text is their hex digits)."""

KAFKA_KEY = "kafka_key"
"""A key part spelled so is the decoded Kafka key; ``kafka_key.FIELD`` is one of its fields."""


@dataclass(frozen=True)
class KeyPart:
    """One part of a join key, as configured.

    Attributes:
        name: the part as written in the pipeline file (``"user_id"``, ``"kafka_key.id"``).
        path: the dotted path of the part: into the value, or into the decoded Kafka key
            (``""``: the whole key).
        from_kafka_key: whether the part comes from the Kafka key.
    """

    name: str
    path: str
    from_kafka_key: bool


def key_parts(key: str | Sequence[str]) -> tuple[KeyPart, ...]:
    """The parts of a configured ``key``: one field name, or a list of them."""
    names = [key] if isinstance(key, str) else list(key)
    parts = []
    for name in names:
        head, _, rest = name.partition(".")
        if head == KAFKA_KEY:
            parts.append(KeyPart(name, rest, True))
        else:
            parts.append(KeyPart(name, name, False))
    return tuple(parts)


def uses_kafka_key(key: str | Sequence[str]) -> bool:
    """Whether any part of ``key`` comes from the Kafka key."""
    return any(part.from_kafka_key for part in key_parts(key))


def part_text(value: Any) -> str:
    """The text of one key part: strings as they are, bytes as hex digits, others ``str()``-ed.

    Bytes as hex, so that a ``bytes`` Kafka key and an Avro ``bytes`` field of the same
    bytes give the same text.
    """
    if isinstance(value, str):
        return value
    if isinstance(value, bytes | bytearray):
        return bytes(value).hex()
    return str(value)


def join_key(values: Sequence[Any]) -> str:
    """The join key of a record whose key parts are ``values``: its text form.

    One part: that part's text (so single-field keys read as they always did). Several:
    the JSON array of the parts' texts, compact, e.g. ``["acme","42"]``.
    """
    if len(values) == 1:
        return part_text(values[0])
    return json.dumps([part_text(v) for v in values], ensure_ascii=False, separators=(",", ":"))


def _texts_of(key: str) -> list[str] | None:
    """The parts' texts of a key of several parts (a JSON array of strings), else None."""
    if not key.startswith("["):
        return None
    try:
        texts = json.loads(key)
    except json.JSONDecodeError:
        return None
    if isinstance(texts, list) and len(texts) > 1 and all(isinstance(t, str) for t in texts):
        return texts
    return None


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
        :func:`join_key` writes them); ``avro`` converts the text to the key schema's
        types (:func:`avro_key`). Bytes (a key the joiner kept as it came, as ``lookup``
        keeps the stream's) are written as they are.

        Raises:
            ValueError: the key does not fit the key schema.
        """
        if isinstance(key, bytes):
            return key
        if self.key_format in ("string", "bytes"):
            return key.encode("utf-8")
        if self.key_format == "json":
            texts = _texts_of(key)
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
    texts, as :func:`join_key` writes it), in the order of its fields; a record of one
    field, or a scalar schema, takes the text as one part. Each part's text is converted
    to its field's type.

    Raises:
        ValueError: the key does not fit the schema.
    """
    if isinstance(schema, dict) and schema.get("type") == "record":
        fields = schema["fields"]
        texts = [key] if len(fields) == 1 else _texts_of(key)
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
