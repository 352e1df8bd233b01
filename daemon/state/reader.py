"""A checkpoint's join state, read with Spark's state data source.

How it works: Spark's ``statestore`` data source (``spark.read.format("statestore")``) reads
the state a streaming query committed, version by version, from the checkpoint's files alone:
the query may be stopped, or running in another process (what it reads was committed, so it
does not change under it). It knows ``transformWithState`` state variables by name: the
operator's ``state_bucket`` (a row per state bucket: its label and the stored bucket), its
``bucket_delta`` (a row per delta written after a bucket's value,
:mod:`daemon.operator.bucket_delta`) and its ``stash_chunks`` (a row per chunk of each
bucket's stash log). A checkpoint written before deltas has no ``bucket_delta``: its
buckets read as their values alone. This module pins the
micro-batch it reads to the last one in the checkpoint's commit log, and hands the buckets on
as :class:`StoredBucket`, which decodes each value with its deltas applied, as the operator
does.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

from pyspark.errors import SparkRuntimeException
from pyspark.sql import functions as F  # noqa: N812

from daemon.checkpoint.layout import metadata_file
from daemon.model.config import PipelineFile, SparkConfig
from daemon.operator import bucket_delta
from daemon.operator.chain_step import operator_id
from daemon.operator.stash_log import StashLog
from daemon.operator.state_format import Bucket
from daemon.spark.session import spark_session

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

BUCKETS_VARIABLE = "state_bucket"
DELTAS_VARIABLE = "bucket_delta"
CHUNKS_VARIABLE = "stash_chunks"


def query_id(checkpoint: Path) -> str | None:
    """The id Spark gave the checkpoint's query (its ``metadata`` file); None: it has none."""
    try:
        found = json.loads(metadata_file(checkpoint).read_text(encoding="utf-8"))["id"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return str(found)


@dataclass(frozen=True)
class StoredBucket:
    """One state bucket as the checkpoint holds it: value, deltas, stash log's chunks."""

    label: int
    blob: bytes
    chunks: tuple[bytes, ...] = ()
    deltas: tuple[bytes, ...] = ()

    @cached_property
    def bucket(self) -> Bucket:
        """The bucket, decoded, its deltas applied."""
        return bucket_delta.load(self.blob, self.deltas).bucket

    @property
    def size(self) -> int:
        """Bytes its value and deltas take, as stored."""
        return len(self.blob) + sum(map(len, self.deltas))

    def log(self) -> StashLog:
        """The bucket's stash log, read only: what a loaded key state's stashes read from."""
        return StashLog(_Chunks(self.chunks), self.bucket.stash)


class _Chunks:
    """A stash log's chunks in memory, read only."""

    def __init__(self, chunks: tuple[bytes, ...]) -> None:
        self._chunks = chunks

    def get(self) -> list[tuple[bytes]]:
        return [(chunk,) for chunk in self._chunks]

    def put(self, new_state: list[tuple[bytes]]) -> None:
        raise PermissionError("a checkpoint's state is read only here")

    def appendList(self, new_state: list[tuple[bytes]]) -> None:  # noqa: N802
        raise PermissionError("a checkpoint's state is read only here")

    def clear(self) -> None:
        raise PermissionError("a checkpoint's state is read only here")


class CheckpointState:
    """The join state a checkpoint committed with micro-batch ``batch``."""

    def __init__(
        self, spark: SparkSession, checkpoint: Path, batch: int, operator: int = 0
    ) -> None:
        self.spark = spark
        self.checkpoint = Path(checkpoint)
        self.batch = batch
        self.operator = operator
        """Which stateful operator's state: Spark numbers them back from the sink, so 0 is a
        one-joiner query's only one and a chain's last (:func:`operator_ids`)."""

    def of_operator(self, operator: int) -> CheckpointState:
        """The state that stateful operator ``operator`` committed with the same batch."""
        return CheckpointState(self.spark, self.checkpoint, self.batch, operator)

    def frame(self, variable: str) -> DataFrame:
        """One state variable's rows, as Spark's state data source reads them."""
        return (
            self.spark.read.format("statestore")
            .option("batchId", self.batch)
            .option("operatorId", self.operator)
            .option("stateVarName", variable)
            .load(str(self.checkpoint))
        )

    def buckets_frame(self) -> DataFrame:
        """``bucket int, blob binary``: every stored bucket."""
        return self.frame(BUCKETS_VARIABLE).selectExpr("key.bucket AS bucket", "value.blob AS blob")

    def deltas_frame(self) -> DataFrame:
        """``bucket int, delta binary``: every delta of every bucket.

        In no order: each delta carries its sequence number. Empty for a checkpoint written
        before deltas.
        """
        try:
            frame = self.frame(DELTAS_VARIABLE)
        except SparkRuntimeException as exc:
            # Spark knows the checkpoint's state variables by name, and has none of this one.
            unknown = (exc.getCondition() or "").startswith("STDS_INVALID_OPTION_VALUE")
            if not unknown or DELTAS_VARIABLE not in str(exc):
                raise
            return self.spark.createDataFrame([], "bucket int, delta binary")
        return frame.selectExpr("key.bucket AS bucket", "list_element.delta AS delta")

    def chunks_frame(self) -> DataFrame:
        """``bucket int, chunk binary``: every chunk of every bucket's stash log."""
        return self.frame(CHUNKS_VARIABLE).selectExpr(
            "key.bucket AS bucket", "list_element.chunk AS chunk"
        )

    def bucket(self, label: int) -> StoredBucket | None:
        """The bucket ``label`` with its deltas and chunks; None when it holds no key."""
        where = f"bucket = {int(label)}"
        rows = self.buckets_frame().where(where).collect()
        if not rows:
            return None
        chunks = self.chunks_frame().where(where).collect()
        deltas = self.deltas_frame().where(where).collect()
        return StoredBucket(
            label,
            bytes(rows[0].blob),
            tuple(bytes(row.chunk) for row in chunks),
            tuple(bytes(row.delta) for row in deltas),
        )

    def with_deltas(self) -> DataFrame:
        """``bucket int, blob binary, deltas array<binary>``: every stored bucket."""
        deltas = self.deltas_frame().groupBy("bucket").agg(F.collect_list("delta").alias("deltas"))
        return self.buckets_frame().join(deltas, "bucket", "left")

    def stored_frame(self) -> DataFrame:
        """Every stored bucket with all its parts.

        ``bucket int, blob binary, deltas array<binary>, chunks array<binary>``.
        """
        chunks = self.chunks_frame().groupBy("bucket").agg(F.collect_list("chunk").alias("chunks"))
        return self.with_deltas().join(chunks, "bucket", "left")

    def sizes(self) -> Iterator[tuple[StoredBucket, int]]:
        """Every stored bucket (with its deltas, not its chunks) and its chunks' bytes."""
        sized = self.chunks_frame().groupBy("bucket").agg(F.sum(F.length("chunk")).alias("size"))
        for row in self.with_deltas().join(sized, "bucket", "left").toLocalIterator():
            deltas = tuple(bytes(delta) for delta in row.deltas or ())
            yield StoredBucket(row.bucket, bytes(row.blob), deltas=deltas), int(row.size or 0)


def operator_ids(names: list[str]) -> dict[str, int]:
    """Spark's id of each stateful operator of a query (:func:`operator_id`), by name."""
    return {name: operator_id(place, len(names)) for place, name in enumerate(names)}


def state_session(file: PipelineFile) -> SparkSession:
    """A local Spark session to read checkpoints with, started quietly if none runs.

    Local whatever the file's master: reading a checkpoint needs no cluster, only its files.
    The file's Hadoop settings (``spark.hadoop.*``, how to reach the checkpoint's file
    system) and state store settings carry over.
    """
    conf = {
        key: value
        for key, value in file.spark.conf.items()
        if key.startswith(("spark.hadoop.", "spark.sql.streaming.stateStore."))
    }
    return spark_session(SparkConfig(master="local[*]", conf=conf))
