"""Where an input record goes: its join key, its event time, and its key's state bucket.

The source routes every record so (:mod:`daemon.source.reading`), and ``daemon replay`` and
the state commands route keys the same way; the rows it packs them into are
:mod:`daemon.model.wire`'s.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from functools import cache
from typing import Any, NamedTuple

from daemon.model.constants import DEFAULT_STATE_BUCKETS

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MILLISECOND = timedelta(milliseconds=1)


def bucket_of(key: str, buckets: int = DEFAULT_STATE_BUCKETS) -> int:
    """The state bucket of a join key, of ``buckets``, by which the operator groups rows.

    The same in every process and every run (a checksum, not Python's salted ``hash``), as a
    checkpoint's state needs. One key's without the list :func:`buckets_of` makes: a
    chain's operators route every record they hand on by it.
    """
    return bucket_labels(buckets)[zlib.crc32(key.encode("utf-8")) % buckets]


def buckets_of(keys: Iterable[str], buckets: int = DEFAULT_STATE_BUCKETS) -> list[int]:
    """:func:`bucket_of` of each key, with the labels looked up once (the source's hot path)."""
    labels = bucket_labels(buckets)
    return [labels[zlib.crc32(key.encode("utf-8")) % buckets] for key in keys]


def _spark_hash_int(value: int, seed: int = 42) -> int:
    """Spark's ``hash()`` of one int column (Murmur3 x86 32-bit), which places shuffle rows."""

    def rotate(x: int, r: int) -> int:
        return ((x << r) | (x >> (32 - r))) & 0xFFFFFFFF

    k1 = rotate((value * 0xCC9E2D51) & 0xFFFFFFFF, 15) * 0x1B873593 & 0xFFFFFFFF
    h1 = (rotate(seed ^ k1, 13) * 5 + 0xE6546B64) & 0xFFFFFFFF
    h1 ^= 4
    h1 ^= h1 >> 16
    h1 = (h1 * 0x85EBCA6B) & 0xFFFFFFFF
    h1 ^= h1 >> 13
    h1 = (h1 * 0xC2B2AE35) & 0xFFFFFFFF
    h1 ^= h1 >> 16
    return h1 - (1 << 32) if h1 & 0x80000000 else h1


@cache
def bucket_labels(count: int, spread: int = 16) -> tuple[int, ...]:
    """The labels of ``count`` state buckets, as the source writes them in ``bucket``.

    Labels that Spark's shuffle deals out evenly to 1, 2, 4, 8 or 16 partitions: Spark places
    a grouped row by ``pmod(hash(label), partitions)``; plain labels fall unevenly (128
    labels 0-127 fall 54/74 on two partitions), and the larger task sets the pace of every
    micro-batch. Label ``i`` is the smallest unused number whose hash falls at ``i`` modulo
    ``spread``.
    """
    labels: list[int] = []
    candidate = 0
    pending: dict[int, list[int]] = {}
    for i in range(count):
        want = i % spread
        while not pending.get(want):
            pending.setdefault(_spark_hash_int(candidate) % spread, []).append(candidate)
            candidate += 1
        labels.append(pending[want].pop(0))
    return tuple(labels)


class Routing(NamedTuple):
    """Where a decoded input record goes: its join key and event time, or why it cannot join.

    ``error`` is ``"Kind: message"`` (the kind becomes the dead letter's ``enrichd.error.class``).
    """

    key: str | None
    event_time: int
    error: str | None


def route(
    value: dict[str, Any] | None,
    kafka_key: bytes | None,
    timestamp: int,
    *,
    role: str,
    key_field: str,
    time_field: str | None,
    keyed_tombstones: bool,
) -> Routing:
    """Find a decoded record's join key and event time, as the source does for every record.

    Args:
        value: the decoded record, or None for a tombstone.
        kafka_key: the Kafka key; it routes tombstones of roles whose Kafka key is the join key.
        timestamp: the Kafka timestamp, the event time when ``time_field`` is None.
        role: the input's role, for messages.
        key_field: the join key field.
        time_field: the event-time field, or None.
        keyed_tombstones: whether this role's tombstones route by their Kafka key.
    """
    if value is None:
        # A tombstone has no fields: only its Kafka key can say what it deletes.
        if not keyed_tombstones:
            return Routing(
                None,
                timestamp,
                f"UnroutableTombstone: a {role!r} tombstone carries no join key "
                f"({key_field!r}); this joiner deletes on that side by a record",
            )
        if kafka_key is None:
            return Routing(None, timestamp, "UnroutableTombstone: tombstone without a Kafka key")
        return Routing(kafka_key.decode("utf-8", "replace"), timestamp, None)
    raw_time = None if time_field is None else field_at(value, time_field)
    raw_key = field_at(value, key_field)
    if isinstance(raw_key, bytes):  # as daemon.model.keys.part_text writes bytes; never scanned
        raw_key = raw_key.hex()
    return route_fields(raw_key, raw_time, timestamp, key_field, time_field)


def route_fields(
    raw_key: Any,
    raw_time: Any,
    timestamp: int,
    key_field: str | tuple[str, ...],
    time_field: str | None,
) -> Routing:
    """Route a record by its join key and event-time values, read or decoded (see :func:`route`)."""
    if raw_key is None:
        return Routing(None, timestamp, f"MissingKey: no join key field {key_field!r}")
    if time_field is None:
        return Routing(str(raw_key), timestamp, None)
    if isinstance(raw_time, datetime):  # Avro timestamp-millis/-micros; local-* ones are naive
        aware = raw_time if raw_time.tzinfo else raw_time.replace(tzinfo=UTC)
        return Routing(str(raw_key), (aware - _EPOCH) // _MILLISECOND, None)
    if isinstance(raw_time, int) and not isinstance(raw_time, bool):
        return Routing(str(raw_key), raw_time, None)
    return Routing(None, timestamp, f"MissingEventTime: no integer event-time field {time_field!r}")


def field_at(value: Any, path: str) -> Any:
    """The field named by ``path``; a dotted path (``"author.id"``) reaches into nested records."""
    found: Any = value
    for name in path.split("."):
        if not isinstance(found, dict):
            return None
        found = found.get(name)
    return found
