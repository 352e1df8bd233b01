"""``daemon snapshot`` and ``daemon restore``: a stopped pipeline's state, kept and put back.

A **snapshot** is a folder: a copy of the files the checkpoint's last committed micro-batch
needs (:mod:`daemon.checkpoint.committed_files`), at the same paths inside it, and a
manifest, ``enrichd-snapshot.json`` (:func:`~daemon.checkpoint.layout.manifest_file`),
written last: the pipeline's name, the checkpoint's recorded shape (joiner, inputs, state
layout and format, the enrichd and pyspark that made it), the micro-batch, and each file's
size and SHA-256. A folder without a manifest is a snapshot that did not finish.

A **restore** checks the manifest against the pipeline (its name, and its shape as a start
checks a checkpoint's), copies every file into a staging folder inside the checkpoint,
checking each size and checksum on the way, and only then moves the checkpoint's contents
aside, to ``<checkpoint>.before-restore-<time>`` as a reset does, and the copy into their
place. The copy then names its own path and gets a query id of its own
(:mod:`daemon.checkpoint.copied`): the next start reads on from the snapshot's micro-batch,
and writes again the output of the batches that ran after the snapshot was taken, as Flink
does from a savepoint. A snapshot made by another pyspark minor version is restored; the
start then refuses it until pyspark is pinned or the state moved (``daemon rescale``).

Both hold the checkpoint's lock (:mod:`daemon.pipeline.lock`) throughout, so both are refused
while a daemon runs on it: a running query's checkpoint changes under a copy (Spark deletes
old state versions in the background).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from daemon.checkpoint import copied
from daemon.checkpoint.batch_logs import last_committed
from daemon.checkpoint.committed_files import committed_files
from daemon.checkpoint.layout import (
    LOCK,
    MANIFEST,
    backup_folder,
    manifest_file,
    metadata_file,
    restore_staging,
    stage_checkpoints,
)
from daemon.errors import EnrichdError
from daemon.model.config import PipelineConfig
from daemon.pipeline.checkpoint_shape import (
    differences,
    refuse_format,
    shape_of,
    verify_checkpoint,
)
from daemon.private_paths import open_private, private_folder, write_private_text

SNAPSHOT_FORMAT = 1
"""The version of the manifest's layout."""
_CHUNK = 1 << 20
_WRITE = os.O_WRONLY | os.O_TRUNC


class SnapshotError(EnrichdError):
    """A snapshot cannot be taken or restored: the message says why and what to do."""


@dataclass(frozen=True)
class Manifest:
    """A snapshot's manifest, as read back."""

    folder: Path
    pipeline: str
    batch: int | None
    """The last committed micro-batch it holds; None: a seed that has run no batch yet."""
    taken_at: str
    shape: dict[str, Any]
    files: dict[str, dict[str, Any]]
    """Each file's path in the snapshot -> its ``bytes`` and ``sha256``."""

    @property
    def size(self) -> int:
        """Bytes of the snapshot's files."""
        return sum(int(entry["bytes"]) for entry in self.files.values())

    def describe(self) -> str:
        """What it holds, in words."""
        what = "a seed" if self.batch is None else f"micro-batch {self.batch}"
        return f"{what} of pipeline {self.pipeline!r}, taken {self.taken_at}"


def take(pipe: PipelineConfig, folder: Path) -> Manifest:
    """Copy what the pipeline's checkpoint needs into ``folder``; the caller holds its lock.

    Raises:
        NoCheckpointError: the pipeline never ran in its checkpoint.
        IncompatibleCheckpointError: the checkpoint is of another pipeline shape (another
            ``state_buckets`` count is kept: a snapshot before a rescale).
        IncompleteCheckpointError: a file the committed batch needs is missing.
        SnapshotError: ``folder`` holds files already.
    """
    shape = verify_checkpoint(pipe, any_layout=True)
    checkpoint = Path(pipe.checkpoint)
    names = committed_files(checkpoint)
    if folder.exists() and any(folder.iterdir()):
        raise SnapshotError(
            f"pipeline {pipe.name!r}: {folder} is not empty; give a new folder for the snapshot"
        )
    private_folder(folder, what="the snapshot folder")
    files = {name: _copy(checkpoint / name, folder / name) for name in names}
    manifest = {
        "snapshot": SNAPSHOT_FORMAT,
        "pipeline": pipe.name,
        "checkpoint": str(checkpoint),
        "micro_batch": last_committed(checkpoint),
        "taken_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "shape": shape,
        "files": files,
    }
    write_private_text(manifest_file(folder), json.dumps(manifest, indent=2) + "\n", atomic=True)
    return read_manifest(folder)


