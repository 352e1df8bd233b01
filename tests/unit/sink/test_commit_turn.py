"""The commit turn: taken only where asked, as the plan decides, in a private lock file."""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

import pytest

from daemon.private_paths import SharedFolderError
from daemon.sink import commit_turn
from daemon.sink.commit_turn import LOCK_NAME, ending_transaction, turn_needed


@pytest.fixture
def runtime(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The runtime folder, in a temporary folder of this test's."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    return tmp_path / f"enrichd-{os.getuid()}"


def test_a_forced_setting_wins_without_asking_the_cluster(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def no_cluster(conf: dict[str, str]) -> bool:
        raise AssertionError("the cluster was asked")

    monkeypatch.setattr(commit_turn, "is_embedded", no_cluster)
    assert turn_needed(True, {}) is True
    assert turn_needed(False, {}) is False


def test_unset_it_follows_the_cluster(monkeypatch: pytest.MonkeyPatch) -> None:
    for embedded in (True, False):
        monkeypatch.setattr(commit_turn, "is_embedded", lambda conf, found=embedded: found)
        assert turn_needed(None, {"bootstrap.servers": "b:9092"}) is embedded


def test_no_turn_touches_no_lock(runtime: Path) -> None:
    with ending_transaction(False):
        pass
    assert not runtime.exists()


def test_the_turn_is_a_private_lock_in_the_runtime_folder(runtime: Path) -> None:
    with ending_transaction(True):
        lock = runtime / LOCK_NAME
        assert stat.S_IMODE(lock.stat().st_mode) == 0o600
    assert stat.S_IMODE(runtime.stat().st_mode) == 0o700


def test_the_turn_refuses_a_runtime_folder_open_to_others(runtime: Path) -> None:
    runtime.mkdir()
    runtime.chmod(0o777)
    with pytest.raises(SharedFolderError), ending_transaction(True):
        pass
