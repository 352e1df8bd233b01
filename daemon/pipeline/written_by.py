"""Which enrichd and pyspark made a checkpoint, and whether this pyspark may run on it.

Spark's own files in a checkpoint (its offset and commit logs, the operator's metadata and
state schema, the RocksDB state store's snapshots and changelogs) are Spark's to lay out, and
Spark changes them between minor versions: a release reads the checkpoints of older ones, as
far as its migration guide says, and an older release is not bound to read a newer one's. A
pipeline that ran once on pyspark 4.4 and is then rolled back to 4.3 can fail deep in the
state store, or read on from files it misreads. So the checkpoint's shape file
(:mod:`daemon.pipeline.checkpoint_shape`) records the versions of the enrichd and pyspark
that made it (:func:`running`, under ``written_by``), and ``daemon run`` refuses a checkpoint
of another pyspark minor version (:func:`spark_mismatch`): pin pyspark to that minor, or move
the state into a checkpoint of this pyspark's own, which ``daemon rescale`` does.

A checkpoint made before these were recorded has no ``written_by``: it is taken as this
pyspark's and gets its record on the next start, as it ran before.
"""

from __future__ import annotations

from importlib import metadata
from typing import Any

WRITTEN_BY = "written_by"
"""The shape file's entry of the versions that made the checkpoint."""


def running() -> dict[str, str]:
    """The versions of enrichd and pyspark installed here, as the shape file records them.

    Read from the installed distributions' metadata, not by importing pyspark (which would
    load Spark's Python side into commands that start no Spark). A distribution that is not
    installed as one (a source tree on the path) is ``unknown``.
    """
    return {name: _version(name) for name in ("enrichd", "pyspark")}


def minor(version: str) -> str:
    """The ``MAJOR.MINOR`` of a version: ``"4.3.1"`` -> ``"4.3"``."""
    return ".".join(version.split(".")[:2])


def recorded(shape: dict[str, Any]) -> dict[str, str] | None:
    """The versions a checkpoint's shape records; None for one made before they were."""
    versions = shape.get(WRITTEN_BY)
    return versions if isinstance(versions, dict) else None


def spark_mismatch(shape: dict[str, Any]) -> tuple[str, str] | None:
    """``(recorded, running)`` pyspark versions when their minor versions differ, else None.

    None too when either is not known: a checkpoint that records none, a pyspark not
    installed as a distribution.
    """
    was = (recorded(shape) or {}).get("pyspark", "unknown")
    now = running()["pyspark"]
    if "unknown" in (was, now) or minor(was) == minor(now):
        return None
    return was, now


def pin(version: str) -> str:
    """The requirement that keeps pyspark at ``version``'s minor: ``pyspark>=4.3,<4.4``."""
    major, _, rest = minor(version).partition(".")
    return f"pyspark>={major}.{rest},<{major}.{int(rest or 0) + 1}"


def _version(distribution: str) -> str:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return "unknown"
