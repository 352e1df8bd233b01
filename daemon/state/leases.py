"""A continuous checkpoint's join state, read with Spark's state data source.

A continuous pipeline's grouping key is a lease, not a bucket
(:mod:`daemon.continuous.lease_processor`): under each lease, a map state ``lease_buckets``
(one per operator of a chain: :func:`~daemon.continuous.lease_processor.buckets_variable`)
holds one entry per state bucket (its value and stash chunks as one blob,
:func:`~daemon.continuous.held_buckets.frozen`), and a value state ``lease_ends`` where the
lease stopped. This module reads them as of the last long batch in the commit log and hands
the buckets on as a micro-batch checkpoint's are (:class:`~daemon.state.reader.StoredBucket`),
so that ``daemon state`` shows them and ``daemon reset --keep-state`` and ``daemon rescale``
move them, into either mode.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pyarrow as pa

from daemon.continuous.held_buckets import stored_parts
from daemon.continuous.lease_processor import Stopped, buckets_variable
from daemon.errors import ConfigError
from daemon.state.reader import CheckpointState, StoredBucket

if TYPE_CHECKING:
    from pathlib import Path

    from pyspark.sql import DataFrame, SparkSession

STOPPED_VARIABLE = "lease_ends"
STORED_SCHEMA = "bucket int, blob binary, deltas array<binary>, chunks array<binary>"
_STORED_ARROW = pa.schema(
    [
        ("bucket", pa.int32()),
        ("blob", pa.binary()),
        ("deltas", pa.list_(pa.binary())),
        ("chunks", pa.list_(pa.binary())),
    ]
)


class LeasesDisagreeError(ConfigError):
    """The leases stopped at different offsets of a partition: no one place to start from."""


class LeaseState(CheckpointState):
    """The join state a continuous checkpoint committed with long batch ``batch``.

    ``pipeline``: the pipeline's name, for what :meth:`ends` raises. ``chained``: which of a
    chain's operators' buckets (numbered as Spark numbers a query's: 0 is the last); the
    query itself has one stateful operator, the leases'.
    """

    def __init__(
        self,
        spark: SparkSession,
        checkpoint: Path,
        batch: int,
        *,
        pipeline: str = "",
        chained: int = 0,
    ) -> None:
        super().__init__(spark, checkpoint, batch)
        self.pipeline = pipeline
        self.chained = chained

    def of_operator(self, operator: int) -> LeaseState:
        """The buckets of a chain's operator ``operator``, committed with the same batch."""
        return LeaseState(
            self.spark, self.checkpoint, self.batch, pipeline=self.pipeline, chained=operator
        )

    def stored_frame(self) -> DataFrame:
        """Every stored bucket, as :meth:`CheckpointState.stored_frame` has it (no deltas)."""
        held = self.frame(buckets_variable(self.chained)).selectExpr(
            "user_map_key.bucket AS bucket", "user_map_value.blob AS blob"
        )
        return held.mapInArrow(_unfrozen, STORED_SCHEMA)

    def bucket(self, label: int) -> StoredBucket | None:
        """The bucket ``label``; None when it holds no key."""
        rows = self.stored_frame().where(f"bucket = {int(label)}").collect()
        if not rows:
            return None
        return StoredBucket(label, bytes(rows[0].blob), tuple(map(bytes, rows[0].chunks)))

    def sizes(self) -> Iterator[tuple[StoredBucket, int]]:
        """Every stored bucket (its value) and its chunks' bytes."""
        for row in self.stored_frame().toLocalIterator():
            chunks = [bytes(chunk) for chunk in row.chunks]
            yield StoredBucket(row.bucket, bytes(row.blob)), sum(map(len, chunks))

    def stopped(self) -> dict[int, Stopped]:
        """Where each lease stopped, by its grouping key."""
        rows = self.frame(STOPPED_VARIABLE).selectExpr("key.lease AS lease", "value.ends AS ends")
        return {int(row.lease): Stopped.read(row.ends) for row in rows.collect()}

    def least_ends(self) -> dict[str, int]:
        """Where the leases stopped reading each partition: the least of them."""
        ends: dict[str, int] = {}
        for stopped in self.stopped().values():
            for name, offset in stopped.ends.items():
                ends[name] = min(ends.get(name, offset), offset)
        return ends

    def ends(self) -> dict[str, int]:
        """Where the pipeline stopped reading each partition: one place for every lease.

        Raises:
            LeasesDisagreeError: two leases stopped at different offsets of a partition.
                Each joined the records of its buckets up to its own end, so no one start
                would read each record once for every bucket.
        """
        ends: dict[str, int] = {}
        for lease, stopped in sorted(self.stopped().items()):
            for name, offset in stopped.ends.items():
                if ends.setdefault(name, offset) != offset:
                    raise LeasesDisagreeError(
                        f"pipeline {self.pipeline!r}: its leases stopped at different offsets of "
                        f"{name} ({ends[name]} and {offset}, lease {lease}) in long batch "
                        f"{self.batch} of {self.checkpoint}, so its state cannot move to one "
                        "start; run it again and stop it while no input arrives (each "
                        "lease then stops at the end of every partition), then try again"
                    )
        return ends


def _unfrozen(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    for batch in batches:
        labels = batch.column("bucket").to_pylist()
        parts = [stored_parts(blob) for blob in batch.column("blob").to_pylist()]
        yield pa.RecordBatch.from_pydict(
            {
                "bucket": labels,
                "blob": [blob for blob, _ in parts],
                "deltas": [[] for _ in parts],
                "chunks": [chunks for _, chunks in parts],
            },
            schema=_STORED_ARROW,
        )
