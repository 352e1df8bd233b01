"""The files a checkpoint's last committed micro-batch needs, and none that later ones wrote.

What ``daemon snapshot`` copies (:mod:`daemon.pipeline.snapshot`): enough for Spark to go on
from the last committed micro-batch C as it would after a stop, and for enrichd's own
entries. Of a checkpoint (:mod:`daemon.checkpoint.layout`):

- Spark's ``metadata``; ``offsets/`` C-1, C and the batch planned after C if there is one
  (Spark runs it again with those offsets, and takes a batch's start from the entry before
  it); ``commits/`` C; ``sources/``, if a source wrote any.
- Spark's state store at version C+1, the version batch C committed, per state partition:
  RocksDB's newest snapshot at or before it (``N.zip``) with the SST and log files its
  ``metadata`` names, and the changelogs after it up to C+1 (``N.changelog``); and each
  operator's metadata and state schema files (``_metadata/``, ``_stateSchema/``). Older
  versions that Spark keeps for its own recovery are left out.
- enrichd's shape file, due-time map and seed (of a checkpoint that ``daemon reset`` or
  ``daemon rescale`` made and that has run no batch since).
- ``downstream/OUTPUT``: each second stage's checkpoint, the same way.

Every file goes with its Hadoop checksum file (``.NAME.crc``) where there is one. A file the
version needs that is not there, and a file in a state store that Spark's RocksDB store does
not write (another store provider's, or ``checkpointFormatVersion`` 2's names), make the
checkpoint refused rather than copied in part.
"""

from __future__ import annotations

import json
import re
import zipfile
from collections.abc import Iterator
from pathlib import Path

from daemon.checkpoint.batch_logs import batches, last_committed, last_planned
from daemon.checkpoint.layout import (
    COMMIT_LOG,
    DUE_TIMES,
    METADATA,
    OFFSET_LOG,
    SEED,
    SHAPE,
    SOURCES,
    STATE,
    STATE_METADATA,
    STATE_SCHEMA,
    stage_checkpoints,
)
from daemon.errors import EnrichdError

_VERSIONED = re.compile(r"^(\d+)\.(zip|changelog)$")
_SHARED = {"SSTs": ("sstFiles", "dfsSstFileName"), "logs": ("logFiles", "dfsLogFileName")}
"""The folders of the RocksDB files that versions share, and where a snapshot's ``metadata``
lists those it uses: the list's key, and the key of each file's name in the folder."""


class IncompleteCheckpointError(EnrichdError):
    """A file the last committed micro-batch needs is missing, or a state file is unknown."""


def committed_files(checkpoint: Path) -> list[str]:
    """The files of ``checkpoint`` its last committed batch needs, as paths relative to it.

    Raises:
        IncompleteCheckpointError: a needed file is missing, a state file is of a kind Spark's
            RocksDB store does not write, or nothing is committed (and no seed is there).
    """
    return sorted(str(path.relative_to(checkpoint)) for path in _needed(checkpoint))


def _needed(checkpoint: Path) -> Iterator[Path]:
    committed = last_committed(checkpoint)
    seed = checkpoint / SEED
    if committed is None and not seed.is_dir():
        raise IncompleteCheckpointError(
            f"checkpoint {checkpoint} has committed no micro-batch yet: nothing to keep"
        )
    for name in (METADATA, SHAPE, DUE_TIMES):
        required = name == METADATA and committed is not None
        yield from _with_checksum(checkpoint / name, required=required)
    yield from _tree(seed)
    if committed is not None:
        planned = last_planned(checkpoint) or committed
        wanted = {committed - 1, committed, planned}
        for batch in batches(checkpoint, OFFSET_LOG):
            if batch in wanted:
                yield from _with_checksum(checkpoint / OFFSET_LOG / str(batch), required=True)
        yield from _with_checksum(checkpoint / COMMIT_LOG / str(committed), required=True)
        yield from _tree(checkpoint / SOURCES)
        for operator in sorted(_folders(checkpoint / STATE)):
            yield from _operator(operator, committed + 1)
    for stage in stage_checkpoints(checkpoint)[1:]:
        yield from _needed(stage)


def _operator(folder: Path, version: int) -> Iterator[Path]:
    """An operator's state folder: its metadata and schemas, each partition's ``version``."""
    yield from _tree(folder / STATE_METADATA)
    yield from _tree(folder / STATE_SCHEMA)
    for partition in sorted(_folders(folder)):
        if partition.name not in (STATE_METADATA, STATE_SCHEMA):
            yield from _store(partition, version)


def _store(folder: Path, version: int) -> Iterator[Path]:
    """A state store's files that ``version`` needs; a named store's folder in it too."""
    versions: dict[str, set[int]] = {"zip": set(), "changelog": set()}
    for entry in folder.iterdir():
        if entry.is_dir():
            if entry.name == STATE_METADATA:  # the partition's own metadata (Spark 4 makes
                yield from _tree(entry)  # the folder, empty but for checkpoint format 2)
            elif entry.name not in _SHARED:
                yield from _store(entry, version)  # a store of another name than "default"
            continue
        if entry.name.startswith(".") and entry.name.endswith(".crc"):
            continue  # a checksum, taken with its file
        found = _VERSIONED.match(entry.name)
        if found is None:
            raise IncompleteCheckpointError(
                f"state store {folder}: {entry.name} is not a file of Spark's RocksDB state "
                "store as enrichd knows it; snapshot the stopped checkpoint's volume instead"
            )
        versions[found[2]].add(int(found[1]))
    base = max((v for v in versions["zip"] if v <= version), default=0)
    if base:
        snapshot = folder / f"{base}.zip"
        yield from _with_checksum(snapshot, required=True)
        for shared in _shared_files(snapshot):
            yield from _with_checksum(folder / shared, required=True)
    for change in range(base + 1, version + 1):
        if change not in versions["changelog"]:
            raise IncompleteCheckpointError(
                f"state store {folder} lacks {change}.changelog, which version {version} of "
                "the state needs: the checkpoint is damaged or was copied in part"
            )
        yield from _with_checksum(folder / f"{change}.changelog", required=True)


def _shared_files(snapshot: Path) -> list[str]:
    """The SST and log files (relative to the store) a RocksDB snapshot's ``metadata`` names."""
    try:
        with zipfile.ZipFile(snapshot) as archive:
            text = archive.read("metadata").decode("utf-8")
        # A line of the metadata's version ("v1"), then its JSON.
        metadata = json.loads(text.split("\n", 1)[1])
    except (OSError, KeyError, IndexError, ValueError, zipfile.BadZipFile) as exc:
        raise IncompleteCheckpointError(
            f"cannot read the RocksDB snapshot {snapshot} ({exc}): the checkpoint is damaged"
        ) from None
    return [
        f"{folder}/{entry[name]}"
        for folder, (listed, name) in _SHARED.items()
        for entry in metadata.get(listed) or []
    ]


def _with_checksum(path: Path, *, required: bool) -> Iterator[Path]:
    if not path.is_file():
        if required:
            raise IncompleteCheckpointError(
                f"checkpoint file {path} is missing: the checkpoint is damaged or was copied in "
                "part"
            )
        return
    yield path
    checksum = path.with_name(f".{path.name}.crc")
    if checksum.is_file():
        yield checksum


def _tree(folder: Path) -> Iterator[Path]:
    """Every file under ``folder`` (none if it is not there)."""
    if folder.is_dir():
        yield from (path for path in sorted(folder.rglob("*")) if path.is_file())


def _folders(folder: Path) -> list[Path]:
    return [entry for entry in folder.iterdir() if entry.is_dir()] if folder.is_dir() else []
