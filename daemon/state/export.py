"""A checkpoint's state made portable and dealt into another number of buckets.

Runs in Spark (``mapInArrow``), so that a large state is moved by the executors, never
gathered in one process: each stored bucket (or each row of a seed that no micro-batch
applied yet) becomes a row per key, ``bucket int, key string, entry binary``, with the key's
bucket among ``buckets`` and its entry portable
(:func:`~daemon.operator.state_format.encode_portable`: the state with its stashes' values
inline). :func:`seed_rows` groups them back into a row per bucket, as a seed holds them.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial
from typing import TYPE_CHECKING

import pyarrow as pa
from pyspark.sql import functions as F  # noqa: N812

from daemon.model.record_route import bucket_of
from daemon.operator.state_format import STATE, encode_portable
from daemon.state.leases import LeaseState
from daemon.state.reader import CheckpointState, StoredBucket

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

KEYS_SCHEMA = "bucket int, key string, entry binary"
_KEYS_ARROW = pa.schema([("bucket", pa.int32()), ("key", pa.string()), ("entry", pa.binary())])


def committed_keys(state: CheckpointState | LeaseState, buckets: int) -> DataFrame:
    """Every key of the committed state, portable, in its bucket among ``buckets``.

    A micro-batch checkpoint's or a continuous one's: their buckets hold keys alike.
    """
    stored = state.stored_frame()
    return stored.mapInArrow(partial(_export_buckets, buckets=buckets), KEYS_SCHEMA)


def seeded_keys(seed_state: DataFrame, buckets: int) -> DataFrame:
    """Every key of a seed's state (already portable), in its bucket among ``buckets``."""
    rows = seed_state.selectExpr("inline(keys)")
    return rows.mapInArrow(partial(_rebucket, buckets=buckets), KEYS_SCHEMA)


def seed_rows(keys: DataFrame) -> DataFrame:
    """Keys of :data:`KEYS_SCHEMA` as a seed's rows: one per bucket with all its keys."""
    return keys.groupBy("bucket").agg(F.collect_list(F.struct("key", "entry")).alias("keys"))


def _export_buckets(batches: Iterator[pa.RecordBatch], buckets: int) -> Iterator[pa.RecordBatch]:
    for batch in batches:
        labels = batch.column("bucket").to_pylist()
        stored = batch.column("blob").to_pylist()
        chunk_lists = batch.column("chunks").to_pylist()
        delta_lists = batch.column("deltas").to_pylist()
        rows: dict[str, list[object]] = {"bucket": [], "key": [], "entry": []}
        for label, blob, chunks, deltas in zip(
            labels, stored, chunk_lists, delta_lists, strict=True
        ):
            found = StoredBucket(label, blob, tuple(chunks or ()), tuple(deltas or ()))
            log = found.log()
            for key, entry in found.bucket.keys.items():
                state = log.loads(key, entry[STATE])
                rows["bucket"].append(bucket_of(key, buckets))
                rows["key"].append(key)
                rows["entry"].append(encode_portable(entry, found.bucket.due.get(key), state))
        yield pa.RecordBatch.from_pydict(rows, schema=_KEYS_ARROW)


def _rebucket(batches: Iterator[pa.RecordBatch], buckets: int) -> Iterator[pa.RecordBatch]:
    for batch in batches:
        keys = batch.column("key").to_pylist()
        labels = pa.array([bucket_of(key, buckets) for key in keys], pa.int32())
        yield pa.RecordBatch.from_arrays(
            [labels, batch.column("key"), batch.column("entry")], schema=_KEYS_ARROW
        )
