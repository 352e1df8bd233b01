"""Spark's scratch space on this host, where the join state's working copy lives.

Spark writes its scratch files under ``spark.local.dir``, the temporary folder unless set: the
RocksDB state store's working copy of every state partition the process holds (about the
size of the state, more while RocksDB compacts), and shuffle files. A container's ``/tmp``
is small (a 2 GiB emptyDir in the Kubernetes manifests: a larger state gets the pod evicted),
and on many hosts ``/tmp`` is a tmpfs, in memory. ``[spark] local_dir``, or
``$ENRICHD_SPARK_LOCAL_DIR`` when the file leaves it unset, puts it in a folder whose size is
planned (docs/operations.md, "Spark's scratch space"). ``spark.local.dir`` set in
``[spark.conf]`` is Spark's own and used as it is; ``SPARK_LOCAL_DIRS`` in the environment
overrides both, as Spark has it.

Spark removes its folders there when its JVM ends normally, not after a ``kill -9`` or an
out-of-memory kill, and a process restarted in the same container finds them still there: on a
volume that outlives the process each crash would leave a state's worth behind. So each
process works in a folder of its own under the local folder, ``run-<id>``, while holding a
lock on ``run-<id>.lock`` beside it, and a start removes every run folder whose lock no living
process holds. The local folder is made private (0700), as a checkpoint is: the working copy
holds the records joined.

Example:
    >>> import tempfile
    >>> from pathlib import Path
    >>> base = Path(tempfile.mkdtemp()) / "scratch"
    >>> folder = run_folder(base)
    >>> folder.parent == base, folder.name.startswith("run-"), run_folder(base) == folder
    (True, True, True)
"""

from __future__ import annotations

import fcntl
import os
import shutil
import uuid
from pathlib import Path
from typing import IO

from daemon.model.config import SparkConfig
from daemon.private_paths import open_private, private_folder

LOCAL_DIR = "spark.local.dir"
"""Spark's setting of its scratch folders."""
LOCAL_DIR_ENV = "ENRICHD_SPARK_LOCAL_DIR"
"""The local folder when the pipeline file sets no ``[spark] local_dir`` (the containers')."""
RUN_PREFIX = "run-"
LOCK_SUFFIX = ".lock"

_held: dict[Path, tuple[Path, IO[str]]] = {}
"""This process's run folder under each local folder, and its lock, held for its life."""


def local_dir(config: SparkConfig) -> Path | None:
    """The local folder ``config`` (or the environment) asks for; None: Spark's default."""
    if LOCAL_DIR in config.conf:
        return None
    given = config.local_dir or os.environ.get(LOCAL_DIR_ENV) or None
    return Path(given) if given else None


def run_folder(base: Path) -> Path:
    """The scratch folder of this process under ``base``, made and locked on first use.

    Run folders under ``base`` that no living process holds are removed first.

    Raises:
        SharedFolderError: ``base`` is another user's, or others may write in it.
        OSError: it cannot be made.
    """
    if base in _held:
        return _held[base][0]
    private_folder(
        base, what="[spark] local_dir", elsewhere="or point it at a folder of your own in it"
    )
    for lock in base.glob(f"{RUN_PREFIX}*{LOCK_SUFFIX}"):
        _remove_if_left(lock)
    for folder in base.glob(f"{RUN_PREFIX}*"):
        if folder.is_dir() and not folder.with_name(folder.name + LOCK_SUFFIX).exists():
            shutil.rmtree(folder, ignore_errors=True)  # its remover stopped halfway
    name = f"{RUN_PREFIX}{uuid.uuid4().hex[:12]}"
    # Locked under a name no one looks at, then renamed: whoever sees a run's lock file sees
    # it held, so a start never takes a run that is starting for one that was left.
    staged = base / f".{name}{LOCK_SUFFIX}"
    handle = os.fdopen(open_private(staged), "w", encoding="utf-8")
    fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    staged.rename(base / f"{name}{LOCK_SUFFIX}")
    folder = private_folder(base / name, what="[spark] local_dir's run folder")
    _held[base] = (folder, handle)
    return folder


def _remove_if_left(lock: Path) -> None:
    """Remove the run folder of ``lock`` and the lock itself if no process holds it."""
    try:
        handle = lock.open("a", encoding="utf-8")
    except OSError:
        return
    with handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return  # a living process's
        shutil.rmtree(lock.with_name(lock.name.removesuffix(LOCK_SUFFIX)), ignore_errors=True)
        lock.unlink(missing_ok=True)
