"""A checkpoint's logs as Spark writes them: the micro-batches they hold, where each ended.

Spark writes ``offsets/N`` when it plans micro-batch N and ``commits/N`` once the batch is
done (:mod:`daemon.checkpoint.layout`). The planner's clock
(:mod:`daemon.checkpoint.due_times`) and the commands that read a checkpoint from outside
(:mod:`daemon.state`, :mod:`daemon.pipeline.reset`, :mod:`daemon.verify`) ask which batch
committed last, and what its entry in the offset log says: a line ``v1``, a line of Spark's
batch metadata (among it the settings Spark fixed for the checkpoint), then a line per source,
its offset as JSON (``-`` before it has one).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from daemon.checkpoint.layout import COMMIT_LOG, OFFSET_LOG, log_folder
from daemon.model.wire import is_partition_name


def batches(checkpoint: str | Path, log: str) -> list[int]:
    """The micro-batch ids in one of a checkpoint's logs, in order.

    ``log``: :data:`~daemon.checkpoint.layout.OFFSET_LOG` or
    :data:`~daemon.checkpoint.layout.COMMIT_LOG`.
    """
    try:
        entries = list(log_folder(checkpoint, log).iterdir())
    except OSError:  # no such log (yet)
        return []
    return sorted(int(entry.name) for entry in entries if entry.name.isdigit())


def drop_unfinished_first_entry(checkpoint: str | Path) -> list[str]:
    """Remove what a process killed while writing the checkpoint's first log entry left.

    Spark writes each entry of its offset and commit logs to a hidden temporary file in the
    log's folder (``.0.<uuid>.tmp``, and its ``.crc``) and renames it into place. A process
    killed between the two leaves the file behind. Once the offset log has an entry Spark
    passes over such files; before, it takes a log folder that is not empty for another
    query's checkpoint and refuses to start, on every restart
    (``STATE_STORE_CHECKPOINT_LOCATION_NOT_EMPTY``). So while the offset log has no entry,
    the hidden files of both logs go; anything else stays for Spark to judge.

    Returns:
        The names of the files removed, ``log/name``.
    """
    if batches(checkpoint, OFFSET_LOG):
        return []
    removed = []
    for log in (OFFSET_LOG, COMMIT_LOG):
        try:
            entries = list(log_folder(checkpoint, log).iterdir())
        except OSError:  # no such log (yet)
            continue
        for entry in entries:
            if entry.name.startswith(".") and entry.is_file():
                entry.unlink(missing_ok=True)
                removed.append(f"{log}/{entry.name}")
    return sorted(removed)


def last_planned(checkpoint: str | Path) -> int | None:
    """The last micro-batch the checkpoint's offset log holds; None: none yet."""
    planned = batches(checkpoint, OFFSET_LOG)
    return planned[-1] if planned else None


def last_committed(checkpoint: str | Path) -> int | None:
    """The last micro-batch the checkpoint's commit log holds; None: none yet."""
    committed = batches(checkpoint, COMMIT_LOG)
    return committed[-1] if committed else None


def planned_past_commit(checkpoint: str | Path) -> int | None:
    """A micro-batch planned (in the offset log) after the last committed one, if any."""
    planned = last_planned(checkpoint)
    committed = last_committed(checkpoint)
    if planned is not None and (committed is None or planned > committed):
        return planned
    return None


@dataclass(frozen=True)
class PlannedBatch:
    """A micro-batch's entry in the offset log."""

    metadata: dict[str, Any]
    """Spark's batch metadata: its watermark, its timestamp, ``conf``."""
    sources: list[dict[str, Any] | None]
    """Each source's offset, parsed (enrichd's queries have one source); None: ``-``."""

    @property
    def ends(self) -> dict[str, int]:
        """Where the batch was planned to end: ``topic/partition`` -> offset, over its sources.

        A source's other entries, such as its wake-up clock, are left out.
        """
        return {
            name: int(offset)
            for source in self.sources
            for name, offset in (source or {}).items()
            if is_partition_name(name)
        }

    @property
    def conf(self) -> dict[str, str]:
        """The settings Spark fixed for the checkpoint's life, as this batch recorded them.

        Among them ``spark.sql.shuffle.partitions``, the stateful stage's partition count.
        """
        found: dict[str, str] = self.metadata.get("conf", {})
        return found


def planned_batch(checkpoint: str | Path, batch: int) -> PlannedBatch:
    """Micro-batch ``batch``'s entry in the checkpoint's offset log.

    Raises:
        OSError: the log has no such entry.
    """
    path = log_folder(checkpoint, OFFSET_LOG) / str(batch)
    lines = path.read_text(encoding="utf-8").splitlines()
    sources = [json.loads(line) if line.startswith("{") else None for line in lines[2:]]
    return PlannedBatch(json.loads(lines[1]), sources)
