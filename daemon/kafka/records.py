"""The row shapes that flow between the Kafka source, the joiner operator and the Kafka sink."""

from __future__ import annotations

import zlib
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from functools import cache
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from daemon.constants import DEFAULT_STATE_BUCKETS

_SPARK_TYPES = {pa.string(): "string", pa.binary(): "binary", pa.int32(): "int", pa.int64(): "long"}


def _ddl_of(schema: pa.Schema) -> str:
    """A row shape in Spark's DDL, from its Arrow schema: each shape is stated once."""
    return ", ".join(f"{f.name} {_SPARK_TYPES[f.type]}" for f in schema)


RECORD_ARROW = pa.schema(
    [
        ("input", pa.int32()),
        ("key", pa.string()),
        ("event_time", pa.int64()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("timestamp", pa.int64()),
        ("kafka_key", pa.binary()),
        ("value", pa.binary()),
        ("error", pa.string()),
    ]
)
"""One input record, as the source packs it: ``input`` is the position of its input (role
and topic) in the source's spec, or :data:`CONTROL_INPUT`; ``key`` is its join key (or
:data:`DEAD_LETTER_ROUTE` when ``error`` says why the record cannot be joined); ``value``
keeps the original bytes."""

SOURCE_ARROW = pa.schema([("bucket", pa.int32()), ("records", pa.binary())])

SOURCE_DDL = _ddl_of(SOURCE_ARROW)
"""A source row: a pack of input records (:data:`RECORD_ARROW`, Arrow IPC) of one state
bucket (:func:`bucket_of`), by which the operator groups, all from one Kafka partition.

Why packs and not a row per record: PySpark hands a stateful operator its rows converted one
at a time (as pandas frames, made row by row with ``itertuples``, then a frame per group; or
as Rows, a cell at a time), and Spark moves each row through its shuffle; per record that cost
more than the joining. A pack is one row in Spark, and the operator reads its records a
column at a time (:func:`unpack`). Spark's ``numInputRows`` therefore counts packs: the
records a batch read are its offset ranges' sizes
(:func:`daemon.service.observability.records_read`)."""


def pack(records: pa.RecordBatch, buckets: list[int]) -> pa.RecordBatch:
    """Rows of :data:`SOURCE_ARROW`: the records packed by bucket (``buckets[i]`` is record i's).

    Each bucket's records keep their order in ``records``.
    """
    if not buckets:
        return pa.RecordBatch.from_pylist([], schema=SOURCE_ARROW)
    labels = pa.array(buckets, pa.int32())
    order = pc.sort_indices(labels)  # a stable sort: each bucket keeps its records' order
    by_bucket = records.take(order)
    sorted_labels = labels.take(order).to_numpy()
    starts = [0, *(np.flatnonzero(np.diff(sorted_labels)) + 1).tolist()]
    bounds = zip(starts, [*starts[1:], len(sorted_labels)], strict=True)
    packs = [by_bucket.slice(start, end - start).serialize().to_pybytes() for start, end in bounds]
    return pa.RecordBatch.from_arrays(
        [pa.array(sorted_labels[starts], pa.int32()), pa.array(packs, pa.binary())],
        schema=SOURCE_ARROW,
    )


def unpack(blob: bytes) -> pa.RecordBatch:
    """The records of one pack (see :func:`pack`)."""
    return pa.ipc.read_record_batch(pa.py_buffer(blob), RECORD_ARROW)


SINK_ARROW = pa.schema(
    [
        ("topic", pa.string()),
        ("key", pa.binary()),
        ("value", pa.binary()),
        ("timestamp", pa.int64()),
        ("source_topic", pa.string()),
        ("source_partition", pa.int32()),
        ("source_offset", pa.int64()),
        ("error_class", pa.string()),
        ("error_message", pa.string()),
    ]
)

SINK_DDL = _ddl_of(SINK_ARROW)
"""One output record: its topic (output or dead letters), key, value (null: tombstone), and
Kafka timestamp: that of the input record that caused it, as Kafka Streams does, so
downstream consumers see event order, not enrichd's write time (null: write time). The
other columns become headers when written (:func:`daemon.kafka.task_output.headers_of`): the
input record it came from (``enrichd.source.*``; null when none) and, for a dead letter, why
(``enrichd.error.*``). They travel as flat columns, not a list of header structs, because
converting nested values between Arrow and Python costs several times more per record."""

SINK_COLUMNS = tuple(SINK_ARROW.names)

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MILLISECOND = timedelta(milliseconds=1)

DEAD_LETTER_ROUTE = "\x00dead-letter"
CONTROL_INPUT = -1
"""The ``input`` of an end-of-input marker row: the key's event time jumps to the end of time.

A producer marks the end of a key's input with a record whose header ``enrichd.control`` is
``end-of-input`` and whose Kafka key is the join key (``daemon replay`` sends one per key
once its inputs are written); it carries no value and is never joined itself."""

CONTROL_HEADER = "enrichd.control"
END_OF_INPUT = b"end-of-input"
"""The group key of records that failed before joining; no real join key is a lone NUL."""


def bucket_of(key: str, buckets: int = DEFAULT_STATE_BUCKETS) -> int:
    """The state bucket of a join key, of ``buckets``, by which the operator groups rows.

    The same in every process and every run (a checksum, not Python's salted ``hash``), as a
    checkpoint's state needs.
    """
    return buckets_of((key,), buckets)[0]


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
    if isinstance(raw_key, bytes):  # as daemon.formats.keys.part_text writes bytes; never scanned
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
