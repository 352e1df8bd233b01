"""The daemon's own folders and files: its user's alone, and never ones another user made.

Checkpoints hold the join state, which holds the records joined; the runtime folder
(:func:`runtime_folder`) holds Spark's log, the commit turn's lock, Spark's settings while
its JVM starts and the metrics socket. So enrichd makes its folders 0700 and its files 0600,
as Kafka Streams does its state directory, and takes over no folder that another user owns
or that others may enter: in a shared temporary folder anyone can make ``enrichd-<uid>``
first, and read what enrichd then writes there or plant files in it. A folder another user
owns, or one others may write to, is refused with one line that says how to fix it; the
user's own folder that others could only read (one an older enrichd made) is closed to them.

Spark writes most of a checkpoint itself; :mod:`daemon.spark.session` keeps its files
private (a process umask of 077 for its JVM, and Hadoop's own umask setting).

Example:
    >>> import tempfile
    >>> from pathlib import Path
    >>> folder = private_folder(Path(tempfile.mkdtemp()) / "state" / "views", what="checkpoint")
    >>> oct(folder.stat().st_mode & 0o777), oct(folder.parent.stat().st_mode & 0o777)
    ('0o700', '0o700')
"""

from __future__ import annotations

import logging
import os
import stat
import tempfile
from pathlib import Path

from daemon.errors import EnrichdError

log = logging.getLogger("enrichd")

FOLDER_MODE = 0o700
FILE_MODE = 0o600
UMASK = 0o077
"""The umask under which files come out 0600 and folders 0700."""
_OTHERS_WRITE = stat.S_IWGRP | stat.S_IWOTH
"""Bits that let others put files in a folder."""
_OTHERS_ANY = 0o077


class SharedFolderError(EnrichdError):
    """A folder of the daemon's is another user's, or open to others: the message says the fix."""


def runtime_folder() -> Path:
    """``enrichd-<uid>`` in the temporary folder (``$TMPDIR``), made private or checked.

    Raises:
        SharedFolderError: it exists, but another user owns it, others may enter it, or it
            is a symbolic link.
    """
    folder = Path(tempfile.gettempdir()) / f"enrichd-{os.getuid()}"
    return private_folder(
        folder,
        what="the runtime folder",
        elsewhere="or set TMPDIR to a folder of your own",
        follow=False,
    )


def private_folder(
    path: Path,
    *,
    what: str,
    elsewhere: str = "or choose another folder",
    follow: bool = True,
) -> Path:
    """Make ``path`` and its missing parents with mode 0700, or check the one that exists.

    Args:
        path: the folder.
        what: what it is, for the error line (``"checkpoint"``).
        elsewhere: the other way out, for the error line.
        follow: take a symbolic link to a folder as the folder (a path the user gave);
            False refuses the link (a name in a shared folder, which anyone could plant).

    Returns:
        ``path``.

    Raises:
        SharedFolderError: it exists, but is another user's, open to others, or a link
            where ``follow`` is False.
        OSError: it cannot be made (no permission on its parent, say).
    """
    missing = []
    for folder in (path, *path.parents):
        if os.path.lexists(folder):
            break
        missing.append(folder)
    for folder in reversed(missing):
        try:
            os.mkdir(folder, FOLDER_MODE)
        except FileExistsError:
            pass  # made meanwhile, by this process's other thread or by anyone: checked below
    check_private_folder(path, what=what, elsewhere=elsewhere, follow=follow)
    return path


def check_private_folder(
    path: Path, *, what: str, elsewhere: str = "or choose another folder", follow: bool = True
) -> None:
    """Refuse a folder that another user owns or others may enter (see :func:`private_folder`).

    Raises:
        SharedFolderError: the folder is not private to this process's user.
    """
    info = os.stat(path) if follow else os.lstat(path)
    uid = os.getuid()
    if stat.S_ISLNK(info.st_mode):
        raise SharedFolderError(
            f"{what} {path} is a symbolic link, which another user may have planted; "
            f"remove it, {elsewhere}"
        )
    if not stat.S_ISDIR(info.st_mode):
        raise SharedFolderError(f"{what} {path} is not a folder; remove it, {elsewhere}")
    if info.st_uid != uid:
        raise SharedFolderError(
            f"{what} {path} belongs to uid {info.st_uid}, not to uid {uid} that enrichd runs "
            f"as; give it to that user (chown -R {uid} {path}), {elsewhere}"
        )
    mode = stat.S_IMODE(info.st_mode)
    if mode & _OTHERS_WRITE:
        raise SharedFolderError(
            f"{what} {path} is open to other users (mode {mode:04o}), who may have put "
            f"files in it; check its contents and make it private (chmod -R go= {path}), "
            f"{elsewhere}"
        )
    if mode & _OTHERS_ANY:
        # The user's own folder that only they can write to, made before enrichd kept its
        # folders private (under a umask of 022): no one else can have put anything in it.
        os.chmod(path, mode & ~_OTHERS_ANY)
        log.warning("%s %s was readable by other users (mode %04o): closed it", what, path, mode)


def write_private_text(path: Path, text: str, *, atomic: bool = False) -> None:
    """Write ``path`` whole with mode 0600 (an existing file of the user's becomes 0600 too).

    ``atomic``: write a hidden file beside it, flush it to disk and rename it over ``path``,
    so that a crash leaves either the old text or the new one, never a torn file.
    """
    target = path.with_name(f".{path.name}.partial") if atomic else path
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, FILE_MODE)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        os.fchmod(fd, FILE_MODE)
        out.write(text)
        if atomic:
            out.flush()
            os.fsync(fd)
    if atomic:
        os.replace(target, path)


def open_private(path: Path, flags: int = os.O_RDWR) -> int:
    """Open (or create) ``path`` as a file descriptor, mode 0600, never through a link."""
    fd = os.open(path, flags | os.O_CREAT | os.O_NOFOLLOW, FILE_MODE)
    try:
        os.fchmod(fd, FILE_MODE)
    except OSError:
        os.close(fd)
        raise
    return fd
