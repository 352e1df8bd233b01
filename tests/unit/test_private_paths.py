"""The daemon's own folders and files: made 0700 and 0600, refused when another user owns
them or others may write to them, each refusal one line that says how to fix it."""

from __future__ import annotations

import logging
import os
import stat
import tempfile
from pathlib import Path

import pytest

from daemon.private_paths import (
    SharedFolderError,
    open_private,
    private_folder,
    runtime_folder,
    write_private_text,
)

OTHER_UID = 54321
"""A uid no test runs as (the tests run as root in CI, so they can give folders away)."""


def mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def test_missing_folders_are_made_0700_whatever_the_umask(tmp_path: Path) -> None:
    before = os.umask(0)
    try:
        folder = private_folder(tmp_path / "state" / "views", what="checkpoint")
    finally:
        os.umask(before)
    assert (mode(folder), mode(folder.parent)) == (0o700, 0o700)


def test_the_users_own_folder_that_others_could_read_is_closed(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    folder = tmp_path / "views"
    folder.mkdir()
    folder.chmod(0o755)
    with caplog.at_level(logging.WARNING, logger="enrichd"):
        private_folder(folder, what="checkpoint")
    assert mode(folder) == 0o700
    assert "was readable by other users" in caplog.text


@pytest.mark.skipif(os.getuid() != 0, reason="only root can give a folder to another user")
def test_a_folder_of_another_user_is_refused_with_the_fix(tmp_path: Path) -> None:
    folder = tmp_path / "views"
    folder.mkdir(mode=0o700)
    os.chown(folder, OTHER_UID, -1)
    with pytest.raises(SharedFolderError) as refused:
        private_folder(folder, what="checkpoint", elsewhere="or choose another checkpoint")
    line = str(refused.value)
    assert "\n" not in line
    assert f"belongs to uid {OTHER_UID}" in line
    assert f"chown -R {os.getuid()} {folder}" in line
    assert line.endswith("or choose another checkpoint")


def test_a_folder_others_may_write_to_is_refused_and_left_as_it_is(tmp_path: Path) -> None:
    folder = tmp_path / "views"
    folder.mkdir()
    folder.chmod(0o777)
    with pytest.raises(SharedFolderError, match=r"open to other users \(mode 0777\).*chmod -R go="):
        private_folder(folder, what="checkpoint")
    assert mode(folder) == 0o777


def test_a_planted_link_is_refused_where_links_are_not_followed(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere"
    target.mkdir(mode=0o700)
    link = tmp_path / "enrichd-0"
    link.symlink_to(target)
    with pytest.raises(SharedFolderError, match="symbolic link"):
        private_folder(link, what="the runtime folder", follow=False)
    assert private_folder(link, what="checkpoint") == link  # a path the user gave: followed


def test_the_runtime_folder_is_the_users_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    folder = runtime_folder()
    assert folder == tmp_path / f"enrichd-{os.getuid()}"
    assert mode(folder) == 0o700


@pytest.mark.skipif(os.getuid() != 0, reason="only root can give a folder to another user")
def test_a_runtime_folder_made_first_by_another_user_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    squatted = tmp_path / f"enrichd-{os.getuid()}"
    squatted.mkdir(mode=0o700)
    os.chown(squatted, OTHER_UID, -1)
    with pytest.raises(SharedFolderError, match="or set TMPDIR to a folder of your own"):
        runtime_folder()


def test_files_are_written_0600_even_over_an_older_readable_one(tmp_path: Path) -> None:
    path = tmp_path / "shape.json"
    path.write_text("old", encoding="utf-8")
    path.chmod(0o644)
    write_private_text(path, "new")
    assert (path.read_text(encoding="utf-8"), mode(path)) == ("new", 0o600)
    os.close(open_private(tmp_path / "lock"))
    assert mode(tmp_path / "lock") == 0o600


def test_an_atomic_write_replaces_the_file_whole_and_leaves_nothing_beside_it(
    tmp_path: Path,
) -> None:
    path = tmp_path / "due.json"
    path.write_text("old", encoding="utf-8")
    path.chmod(0o644)
    old_inode = path.stat().st_ino
    write_private_text(path, "new", atomic=True)
    assert (path.read_text(encoding="utf-8"), mode(path)) == ("new", 0o600)
    assert path.stat().st_ino != old_inode  # renamed over it, not written in place
    assert [p.name for p in tmp_path.iterdir()] == ["due.json"]


def test_files_are_never_opened_through_a_link(tmp_path: Path) -> None:
    (tmp_path / "elsewhere").write_text("theirs", encoding="utf-8")
    (tmp_path / "lock").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(OSError):
        open_private(tmp_path / "lock")
    assert (tmp_path / "elsewhere").read_text(encoding="utf-8") == "theirs"
