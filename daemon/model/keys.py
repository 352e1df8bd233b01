"""Join keys: where their parts come from, their one text form, and the Kafka key formats.

How it works: an input's ``key`` names one part (``"user"``) or several (``["tenant",
"user_id"]``); each part is a dotted path into the record's value, or, spelled
``kafka_key`` or ``kafka_key.FIELD``, the decoded Kafka key or one of its fields
(:func:`key_parts`). Records match when every part is equal, compared as text: a join key is
one string (:func:`join_key`), a single part's text as it is, several parts' texts as a JSON
array (``["acme","42"]``), which no separator inside a part can make ambiguous.

A Kafka key is read in the input's ``key_format`` (:data:`KeyFormat`) by
:class:`daemon.formats.kafka_keys.KafkaKeyCodec`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

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


def key_texts(key: str) -> list[str] | None:
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
