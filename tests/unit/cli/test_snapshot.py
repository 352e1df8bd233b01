"""``daemon snapshot`` and ``daemon restore`` on the kept checkpoint a real query wrote.

No Spark runs here: both commands only copy and check files. A snapshot restored and run on
by the engine is in tests/state/test_state_commands.py (the rescale test).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from daemon.checkpoint.committed_files import committed_files
from daemon.checkpoint.layout import manifest_file, metadata_file, shape_file
from daemon.cli import app
from daemon.errors import EnrichdError
from daemon.pipeline.lock import CheckpointInUseError, CheckpointLocks
from tests.fixtures.checkpoint_format_1 import FIXTURE, LAYOUT, STEM, moved_to
from tests.kafka_helpers import TweetViews
from tests.state_helpers import listing

SCHEMA = "state/0/_metadata/v2/0"
"""The operator's metadata, which names its state schema file by an absolute path."""


def kept(folder: Path) -> TweetViews:
    """The kept checkpoint's pipeline file (no broker: nothing here reaches one) and a copy."""
    views = TweetViews(
        "127.0.0.1:9",
        folder,
        name=f"views-{STEM}",
        users=f"users-{STEM}",
        tweets=f"tweets-{STEM}",
        output=f"views-{STEM}",
        dead_letters=f"views-{STEM}.dlq",
    )
    views.write(buckets=LAYOUT["buckets"])
    shutil.copytree(FIXTURE, views.checkpoint)
    moved_to(views.checkpoint)
    return views


def daemon(*args: str | Path, answer: str = "") -> Result:
    return CliRunner().invoke(app, [str(arg) for arg in args], input=answer)


def refused(result: Result) -> str:
    """The one line a refused command's error becomes (``daemon.cli.main`` prints it)."""
    assert result.exit_code == 1 and isinstance(result.exception, EnrichdError), result.output
    message = str(result.exception)
    assert "\n" not in message
    return message


def test_a_snapshot_holds_what_the_committed_batch_needs_with_its_checksums(
    tmp_path: Path,
) -> None:
    views = kept(tmp_path)
    before = listing(views.checkpoint)
    done = daemon("snapshot", views.path, "--to", tmp_path / "snap")
    assert done.exit_code == 0, done.output
    assert done.output.startswith(
        f"pipeline 'views-{STEM}': snapshot of micro-batch 0 of pipeline 'views-{STEM}', taken"
    )
    manifest = json.loads(manifest_file(tmp_path / "snap").read_text())
    assert sorted(manifest["files"]) == committed_files(views.checkpoint)
    assert manifest["micro_batch"] == 0 and manifest["pipeline"] == f"views-{STEM}"
    assert manifest["shape"] == json.loads(shape_file(views.checkpoint).read_text())
    for name in manifest["files"]:
        assert (tmp_path / "snap" / name).read_bytes() == (views.checkpoint / name).read_bytes()
    assert (tmp_path / "snap").stat().st_mode & 0o777 == 0o700
    assert listing(views.checkpoint) == before  # read only

    again = daemon("snapshot", views.path, "--to", tmp_path / "snap")
    assert "is not empty; give a new folder" in refused(again)


def test_a_restore_puts_the_snapshot_in_place_as_a_query_of_its_own(tmp_path: Path) -> None:
    """Restored into another folder than it was taken from (a new volume, say), the copy
    names its own schema files and gets a new query id; the old contents move aside."""
    views = kept(tmp_path / "a")
    assert daemon("snapshot", views.path, "--to", tmp_path / "snap").exit_code == 0
    elsewhere = kept(tmp_path / "b")
    (elsewhere.checkpoint / "offsets" / "1").write_text("v1\n")  # it ran on after the snapshot
    old_id = json.loads(metadata_file(elsewhere.checkpoint).read_text())["id"]

    cancelled = daemon("restore", elsewhere.path, "--from", tmp_path / "snap", answer="n\n")
    assert "restore cancelled; nothing changed" in refused(cancelled)
    assert (elsewhere.checkpoint / "offsets" / "1").exists()

    done = daemon("restore", elsewhere.path, "--from", tmp_path / "snap", "--yes")
    assert done.exit_code == 0, done.output
    assert "the old checkpoint is in" in done.output
    (backup,) = (tmp_path / "b").glob("checkpoint.before-restore-*")
    assert (backup / "offsets" / "1").exists()
    restored = elsewhere.checkpoint
    assert not (restored / "offsets" / "1").exists()
    for name in committed_files(views.checkpoint):
        if name not in ("metadata", ".metadata.crc", SCHEMA, ".0.crc"):
            assert (restored / name).read_bytes() == (views.checkpoint / name).read_bytes(), name
    new_id = json.loads(metadata_file(restored).read_text())["id"]
    assert new_id not in (old_id, json.loads(metadata_file(views.checkpoint).read_text())["id"])
    assert f'"file:{restored}/state/0/_stateSchema/default/' in (restored / SCHEMA).read_text()
    assert str(views.checkpoint) not in (restored / SCHEMA).read_text()


