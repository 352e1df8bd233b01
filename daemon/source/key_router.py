"""Routing a record by a key of several parts, from its Kafka key, or through an envelope.

The source routes most records by one field of the value, read from the bytes
(:func:`daemon.model.record_route.route_fields`), and that path stays as it is. A :class:`KeyRouter`
routes the rest: join keys of several parts (:mod:`daemon.model.keys`), parts taken from the Kafka
key in its ``key_format``, and Debezium change events (:mod:`daemon.model.envelope`), whose row
is the record and whose delete is a tombstone.

Tombstones and deletes carry no row, so they route by the Kafka key alone, for the roles whose
Kafka key is the join key (``keyed_tombstones``): a part taken from the Kafka key as always;
a part named by a value field, from the key's field of that name when the key is a record
(a Debezium key ``{id}`` for ``key = "id"``), or the whole key when it is one value and
the join key has one part. A key in text (``key_format = "string"``) is the join key's text
as it is, also for a key of several parts.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from daemon.formats.kafka_keys import KafkaKeyCodec
from daemon.model.envelope import Envelope, debezium_row
from daemon.model.keys import KeyPart, join_key
from daemon.model.record_route import Routing, field_at, route_fields

_UNREAD: Any = object()


@dataclass(frozen=True)
class KeyRouter:
    """How one input's records find their join key and event time (see the module docstring).

    Attributes:
        role: the input's role, for messages.
        key: the join key's parts.
        time_field: the event-time field of the value (of the row, with an envelope), or
            None for the Kafka timestamp.
        keyed_tombstones: whether tombstones and deletes of this role route by the Kafka key.
        kafka_keys: the codec of the topic's Kafka keys.
        envelope: the value's envelope, or None when the value is the row.
    """

    role: str
    key: tuple[KeyPart, ...]
    time_field: str | None
    keyed_tombstones: bool
    kafka_keys: KafkaKeyCodec = field(default_factory=KafkaKeyCodec)
    envelope: Envelope | None = None

    @cached_property
    def value_paths(self) -> tuple[str, ...]:
        """The paths of the parts that come from the value, in the key's order."""
        return tuple(part.path for part in self.key if not part.from_kafka_key)

    @cached_property
    def scanned_fields(self) -> tuple[str, ...] | None:
        """The value's fields :meth:`route_scanned` takes (parts, then event time), or None.

        None when a record must be decoded to be routed: an envelope, or a dotted path.
        """
        names = self.value_paths + (() if self.time_field is None else (self.time_field,))
        if self.envelope is not None or any("." in name for name in names):
            return None
        return names

    @cached_property
    def _key_name(self) -> str:
        names = [part.name for part in self.key]
        return repr(names[0]) if len(names) == 1 else repr(names)

    def route(
        self, value: dict[str, Any] | None, kafka_key: bytes | None, timestamp: int
    ) -> Routing:
        """Route a decoded value (None: a tombstone) with its Kafka key and timestamp."""
        if value is not None and self.envelope is not None:
            row, error = debezium_row(value)
            if error is not None:
                return Routing(None, timestamp, error)
            value = row
        if value is None:
            return self._deleted(kafka_key, timestamp)
        values = [field_at(value, path) for path in self.value_paths]
        raw_time = None if self.time_field is None else field_at(value, self.time_field)
        return self._routed(values, raw_time, kafka_key, timestamp)

    def route_scanned(
        self, fields: Sequence[Any], kafka_key: bytes | None, timestamp: int
    ) -> Routing:
        """Route a record by its :attr:`scanned_fields`, read from its bytes."""
        count = len(self.value_paths)
        raw_time = fields[count] if self.time_field is not None else None
        return self._routed(fields[:count], raw_time, kafka_key, timestamp)

    def _routed(
        self, values: Sequence[Any], raw_time: Any, kafka_key: bytes | None, timestamp: int
    ) -> Routing:
        parts: list[Any] = []
        from_value = iter(values)
        decoded = _UNREAD
        for part in self.key:
            if not part.from_kafka_key:
                found = next(from_value)
            else:
                if decoded is _UNREAD:
                    decoded = self._decoded_key(kafka_key, timestamp)
                    if isinstance(decoded, Routing):
                        return decoded
                found = _key_part(decoded, part)
                if isinstance(found, Routing):
                    return Routing(None, timestamp, found.error)
            if found is None:
                return Routing(None, timestamp, f"MissingKey: no join key field {part.name!r}")
            parts.append(found)
        return route_fields(join_key(parts), raw_time, timestamp, self._key_name, self.time_field)

    def _decoded_key(self, kafka_key: bytes | None, timestamp: int) -> Any:
        """The decoded Kafka key, or the Routing that says why there is none."""
        if kafka_key is None:
            return Routing(None, timestamp, "MissingKey: the record has no Kafka key")
        try:
            return self.kafka_keys.decode(kafka_key)
        except Exception as exc:  # noqa: BLE001 - any failure of a decode: bad bytes
            return Routing(
                None,
                timestamp,
                f"UndecodableKey: key_format {self.kafka_keys.key_format!r}: {exc}",
            )

    def _deleted(self, kafka_key: bytes | None, timestamp: int) -> Routing:
        """Route a tombstone or a delete by its Kafka key alone."""
        what = "delete" if self.envelope is not None else "tombstone"
        if not self.keyed_tombstones:
            return Routing(
                None,
                timestamp,
                f"UnroutableTombstone: a {self.role!r} {what} carries no join key "
                f"({self._key_name}); this joiner deletes on that side by a record",
            )
        if kafka_key is None:
            return Routing(None, timestamp, f"UnroutableTombstone: {what} without a Kafka key")
        decoded = self._decoded_key(kafka_key, timestamp)
        if isinstance(decoded, Routing):
            return decoded
        if self.kafka_keys.key_format == "string" and not any(p.from_kafka_key for p in self.key):
            return Routing(decoded, timestamp, None)  # the text is the join key's text
        parts = []
        for part in self.key:
            found = _key_part(decoded, part, whole=len(self.key) == 1)
            if isinstance(found, Routing) or found is None:
                return Routing(
                    None,
                    timestamp,
                    f"UnroutableTombstone: the {what}'s Kafka key has no {part.name!r}",
                )
            parts.append(found)
        return Routing(join_key(parts), timestamp, None)


def _key_part(decoded: Any, part: KeyPart, *, whole: bool = False) -> Any:
    """One key part from a decoded Kafka key, or a Routing with the error.

    A part from the Kafka key is the key (empty path) or its field; a part named by a value
    field is that field of a record key, or, with ``whole``, a key of one value.
    """
    path = part.path
    if isinstance(decoded, dict):
        if not path:
            return Routing(
                None,
                0,
                f"MissingKey: the Kafka key is a record, not one value; name its field, e.g. "
                f"'{part.name}.{next(iter(decoded), 'id')}'",
            )
        return field_at(decoded, path)
    if isinstance(decoded, list):
        return Routing(None, 0, "MissingKey: the Kafka key is a list, not one value")
    if not path or (whole and not part.from_kafka_key):
        return decoded
    if part.from_kafka_key and decoded is not None:
        return Routing(
            None,
            0,
            f"MissingKey: no join key field {part.name!r}: the Kafka key is one value, "
            "not a record",
        )
    return None
