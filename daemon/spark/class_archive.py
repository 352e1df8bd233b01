"""Spark's JVM classes, archived by one start for every later one (class-data sharing).

A JVM that starts Spark spends about half of its CPU loading and verifying the classes in
Spark's jars. Java can instead map classes that an earlier run archived, which roughly halves
that (BENCHMARKS.md, "Start-up with and without Spark's class archive").

The archive is made by the first start that finds none for this Java and this Spark: its JVM
records the classes it loads and writes them out as it exits (``-XX:ArchiveClassesAtExit``),
which makes that one run slower and its exit longer. The process waits for that
at its exit and moves the finished file into place; every later start maps it
(``-XX:SharedArchiveFile``). One process at a time records (a lock next to the archive); the
others start as they did before. An archive that does not fit this JVM is ignored by it.

Where: ``$ENRICHD_CLASS_ARCHIVE_DIR``, else ``$XDG_CACHE_HOME/enrichd``, else
``~/.cache/enrichd``. ``ENRICHD_CLASS_ARCHIVE=map`` maps an archive but never records one
(the container image, whose archive is made as it is built, and the test suite);
``ENRICHD_CLASS_ARCHIVE=off`` turns it off.

A JVM trusts the classes it maps, so an archive is used only from a folder and a file that
no one but the user (or root, who made the image's) may write to; one another user could
have planted is ignored, with a warning. An archive holds Spark's classes and nothing of the
user's: it is readable by everyone, like the jars it comes from.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import hashlib
import logging
import os
import shutil
import stat
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import IO

log = logging.getLogger("enrichd.spark")

SWITCH = "ENRICHD_CLASS_ARCHIVE"
DIRECTORY = "ENRICHD_CLASS_ARCHIVE_DIR"
_QUIET = "-Xlog:cds*=off"  # its per-class notes as it archives are of no use to anyone
_WRITE_TIMEOUT_S = 120.0  # how long an exit waits for the JVM to write the archive


def directory() -> Path:
    """Where archives are kept."""
    if chosen := os.environ.get(DIRECTORY):
        return Path(chosen)
    cache = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(cache) / "enrichd"


def _trusted(path: Path) -> bool:
    """Whether only this user or root may write ``path`` (a missing one: nothing to fear)."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return True
    if stat.S_ISLNK(info.st_mode) or info.st_uid not in (os.getuid(), 0):
        owner = "a link" if stat.S_ISLNK(info.st_mode) else f"owned by uid {info.st_uid}"
    elif info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        owner = f"writable by other users (mode {stat.S_IMODE(info.st_mode):04o})"
    else:
        return True
    log.warning(
        "not using Spark's class archive at %s: it is %s, so it may not be Spark's; "
        "remove it, or set %s to a folder of your own",
        path,
        owner,
        DIRECTORY,
    )
    return False


def archive_path() -> Path | None:
    """The archive for this Java and this Spark (it may not exist yet); None: no Java found."""
    # Late: Spark loads when a session starts, not in commands that start none.
    import pyspark

    home = os.environ.get("JAVA_HOME")  # the java Spark's launch scripts run
    java = shutil.which("java", path=f"{home}/bin" if home else None)
    if java is None:
        return None
    java = os.path.realpath(java)
    made = os.stat(java).st_mtime_ns
    key = f"{java}|{made}|{pyspark.__version__}|{os.path.dirname(pyspark.__file__)}"
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    return directory() / f"spark-{pyspark.__version__}-{digest}.jsa"


@dataclass
class _Recording:
    """A start that records its classes: its lock, and where its JVM writes them."""

    lock: IO[bytes]
    partial: Path
    archive: Path

    def finish(self, jvm: subprocess.Popen[bytes]) -> None:
        """Let the JVM exit and write the archive; move it into place if it did."""
        try:
            if jvm.poll() is None and jvm.stdin is not None:
                jvm.stdin.close()  # Spark's gateway exits when its stdin ends
            jvm.wait(_WRITE_TIMEOUT_S)
            if jvm.returncode == 0 and self.partial.exists() and self.partial.stat().st_size:
                # Written under the JVM's umask of 077; every user of the host (an image's)
                # may map it.
                os.chmod(self.partial, 0o644)
                os.replace(self.partial, self.archive)
        except (OSError, subprocess.TimeoutExpired):
            pass  # no archive this time; the next start that finds none records again
        finally:
            self.partial.unlink(missing_ok=True)
            self.lock.close()


class ClassArchive:
    """What one JVM start does with the archive: map it, record one, or neither."""

    def __init__(self) -> None:
        self.options = ""
        self._recording: _Recording | None = None
        switch = os.environ.get(SWITCH, "").lower()
        if switch in ("off", "0", "false", "no"):
            return
        archive = archive_path()
        if archive is None or not _trusted(archive.parent):
            return
        if archive.exists():
            if not _trusted(archive):
                return
            self.options = f"-XX:SharedArchiveFile={archive} {_QUIET}"
            return
        if switch == "map":  # use one that exists, never record
            return
        self._recording = self._record(archive)
        if self._recording is not None:
            self.options = f"-XX:ArchiveClassesAtExit={self._recording.partial} {_QUIET}"

    @staticmethod
    def _record(archive: Path) -> _Recording | None:
        try:
            archive.parent.mkdir(parents=True, exist_ok=True)
            lock = archive.with_suffix(".lock").open("ab")
        except OSError:  # a read-only home: start without
            return None
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:  # another process is recording
            lock.close()
            return None
        # Left by a recording whose process ended before its JVM finished writing.
        for stale in archive.parent.glob(f"{archive.stem}.*.partial"):
            with contextlib.suppress(OSError):
                stale.unlink()
        return _Recording(lock, archive.with_suffix(f".{os.getpid()}.partial"), archive)

    def started(self, jvm: subprocess.Popen[bytes] | None) -> None:
        """The JVM is up: if it records, finish the archive as this process exits.

        None: the JVM is not a child of this process (PySpark was given a running gateway).
        """
        if self._recording is None:
            return
        if jvm is None:
            self._recording.lock.close()
        else:
            atexit.register(self._recording.finish, jvm)