def read_manifest(folder: Path) -> Manifest:
    """The manifest of the snapshot in ``folder``.

    Raises:
        SnapshotError: there is none (the snapshot did not finish), or it cannot be read.
    """
    path = manifest_file(folder)
    if not path.is_file():
        raise SnapshotError(
            f"{folder} is no complete snapshot: it has no {MANIFEST} (a `daemon snapshot` "
            "that did not finish leaves none); take the snapshot again"
        )
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if data.get("snapshot") != SNAPSHOT_FORMAT:
            raise ValueError(f"a manifest of layout {data.get('snapshot')!r}")
        return Manifest(
            folder,
            str(data["pipeline"]),
            data["micro_batch"],
            str(data["taken_at"]),
            dict(data["shape"]),
            dict(data["files"]),
        )
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise SnapshotError(
            f"cannot read the snapshot's manifest {path} ({exc}); take the snapshot again"
        ) from None


def check_fits(pipe: PipelineConfig, manifest: Manifest) -> None:
    """Refuse a snapshot of another pipeline, or one whose files are not all there.

    Raises:
        SnapshotError: it is of another pipeline or pipeline shape, or a file is missing or
            of another size.
        NewerCheckpointError: its state is in a format this enrichd does not read.
    """
    where = f"snapshot {manifest.folder}"
    if manifest.pipeline != pipe.name:
        raise SnapshotError(
            f"{where} is of pipeline {manifest.pipeline!r}, not {pipe.name!r}; restore it "
            f"with --pipeline {manifest.pipeline}"
        )
    layout = manifest.shape.get("state")
    if isinstance(layout, dict):
        refuse_format(pipe, layout.get("format"), manifest.shape, where=where)
    changes = differences(manifest.shape, shape_of(pipe))
    if changes:
        raise SnapshotError(
            f"pipeline {pipe.name!r}: {where} was taken of another pipeline shape "
            f"({'; '.join(changes)}); restore it with the pipeline file it was taken with"
        )
    for name, entry in sorted(manifest.files.items()):
        path = manifest.folder / name
        if not path.is_file() or path.stat().st_size != entry["bytes"]:
            state = "missing" if not path.is_file() else "of another size"
            raise SnapshotError(
                f"{where} is incomplete: {name} is {state} ({len(manifest.files)} files in "
                "its manifest); copy the whole folder again, or take the snapshot again"
            )


def restore(pipe: PipelineConfig, manifest: Manifest) -> Path | None:
    """Put the snapshot in place of the pipeline's checkpoint; the caller holds its lock.

    Returns:
        Where the checkpoint's old contents went; None if it held nothing.

    Raises:
        SnapshotError: a file's checksum differs from the manifest's (nothing is changed).
    """
    checkpoint = Path(pipe.checkpoint)
    staging = restore_staging(checkpoint)
    shutil.rmtree(staging, ignore_errors=True)
    for name, recorded in sorted(manifest.files.items()):
        if _copy(manifest.folder / name, staging / name) != recorded:
            shutil.rmtree(staging, ignore_errors=True)
            raise SnapshotError(
                f"snapshot {manifest.folder} is damaged: {name} is not what its manifest "
                "says (its checksum differs); nothing was restored: take the snapshot again"
            )
    kept = {LOCK, staging.name}
    old = [entry for entry in sorted(checkpoint.iterdir()) if entry.name not in kept]
    backup = None
    if old:
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        backup = backup_folder(checkpoint, "restore", stamp)
        private_folder(backup, what="the checkpoint's backup")
        for entry in old:
            entry.rename(backup / entry.name)
    for entry in sorted(staging.iterdir()):
        entry.rename(checkpoint / entry.name)
    staging.rmdir()
    for stage in stage_checkpoints(checkpoint):
        copied.own_schema_paths(stage)
        if metadata_file(stage).is_file():
            copied.new_query_id(stage)
    return backup


def _copy(source: Path, target: Path) -> dict[str, Any]:
    """Copy ``source`` to ``target`` (0600, its folders 0700); its size and SHA-256."""
    private_folder(target.parent, what="the snapshot's folder")
    digest = hashlib.sha256()
    size = 0
    with source.open("rb") as reading, open(open_private(target, _WRITE), "wb") as writing:
        while chunk := reading.read(_CHUNK):
            digest.update(chunk)
            writing.write(chunk)
            size += len(chunk)
        writing.flush()
        os.fsync(writing.fileno())  # on disk before the manifest says it is there
    return {"bytes": size, "sha256": digest.hexdigest()}
