"""Which files of a checkpoint its last committed micro-batch needs.

The kept checkpoint of state format 1 (tests/fixtures/checkpoint-format-1) is one a real query
wrote; the checkpoints made here lay out more versions than a test run would make, the way
Spark's RocksDB store names them (a real run's is snapshotted in
tests/state/test_state_commands.py).
"""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import pytest

from daemon.checkpoint.committed_files import IncompleteCheckpointError, committed_files
from tests.fixtures.checkpoint_format_1 import FIXTURE


def test_the_kept_checkpoint_needs_all_it_holds_but_a_changelog_its_snapshot_covers() -> None:
    every = {str(path.relative_to(FIXTURE)) for path in FIXTURE.rglob("*") if path.is_file()}
    needed = set(committed_files(FIXTURE))
    # Version 1 (micro-batch 0's) is both in 1.zip and in 1.changelog: the snapshot is enough.
    assert every - needed == {"state/0/0/1.changelog", "state/0/0/.1.changelog.crc"}
    assert "state/0/0/SSTs/000008-eabd5f7b-89ae-41f6-8146-a3803c65d723.sst" in needed


def touch(path: Path, text: str = "x") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.with_name(f".{path.name}.crc").write_text("crc")


def rocksdb_snapshot(store: Path, version: int, ssts: list[str]) -> None:
    """``VERSION.zip`` naming ``ssts`` as its SST files, and those files, as Spark lays them."""
    metadata = {"sstFiles": [{"localFileName": "1.sst", "dfsSstFileName": n} for n in ssts]}
    store.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(store / f"{version}.zip", "w") as archive:
        archive.writestr("CURRENT", "MANIFEST-000005\n")
        archive.writestr("metadata", "v1\n" + json.dumps(metadata))
    for name in ssts:
        touch(store / "SSTs" / name)


def checkpoint_at(folder: Path, *, committed: int, planned: int) -> Path:
    """A checkpoint whose batches 0..``committed`` committed and ``planned`` was planned,
    with one state partition of many versions: snapshots at 10 and 20, changelogs 1-25."""
    touch(folder / "metadata", '{"id":"q"}')
    touch(folder / "enrichd-pipeline.json", "{}")
    for batch in range(planned + 1):
        touch(folder / "offsets" / str(batch))
    for batch in range(committed + 1):
        touch(folder / "commits" / str(batch))
    store = folder / "state" / "0" / "0"
    rocksdb_snapshot(store, 10, ["000004-a.sst"])
    rocksdb_snapshot(store, 20, ["000004-a.sst", "000009-b.sst"])
    touch(store / "SSTs" / "000002-old.sst")  # only older versions use it
    for version in range(1, 26):
        touch(store / f"{version}.changelog")
    touch(folder / "state" / "0" / "_metadata" / "v2" / "0")
    touch(folder / "state" / "0" / "_stateSchema" / "default" / "0_a")
    return folder


def test_the_state_of_the_committed_version_is_its_last_snapshot_and_later_changelogs(
    tmp_path: Path,
) -> None:
    checkpoint = checkpoint_at(tmp_path / "cp", committed=22, planned=23)
    store = "state/0/0"
    (checkpoint / store / "_metadata").mkdir()  # Spark 4.3 makes it, empty, in each partition
    needed = {name for name in committed_files(checkpoint) if not name.endswith(".crc")}
    assert needed == {
        "metadata",
        "enrichd-pipeline.json",
        # The batch before (where the replayed batch starts), the last committed, the pending.
        "offsets/21",
        "offsets/22",
        "offsets/23",
        "commits/22",
        "state/0/_metadata/v2/0",
        "state/0/_stateSchema/default/0_a",
        # Micro-batch 22 committed version 23: snapshot 20, then changelogs 21 to 23.
        f"{store}/20.zip",
        f"{store}/SSTs/000004-a.sst",
        f"{store}/SSTs/000009-b.sst",
        f"{store}/21.changelog",
        f"{store}/22.changelog",
        f"{store}/23.changelog",
    }
    assert f"{store}/.21.changelog.crc" in committed_files(checkpoint)


def test_a_second_stage_is_kept_the_same_way(tmp_path: Path) -> None:
    checkpoint = checkpoint_at(tmp_path / "cp", committed=22, planned=22)
    checkpoint_at(checkpoint / "downstream" / "totals", committed=9, planned=9)
    needed = committed_files(checkpoint)
    assert "downstream/totals/commits/9" in needed
    assert "downstream/totals/state/0/0/10.zip" in needed  # version 10: its own snapshot
    assert not any(
        name.startswith("downstream/totals/state/0/0/1") and "changelog" in name for name in needed
    )


def test_a_missing_file_or_an_unknown_state_file_refuses_the_checkpoint(tmp_path: Path) -> None:
    checkpoint = checkpoint_at(tmp_path / "cp", committed=22, planned=22)
    (checkpoint / "state" / "0" / "0" / "22.changelog").unlink()
    with pytest.raises(IncompleteCheckpointError, match="lacks 22.changelog"):
        committed_files(checkpoint)

    checkpoint = checkpoint_at(tmp_path / "other", committed=22, planned=22)
    (checkpoint / "state" / "0" / "0" / "SSTs" / "000009-b.sst").unlink()
    with pytest.raises(IncompleteCheckpointError, match="000009-b.sst is missing"):
        committed_files(checkpoint)

    checkpoint = checkpoint_at(tmp_path / "v2", committed=22, planned=22)
    touch(checkpoint / "state" / "0" / "0" / "23_5f0c.changelog")  # checkpointFormatVersion 2
    with pytest.raises(IncompleteCheckpointError, match="23_5f0c.changelog is not a file of"):
        committed_files(checkpoint)


def test_a_checkpoint_that_committed_nothing_has_nothing_to_keep_but_its_seed(
    tmp_path: Path,
) -> None:
    touch(tmp_path / "cp" / "enrichd-pipeline.json", "{}")
    with pytest.raises(IncompleteCheckpointError, match="committed no micro-batch yet"):
        committed_files(tmp_path / "cp")
    touch(tmp_path / "cp" / "enrichd-seed" / "offsets.json", "{}")
    assert committed_files(tmp_path / "cp") == [
        ".enrichd-pipeline.json.crc",
        "enrichd-pipeline.json",
        "enrichd-seed/.offsets.json.crc",
        "enrichd-seed/offsets.json",
    ]
