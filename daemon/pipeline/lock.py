"""One daemon per checkpoint: an exclusive lock file in each pipeline's checkpoint folder.

Two Spark queries writing one checkpoint corrupt it (both plan batch N, both commit), and two
sinks sharing one transactional id fence each other off in turn. So ``daemon run`` takes
``fcntl.flock`` on ``<checkpoint>/enrichd.lock`` (:func:`~daemon.checkpoint.layout.lock_file`)
before Spark starts and holds it for the life of the process. The kernel drops the lock when
the process ends, however it ends (kill -9 included), so a stale file never blocks a restart.
The file holds the holder's pid, for the error message only. ``flock`` is advisory and per
host: a checkpoint on a network file system shared by two hosts is not protected by it.
"""

from __future__ import annotations

import fcntl
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

from daemon.checkpoint.layout import lock_file
from daemon.errors import EnrichdError
from daemon.model.config import PipelineFile
from daemon.private_paths import open_private, private_folder


class CheckpointInUseError(EnrichdError):
    """Another daemon runs on the checkpoint: stop it, or give this pipeline its own."""


class CheckpointUnwritableError(EnrichdError):
    """The daemon's user cannot write the checkpoint folder: give it access, or another folder."""


class CheckpointLocks:
    """The lock files held by this process; :meth:`release` lets them go."""

    def __init__(self) -> None:
        self._held: dict[Path, IO[str]] = {}

    def acquire(self, pipeline: str, checkpoint: Path) -> None:
        """Lock ``checkpoint`` for ``pipeline``, creating the folder if needed.

        Raises:
            CheckpointInUseError: another process, or another pipeline of this file, holds it.
            CheckpointUnwritableError: the folder or its lock file cannot be written.
            SharedFolderError: the folder is another user's, or others may write in it.
        """
        folder = checkpoint.resolve()
        if folder in self._held:
            raise CheckpointInUseError(
                f"pipeline {pipeline!r}: checkpoint {checkpoint} is also used by another "
                "pipeline of this file; give each pipeline its own checkpoint"
            )
        path = lock_file(folder)
        try:
            # The checkpoint holds the join state, and so the records joined: 0700 (and
            # refused if another user owns it or may write in it: daemon.private_paths).
            private_folder(
                folder,
                what=f"pipeline {pipeline!r}: checkpoint",
                elsewhere="or point `checkpoint` at a folder of your own",
            )
            handle = os.fdopen(open_private(path), "a+", encoding="utf-8")
        except OSError as exc:
            raise CheckpointUnwritableError(
                f"pipeline {pipeline!r}: cannot write checkpoint {checkpoint} "
                f"({exc.strerror}: {exc.filename}); give the user the daemon runs as "
                f"(uid {os.getuid()}) write access to it, or point `checkpoint` elsewhere"
            ) from None
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "unknown"
            handle.close()
            raise CheckpointInUseError(
                f"pipeline {pipeline!r}: checkpoint {checkpoint} is in use by another daemon "
                f"(pid {holder}, lock {path}); stop that one first, or give this pipeline "
                "another checkpoint"
            ) from None
        handle.seek(0)
        handle.truncate()
        handle.write(f"{os.getpid()}\n")
        handle.flush()
        self._held[folder] = handle

    def release(self) -> None:
        """Unlock every checkpoint (closing the file drops its lock)."""
        for handle in self._held.values():
            handle.close()
        self._held.clear()


def lock_checkpoints(file: PipelineFile) -> CheckpointLocks:
    """Lock the checkpoint of every pipeline of ``file``, or none of them.

    Raises:
        CheckpointInUseError: a checkpoint is held by another daemon or shared in the file.
        CheckpointUnwritableError: a checkpoint cannot be written by this process's user.
    """
    locks = CheckpointLocks()
    try:
        for pipe in file.pipeline:
            locks.acquire(pipe.name, pipe.checkpoint)
    except BaseException:
        locks.release()
        raise
    return locks


@contextmanager
def held(pipeline: str, checkpoint: Path) -> Iterator[None]:
    """Hold one pipeline's checkpoint for a command (``daemon reset``, ``snapshot``, ...).

    A checkpoint folder that taking the lock made is removed again if the command fails.

    Raises:
        CheckpointInUseError: a daemon runs on the checkpoint.
        CheckpointUnwritableError: it cannot be written by this process's user.
    """
    existed = Path(checkpoint).exists()
    locks = CheckpointLocks()
    locks.acquire(pipeline, checkpoint)
    done = False
    try:
        yield
        done = True
    finally:
        locks.release()
        if not done and not existed:
            shutil.rmtree(checkpoint, ignore_errors=True)