def test_a_snapshot_incomplete_damaged_or_of_another_pipeline_is_refused_with_one_line(
    tmp_path: Path,
) -> None:
    views = kept(tmp_path / "a")
    snap = tmp_path / "snap"
    assert daemon("snapshot", views.path, "--to", snap).exit_code == 0
    before = listing(views.checkpoint)

    def restore(path: Path = views.path) -> str:
        return refused(daemon("restore", path, "--from", snap, "--yes"))

    other = tmp_path / "other.toml"
    other.write_text(views.path.read_text().replace(f'"users-{STEM}"', '"people"'))
    assert f"input 'one' topic 'users-{STEM}' is now 'people'" in restore(other)
    renamed = tmp_path / "renamed.toml"
    renamed.write_text(views.path.read_text().replace(f'name = "views-{STEM}"', 'name = "x"'))
    assert f"is of pipeline 'views-{STEM}', not 'x'" in restore(renamed)

    manifest = json.loads(manifest_file(snap).read_text())
    newer = {**manifest, "shape": {**manifest["shape"], "state": {"format": 3, "buckets": 4}}}
    manifest_file(snap).write_text(json.dumps(newer))
    assert f"snapshot {snap} holds state in format 3" in restore()
    manifest_file(snap).write_text(json.dumps(manifest))

    sst = next(name for name in manifest["files"] if name.endswith(".sst"))
    data = (snap / sst).read_bytes()
    (snap / sst).write_bytes(bytes([data[0] ^ 1]) + data[1:])  # same size, other bytes
    assert f"{sst} is not what its manifest says" in restore()
    (snap / sst).unlink()
    assert f"is incomplete: {sst} is missing" in restore()
    manifest_file(snap).unlink()
    assert "is no complete snapshot" in restore()
    assert listing(views.checkpoint) == before  # nothing was changed by any of them
    assert not list((tmp_path / "a").glob("*.before-restore-*"))


def test_both_are_refused_while_a_daemon_holds_the_checkpoint(tmp_path: Path) -> None:
    views = kept(tmp_path)
    assert daemon("snapshot", views.path, "--to", tmp_path / "snap").exit_code == 0
    locks = CheckpointLocks()
    locks.acquire("running", views.checkpoint)
    try:
        for args in (
            ("snapshot", views.path, "--to", tmp_path / "snap2"),
            ("restore", views.path, "--from", tmp_path / "snap", "--yes"),
        ):
            done = daemon(*args)
            assert isinstance(done.exception, CheckpointInUseError), done.output
            assert "is in use by another daemon" in refused(done)
    finally:
        locks.release()


def test_a_pipeline_that_never_ran_has_nothing_to_snapshot(tmp_path: Path) -> None:
    views = kept(tmp_path)
    shutil.rmtree(views.checkpoint)
    assert "holds nothing yet" in refused(daemon("snapshot", views.path, "--to", tmp_path / "s"))
    assert not views.checkpoint.exists() and not (tmp_path / "s").exists()


@pytest.mark.parametrize("command", ["snapshot", "restore"])
def test_the_help_says_what_it_does(command: str) -> None:
    done = daemon(command, "--help")
    assert done.exit_code == 0
    text = " ".join(done.output.split())
    assert "stopped pipeline" in text and "Refused while a daemon runs on the checkpoint" in text
