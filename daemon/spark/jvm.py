"""Starting Spark's JVM with its settings in a private file, never on its command line.

PySpark starts the JVM as ``spark-submit --conf KEY=VALUE ...``, so every setting of
``[spark.conf]`` (an S3 secret key, ``spark.authenticate.secret``) would show in ``ps`` to
every user of the host for the JVM's whole life. enrichd starts it with
``--properties-file`` instead: the settings go into a file of the runtime folder
(:func:`daemon.private_paths.runtime_folder`, 0700) with mode 0600, which Spark's launcher
and ``SparkSubmit`` read as the JVM starts, and which is removed as soon as the JVM answers.
The session then gets the same settings again through PySpark's gateway
(:mod:`daemon.spark.session`), which is not a command line either. Only the JVM's own options
(``spark.driver.extraJavaOptions``, memory) reach its command line, as they must.

The JVM starts under umask 077, which its Python workers inherit: the files Spark writes
on this host (the checkpoint, RocksDB's working copies, shuffle files) are the user's alone.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import tempfile
from collections.abc import Iterator, Mapping
from typing import Any

from daemon.private_paths import UMASK, runtime_folder

SUBMIT_ARGS = "PYSPARK_SUBMIT_ARGS"
"""What PySpark adds to ``spark-submit``'s command line (``pyspark-shell`` unless set)."""

_ESCAPES = {"\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\f": "\\f"}


def properties_text(settings: Mapping[str, str]) -> str:
    r"""``settings`` in the format of Java's ``Properties`` files, one ``key=value`` a line.

    Example:
        >>> print(properties_text({"spark.app.name": "enrichd", "a b": "x=1\ny"}), end="")
        spark.app.name=enrichd
        a\ b=x=1\ny
    """
    lines = []
    for key, value in settings.items():
        name = "".join(_ESCAPES.get(c, f"\\{c}" if c in " =:#!" else c) for c in key)
        text = "".join(_ESCAPES.get(c, c) for c in value)
        if text.startswith(" "):  # Properties drops a value's leading blanks
            text = "\\" + text
        lines.append(f"{name}={text}\n")
    return "".join(lines)


@contextlib.contextmanager
def _settings_file(settings: Mapping[str, str]) -> Iterator[str]:
    """A 0600 properties file in the runtime folder holding ``settings``, removed on exit."""
    fd, path = tempfile.mkstemp(prefix="spark-", suffix=".properties", dir=runtime_folder())
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:  # mkstemp made it 0600
            out.write(properties_text(settings))
        yield path
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)


@contextlib.contextmanager
def _submitted_with(path: str) -> Iterator[None]:
    """``$PYSPARK_SUBMIT_ARGS`` naming the properties file, for PySpark's launcher."""
    before = os.environ.get(SUBMIT_ARGS)
    os.environ[SUBMIT_ARGS] = f"--properties-file {shlex.quote(path)} {before or 'pyspark-shell'}"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(SUBMIT_ARGS, None)
        else:
            os.environ[SUBMIT_ARGS] = before


@contextlib.contextmanager
def private_umask() -> Iterator[None]:
    """The process umask 077 for what starts meanwhile (it inherits it), then as before."""
    before = os.umask(UMASK)
    try:
        yield
    finally:
        os.umask(before)


def launch_gateway(settings: Mapping[str, str], popen_kwargs: dict[str, Any] | None = None) -> Any:
    """Start Spark's JVM (PySpark's gateway) with ``settings``, none on its command line.

    Args:
        settings: every Spark setting, ``spark.master`` and ``spark.app.name`` included.
        popen_kwargs: passed on to ``subprocess.Popen`` (where the JVM's output goes).

    Returns:
        The gateway, for ``SparkContext._ensure_initialized``.
    """
    # Late: Spark loads when a session starts, not in commands that start none.
    from pyspark.java_gateway import launch_gateway as pyspark_launch

    with _settings_file(settings) as path, _submitted_with(path), private_umask():
        # No conf: PySpark would put each setting on the command line as --conf.
        return pyspark_launch(None, popen_kwargs=popen_kwargs)
