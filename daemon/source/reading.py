"""The executor side of the Kafka source: a task's offset ranges read into packs.

Each Spark task reads the ranges its planner dealt it (:mod:`daemon.source.planning`) with
``assign()`` and yields them as Arrow record batches of packs (:data:`daemon.model.wire.SOURCE`).
Each record's join key and event time are read here, from the bytes where the schema allows
(:mod:`daemon.formats.avro.fields`; the joiner decodes the whole record later), else by a
decode; one that cannot be read or lacks either field is passed on with ``error`` set and the
:data:`~daemon.model.wire.DEAD_LETTER_ROUTE` as its key, for the dead-letter topic, instead of
failing the query. An end-of-input marker becomes a row of input
:data:`~daemon.model.wire.CONTROL_INPUT`.
"""

from __future__ import annotations

import marshal
from collections.abc import Iterable, Iterator
from operator import methodcaller
from typing import Any

import pyarrow as pa

from daemon.errors import (
    EnrichdError,
    RecordsRemovedWhileReadingError,
    SchemaRegistryUnavailableError,
)
from daemon.formats.avro.codegen import CompiledCodecError
from daemon.kafka import connect
from daemon.kafka.clients import OffsetNotAvailableError, read_partition
from daemon.model.constants import END_OF_TIME
from daemon.model.record_route import Routing, buckets_of, route_fields
from daemon.model.wire import (
    CONTROL_INPUT,
    DEAD_LETTER_ROUTE,
    INPUT,
    is_end_of_input,
    pack,
    range_name,
)
from daemon.source.missing_offsets import MissingOffset, failure
from daemon.source.planning import KafkaRange
from daemon.source.spec import SourceInput, SourceSpec

_ARROW_CHUNK = 10_000
"""Records per batch of packs a read yields."""
_OPEN_TRANSACTION_WAIT_S = 120.0
"""How long a read waits for the position to move: a ``read_committed`` read stops at an open
upstream transaction until it commits or aborts, and Kafka producers' default transaction
timeout is 60 s. Planned ends come from the high watermark, which may lie past such a
transaction."""


def read_ranges(spec: SourceSpec, ranges: Iterable[KafkaRange]) -> Iterator[pa.RecordBatch]:
    """Read ``ranges``, one after the other, as Arrow batches of packs."""
    for kafka_range in ranges:
        yield from read_range(spec, kafka_range)


def read_range(spec: SourceSpec, kafka_range: KafkaRange) -> Iterator[pa.RecordBatch]:
    """Read one partition's range, :data:`_ARROW_CHUNK` records to a batch of packs."""
    # Late: confluent_kafka loads with the first client (daemon.model.constants says why).
    from confluent_kafka import TopicPartition

    index, read = next((i, s) for i, s in enumerate(spec.inputs) if s.topic == kafka_range.topic)
    buckets = spec.state_buckets
    number = kafka_range.partition
    # Every pack says which range it was read over: a batch marker records its task's share.
    packed = range_name(kafka_range.topic, number, kafka_range.start, kafka_range.end)
    consumer = connect.consumer(spec.reader_conf())
    tp = TopicPartition(kafka_range.topic, number, kafka_range.start)
    pending: list[Any] = []
    try:
        chunks = read_partition(
            consumer, tp, kafka_range.end, chunk=_ARROW_CHUNK, stall_s=_OPEN_TRANSACTION_WAIT_S
        )
        for records in chunks:
            pending.extend(records)
            if len(pending) >= _ARROW_CHUNK:
                yield _arrow_batch(read, index, number, pending, buckets, packed, spec.headers)
                pending = []
    except OffsetNotAvailableError as exc:
        raise _removed_while_reading(spec, consumer, exc) from None
    finally:
        consumer.close()
    if pending:
        yield _arrow_batch(read, index, number, pending, buckets, packed, spec.headers)


def pack_messages(
    spec: SourceSpec, topic: str, partition: int, messages: list[Any], read: str
) -> pa.RecordBatch:
    """One partition's messages, read over the range named ``read``, as a batch of packs.

    What :func:`read_range` yields, for messages a caller read itself (a long batch's task).
    """
    index, source = next((i, s) for i, s in enumerate(spec.inputs) if s.topic == topic)
    return _arrow_batch(source, index, partition, messages, spec.state_buckets, read, spec.headers)


def _removed_while_reading(
    spec: SourceSpec, consumer: Any, exc: OffsetNotAvailableError
) -> EnrichdError:
    """The error of a read whose records were removed after the batch was planned.

    The planner checked the range's start (:mod:`daemon.source.missing_offsets`); records
    went between that and this read. With ``fail`` that is the pipeline's end as at planning;
    otherwise the batch fails, and the planner applies the policy when it runs again.
    """
    # Late: confluent_kafka loads with the first client (daemon.model.constants says why).
    from confluent_kafka import TopicPartition

    try:
        low, high = consumer.get_watermark_offsets(
            TopicPartition(exc.topic, exc.partition), timeout=10
        )
    except Exception:  # noqa: BLE001 - the line says what is known without them
        low, high = -1, -1
    missing = MissingOffset(exc.topic, exc.partition, exc.offset, low, high)
    if spec.on_missing_offsets == "fail":
        return failure(spec.pipeline, missing)
    return RecordsRemovedWhileReadingError(
        f"pipeline {spec.pipeline!r}: {missing.facts()}, removed while a micro-batch read it; "
        f"the batch runs again and reads on as on_missing_offsets = "
        f"{spec.on_missing_offsets!r} says"
    )


