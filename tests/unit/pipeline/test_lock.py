"""One daemon per checkpoint: the lock file, held and refused, released by process death."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from daemon.checkpoint.layout import lock_file
from daemon.model.config import parse_pipeline_file
from daemon.pipeline.lock import (
    CheckpointInUseError,
    CheckpointLocks,
    CheckpointUnwritableError,
    lock_checkpoints,
)


def one_pipeline(name: str, checkpoint: Path) -> dict[str, object]:
    return {
        "name": name,
        "joiner": "comap",
        "checkpoint": str(checkpoint),
        "inputs": {
            "one": {"topic": "users", "schema": "user.avsc", "key": "id"},
            "many": {"topic": "tweets", "schema": "tweet.avsc", "key": "author_id"},
        },
        "output": {"topic": "views", "schema": "view.avsc"},
    }


def test_a_second_holder_is_refused_with_the_holders_pid(tmp_path: Path) -> None:
    first, second = CheckpointLocks(), CheckpointLocks()
    checkpoint = tmp_path / "state" / "views"
    first.acquire("views", checkpoint)
    with pytest.raises(CheckpointInUseError) as refused:
        second.acquire("views", checkpoint)
    assert str(refused.value) == (
        f"pipeline 'views': checkpoint {checkpoint} is in use by another daemon "
        f"(pid {os.getpid()}, lock {lock_file(checkpoint)}); stop that one first, or give "
        "this pipeline another checkpoint"
    )
    first.release()
    second.acquire("views", checkpoint)  # free again once released
    second.release()


def test_two_pipelines_of_one_file_on_one_checkpoint_are_refused(tmp_path: Path) -> None:
    checkpoint = tmp_path / "shared"
    file = parse_pipeline_file(
        tmp_path / "p.toml",
        {"pipeline": [one_pipeline("a", checkpoint), one_pipeline("b", checkpoint)]},
    )
    with pytest.raises(CheckpointInUseError, match="also used by another pipeline"):
        lock_checkpoints(file)
    lock_checkpoints(file.model_copy(update={"pipeline": file.pipeline[:1]})).release()


def test_kill_9_of_the_holder_frees_the_checkpoint(tmp_path: Path) -> None:
    checkpoint = tmp_path / "views"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time\n"
            "from pathlib import Path\n"
            "from daemon.pipeline.lock import CheckpointLocks\n"
            "locks = CheckpointLocks()\n"
            f"locks.acquire('views', Path({str(checkpoint)!r}))\n"
            "print('locked', flush=True)\n"
            "time.sleep(600)\n",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "locked\n"
        with pytest.raises(CheckpointInUseError, match=f"pid {holder.pid},"):
            CheckpointLocks().acquire("views", checkpoint)
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait(10)
    locks = CheckpointLocks()
    deadline = time.monotonic() + 10
    while True:  # the kernel drops the lock as it reaps the process
        try:
            locks.acquire("views", checkpoint)
            break
        except CheckpointInUseError:
            assert time.monotonic() < deadline
            time.sleep(0.05)
    assert lock_file(checkpoint).read_text() == f"{os.getpid()}\n"
    locks.release()


def test_a_checkpoint_that_cannot_be_written_is_one_line_naming_it(tmp_path: Path) -> None:
    """Here a file stands where its folder should be (the tests run as root, whom file modes
    do not stop; the image's tests check a folder its user may not write)."""
    (tmp_path / "state").write_text("not a folder")
    checkpoint = tmp_path / "state" / "views"
    with pytest.raises(CheckpointUnwritableError) as refused:
        CheckpointLocks().acquire("views", checkpoint)
    assert str(refused.value) == (
        f"pipeline 'views': cannot write checkpoint {checkpoint} (Not a directory: "
        f"{checkpoint.resolve()}); give the user the daemon runs as (uid {os.getuid()}) write "
        "access to it, or point `checkpoint` elsewhere"
    )
