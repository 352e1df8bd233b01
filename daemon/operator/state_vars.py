"""The state variables of a state bucket, declared without loading the rest of the operator.

Every joiner processor declares the same four variables (:mod:`daemon.operator.bucket_store`
says what each holds). This module needs nothing but PySpark's types, so that Spark's
driver-side run of a processor's ``init`` can declare them cheaply
(:mod:`daemon.operator.deferred`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pyspark.sql.types import BinaryType, LongType, StructField, StructType

BUCKET_SCHEMA = StructType([StructField("blob", BinaryType())])
"""Schema of the bucket's value state (a StructType: a DDL string would cost a call to the JVM
to parse it in every task)."""
CHUNK_SCHEMA = StructType([StructField("chunk", BinaryType())])
"""Schema of the bucket's list state of stash chunks (:mod:`daemon.operator.stash_log`)."""
DELTA_SCHEMA = StructType([StructField("delta", BinaryType())])
"""Schema of the bucket's list state of deltas (:mod:`daemon.operator.bucket_delta`)."""
STAMP_SCHEMA = StructType([StructField("stamp", LongType())])
"""Schema of the bucket's stamp, written with each write of the bucket while the worker cache
is on (:mod:`daemon.operator.bucket_cache`)."""


@dataclass(frozen=True)
class StateVariables:
    """A processor's handles on its bucket's state variables."""

    state: Any
    """The bucket: a value state of :data:`BUCKET_SCHEMA`."""
    stash_chunks: Any
    """The bucket's stash log: a list state of :data:`CHUNK_SCHEMA`."""
    stamps: Any
    """The bucket's stamp: a value state of :data:`STAMP_SCHEMA`."""
    deltas: Any
    """The bucket's deltas: a list state of :data:`DELTA_SCHEMA`."""


def declare(handle: Any) -> StateVariables:
    """Declare the four variables on ``handle`` (a ``StatefulProcessorHandle``).

    All four always, whether the cache and the deltas are on or not, so that switching them
    keeps the checkpoint's state variables as they were.
    """
    return StateVariables(
        state=handle.getValueState("state_bucket", BUCKET_SCHEMA),
        stash_chunks=handle.getListState("stash_chunks", CHUNK_SCHEMA),
        stamps=handle.getValueState("bucket_stamp", STAMP_SCHEMA),
        deltas=handle.getListState("bucket_delta", DELTA_SCHEMA),
    )