def _arrow_batch(
    spec: SourceInput,
    index: int,
    partition: int,
    messages: list[Any],
    buckets: int,
    read_range: str,
    headers: bool = False,
) -> pa.RecordBatch:
    """Route one partition's messages and pack them by state bucket (:func:`pack`).

    Built a column at a time: a per-record loop appending to ten lists cost more than
    the routing itself. ``headers``: read the records' headers too (else the column is null).
    """
    count = len(messages)
    values = [m.value() for m in messages]
    kafka_keys = [m.key() for m in messages]
    timestamps = [m.timestamp()[1] for m in messages]
    inputs = [index] * count
    route_one = _route if spec.router is None else _route_by_router
    routings = [
        route_one(spec, value, kafka_key, timestamp)
        for value, kafka_key, timestamp in zip(values, kafka_keys, timestamps, strict=True)
    ]
    for i in [i for i, value in enumerate(values) if value is None and kafka_keys[i]]:
        if is_end_of_input(messages[i].headers()):
            inputs[i] = CONTROL_INPUT
            routings[i] = Routing(kafka_keys[i].decode("utf-8", "replace"), END_OF_TIME, None)
    keys = [
        DEAD_LETTER_ROUTE if error is not None or key is None else key for key, _, error in routings
    ]
    records = INPUT.batch(
        input=inputs,
        key=keys,
        event_time=[event_time for _, event_time, _ in routings],
        partition=pa.repeat(pa.scalar(partition, pa.int32()), count),
        offset=[m.offset() for m in messages],
        timestamp=timestamps,
        kafka_key=kafka_keys,
        value=values,
        error=[error for _, _, error in routings],
        # Packed as daemon.model.headers.pack does, inline: a call per record costs.
        headers=[None if h is None else marshal.dumps(h) for h in map(_HEADERS, messages)]
        if headers
        else pa.nulls(count, pa.binary()),
    )
    return pack(records, buckets_of(keys, buckets), read_range)


_HEADERS = methodcaller("headers")
"""A message's headers (None: none), got in C."""


def _route(
    spec: SourceInput, value: bytes | None, kafka_key: bytes | None, timestamp: int
) -> Routing:
    """One record's join key and event time, or why it has none.

    The key and time fields are read from the bytes where the schema allows
    (:meth:`AvroCodec.read_fields`); the joiner decodes the whole record later.
    """
    if value is not None:
        try:
            fields = spec.codec.read_fields(value, spec.routed_fields, spec.millis_fields)
        except SchemaRegistryUnavailableError:
            raise  # the record is fine: fail the batch, which is retried, not the record
        except CompiledCodecError as exc:  # a bug in enrichd: a decode must not hide it
            return Routing(None, timestamp, f"CompiledCodecError: {exc}")
        except Exception:  # noqa: BLE001 - bad bytes, or a registry that does not know the id
            fields = None  # the decode below fails too, and says why in its own words
        if fields is not None:
            raw_time = fields[1] if spec.time_field is not None else None
            return route_fields(fields[0], raw_time, timestamp, spec.key_field, spec.time_field)
    return _route_by_decode(spec, value, kafka_key, timestamp)


def _route_by_router(
    spec: SourceInput, value: bytes | None, kafka_key: bytes | None, timestamp: int
) -> Routing:
    """:func:`_route` for an input with a :attr:`SourceInput.router`.

    The value's key parts and event time are read from the bytes where the schema allows,
    as :func:`_route` does (which keeps that read inline: a call per record costs); an
    envelope or a nested field needs a decode.
    """
    router = spec.router
    assert router is not None  # noqa: S101 - chosen for inputs with a router
    names = router.scanned_fields
    if value is not None and names is not None:
        try:
            fields = spec.codec.read_fields(value, names, spec.millis_fields)
        except SchemaRegistryUnavailableError:
            raise
        except CompiledCodecError as exc:
            return Routing(None, timestamp, f"CompiledCodecError: {exc}")
        except Exception:  # noqa: BLE001 - the decode below fails too, and says why
            fields = None
        if fields is not None:
            return router.route_scanned(fields, kafka_key, timestamp)
    return _route_by_decode(spec, value, kafka_key, timestamp)


def _route_by_decode(
    spec: SourceInput, value: bytes | None, kafka_key: bytes | None, timestamp: int
) -> Routing:
    """Route a record by decoding it whole: what reading its fields from the bytes cannot."""
    try:
        record = None if value is None else spec.codec.decode(value)
    except SchemaRegistryUnavailableError:
        raise
    except Exception as exc:
        return Routing(None, timestamp, f"UndecodableRecord: {type(exc).__name__}: {exc}")
    return spec.route_decoded(record, kafka_key, timestamp)
