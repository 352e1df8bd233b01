"""Spark's scratch folder: where the state's working copy goes, and what a crash left there."""

from __future__ import annotations

import fcntl
from pathlib import Path

import pytest

from daemon.model.config import SparkConfig
from daemon.private_paths import SharedFolderError
from daemon.spark import scratch


def test_the_file_s_folder_comes_first_then_the_environment_then_spark_s_own(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv(scratch.LOCAL_DIR_ENV, raising=False)
    assert scratch.local_dir(SparkConfig()) is None  # Spark's default: the temporary folder
    monkeypatch.setenv(scratch.LOCAL_DIR_ENV, str(tmp_path / "env"))
    assert scratch.local_dir(SparkConfig()) == tmp_path / "env"
    assert scratch.local_dir(SparkConfig(local_dir=tmp_path / "file")) == tmp_path / "file"
    own = SparkConfig(local_dir=tmp_path / "file", conf={"spark.local.dir": "/srv/spark"})
    assert scratch.local_dir(own) is None  # Spark's own setting, taken as it is


def test_each_process_works_in_a_private_run_folder_it_holds(tmp_path: Path) -> None:
    folder = scratch.run_folder(tmp_path / "scratch")
    assert folder.parent == tmp_path / "scratch" and folder.is_dir()
    assert (tmp_path / "scratch").stat().st_mode & 0o777 == 0o700
    assert scratch.run_folder(tmp_path / "scratch") == folder
    lock = folder.with_name(folder.name + scratch.LOCK_SUFFIX)
    with lock.open("a") as other, pytest.raises(BlockingIOError):
        fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)  # held while the process lives


def test_a_start_removes_the_run_folders_no_living_process_holds(tmp_path: Path) -> None:
    base = tmp_path / "scratch"
    base.mkdir(mode=0o700)
    left = base / "run-left"  # a process killed with its JVM's working copy in it
    (left / "StateStoreId(opId=0,partId=0)-1").mkdir(parents=True)
    (left / "StateStoreId(opId=0,partId=0)-1" / "000008.sst").write_bytes(b"x" * 100)
    (base / "run-left.lock").write_text("")
    unlocked = base / "run-halfway"  # its remover stopped after the lock went
    unlocked.mkdir()
    living = base / "run-living"
    living.mkdir()
    with (base / "run-living.lock").open("a") as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        mine = scratch.run_folder(base)
        names = {entry.name for entry in base.iterdir()}
    assert names == {"run-living", "run-living.lock", mine.name, f"{mine.name}.lock"}


def test_a_folder_others_may_write_to_is_refused(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    with pytest.raises(SharedFolderError, match=r"\[spark\] local_dir .* is open to other users"):
        scratch.run_folder(shared)
