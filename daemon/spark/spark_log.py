"""Where Spark's own output goes: a log file, rotated, unless the user asks to see it.

enrichd's commands print their own lines and Spark's errors, nothing else: the JVM's log
(log4j's warnings, "Your hostname resolves to a loopback address", ...) and what Spark's
Python workers print ("Streaming TransformWithStateInPandas Python worker ...") go to a file,
:func:`log_path`, which is rotated at :data:`MAX_LOG_BYTES` (:data:`KEPT_LOGS` older ones
are kept beside it). ``--verbose``, ``ENRICHD_VERBOSE=1`` or ``ENRICHD_DEBUG=1`` leave all of
it on the terminal, as Spark prints it. For ``daemon run`` (the commands that print their
results on standard output keep using the file), ``ENRICHD_SPARK_LOG=log`` makes it records of
the daemon's own log, in its format and on its stream (:mod:`daemon.spark.spark_records`: one
JSON line per Spark event with ``--log-format json``, a stack trace included, so that a
container's output is one stream of JSON lines; the image sets it), and
``ENRICHD_SPARK_LOG=stdout`` copies it to standard output as Spark writes it.

How: the JVM starts with a log4j configuration of enrichd's (:data:`LOG4J`): everything from
``WARN`` up to the JVM's stderr, and errors once more, one line each, tagged. The JVM's
stdout and stderr, which also carry its Python workers' output, are a pipe that a thread
copies into the file; it passes each tagged error line on to the ``enrichd.spark`` logger,
so it reaches the terminal in the command's own format.
"""

from __future__ import annotations

import logging
import os
import select
import sys
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any

from daemon.private_paths import open_private, runtime_folder, write_private_text
from daemon.spark.jvm import launch_gateway
from daemon.spark.spark_records import LOG4J_PATTERN, SparkRecords, log_record

log = logging.getLogger("enrichd.spark")

ERROR_TAG = "enrichd-spark-error "
"""What starts a line of Spark's that is an error (see :data:`LOG4J`)."""

LOG4J = f"""\
rootLogger.level = warn
rootLogger.appenderRef.log.ref = log
rootLogger.appenderRef.errors.ref = errors

appender.log.type = Console
appender.log.name = log
appender.log.target = SYSTEM_ERR
appender.log.layout.type = PatternLayout
appender.log.layout.pattern = %d{{yy/MM/dd HH:mm:ss}} %p %c{{1}}: %m%n%ex

appender.errors.type = Console
appender.errors.name = errors
appender.errors.target = SYSTEM_ERR
appender.errors.filter.threshold.type = ThresholdFilter
appender.errors.filter.threshold.level = error
appender.errors.layout.type = PatternLayout
appender.errors.layout.alwaysWriteExceptions = false
appender.errors.layout.pattern = {ERROR_TAG}%c{{1}}: %replace{{%m}}{{[\\r\\n]+}}{{ }}%n
"""
"""log4j2's configuration: ``WARN`` and up with exceptions, then errors alone, one tagged
line each, all to the JVM's stderr (the pipe to the log)."""

LOG4J_RECORDS = f"""\
rootLogger.level = warn
rootLogger.appenderRef.log.ref = log

appender.log.type = Console
appender.log.name = log
appender.log.target = SYSTEM_ERR
appender.log.layout.type = PatternLayout
appender.log.layout.alwaysWriteExceptions = false
appender.log.layout.pattern = {LOG4J_PATTERN}
"""
"""log4j2's configuration for ``ENRICHD_SPARK_LOG=log``: ``WARN`` and up, each event between
the markers :class:`~daemon.spark.spark_records.SparkRecords` reads records by (errors need
no second line: every event reaches the daemon's log)."""

MAX_LOG_BYTES = 16 * 2**20
"""The size at which the log file is rotated: renamed ``NAME.1`` (``.1`` to ``.2``, ...)."""
KEPT_LOGS = 3
"""How many rotated files are kept beside the log."""
STDOUT = "stdout"
"""``ENRICHD_SPARK_LOG``'s value that sends the log to standard output (``daemon run``)."""
OWN_LOG = "log"
"""``ENRICHD_SPARK_LOG``'s value that makes it records of the daemon's own log (``daemon run``)."""
_IDLE_S = 0.2
"""How long the output may be quiet before the lines read are taken as a whole record."""

_stdout_allowed = False


VERBOSE_VARIABLES = ("ENRICHD_VERBOSE", "ENRICHD_DEBUG")
"""Either set (and not 0) shows Spark's own output; ``--verbose`` sets the first."""


def verbose() -> bool:
    """Whether the user asked to see Spark's own output."""
    return any(os.environ.get(name, "") not in ("", "0") for name in VERBOSE_VARIABLES)


def allow_stdout() -> None:
    """Let ``ENRICHD_SPARK_LOG=stdout`` or ``log`` have its way (``daemon run``).

    The command prints nothing on standard output and keeps a log of its own.
    """
    global _stdout_allowed
    _stdout_allowed = True


def destination() -> Path | str:
    """Where Spark's output goes: a file, :data:`STDOUT` or :data:`OWN_LOG`.

    ``$ENRICHD_SPARK_LOG`` if set (``stdout`` and ``log`` only where :func:`allow_stdout` was
    called), else ``spark-PID.log`` in the runtime folder (``enrichd-UID`` in the temporary
    folder, :func:`daemon.private_paths.runtime_folder`).

    Raises:
        SharedFolderError: the runtime folder is another user's or open to others.
    """
    given = os.environ.get("ENRICHD_SPARK_LOG")
    if given in (STDOUT, OWN_LOG):
        if _stdout_allowed:
            return given
    elif given:
        return Path(given)
    return runtime_folder() / f"spark-{os.getpid()}.log"


def log_name() -> str:
    """Where Spark's output goes, in words for the daemon's log."""
    where = destination()
    words = {STDOUT: "standard output", OWN_LOG: "the daemon's own log"}
    return words.get(where, str(where)) if isinstance(where, str) else str(where)


def java_options(where: Path | str) -> str:
    """The JVM option that gives log4j enrichd's configuration (a file in the runtime folder).

    Args:
        where: where Spark's output goes (:func:`destination`).
    """
    config = runtime_folder() / f"spark-{os.getpid()}.log4j2.properties"
    write_private_text(config, LOG4J_RECORDS if where == OWN_LOG else LOG4J)
    return f"-Dlog4j2.configurationFile={config}"


def launch_jvm(settings: Mapping[str, str], where: Path | str) -> Any:
    """Start Spark's JVM (PySpark's gateway) with its stdout and stderr copied to ``where``.

    Args:
        settings: every Spark setting (:func:`daemon.spark.jvm.launch_gateway`).
        where: the log file, :data:`STDOUT` or :data:`OWN_LOG` (:func:`destination`).

    Returns:
        The gateway, for ``SparkContext._ensure_initialized``.
    """
    reader, writer = os.pipe()
    try:
        gateway = launch_gateway(settings, popen_kwargs={"stdout": writer, "stderr": writer})
    finally:
        os.close(writer)  # the JVM holds its own copy: the pipe ends when the JVM does
    if where == OWN_LOG:
        target: Any = _records
        args: tuple[Any, ...] = (reader,)
    else:
        out = sys.stdout.buffer if where == STDOUT else RotatingLog(Path(where))
        target, args = _copy, (os.fdopen(reader, "rb"), out)
    copier = threading.Thread(target=target, args=args, name="enrichd-spark-output", daemon=True)
    copier.start()
    return gateway


class RotatingLog:
    """A log file of mode 0600, rotated when the next line would take it past ``max_bytes``.

    Example:
        >>> import tempfile
        >>> from pathlib import Path
        >>> path = Path(tempfile.mkdtemp()) / "spark.log"
        >>> log = RotatingLog(path, max_bytes=10, kept=1)
        >>> for line in (b"one 123;", b"two 123;", b"three 1;"):
        ...     _ = log.write(line)
        >>> log.flush()
        >>> path.read_bytes(), path.with_name("spark.log.1").read_bytes()
        (b'three 1;', b'two 123;')
    """

    def __init__(self, path: Path, max_bytes: int = MAX_LOG_BYTES, kept: int = KEPT_LOGS):
        self.path = path
        self.max_bytes = max_bytes
        self.kept = kept
        self._out = self._open()

    def _open(self) -> IO[bytes]:
        out = os.fdopen(open_private(self.path, os.O_WRONLY | os.O_APPEND), "ab")
        self._size = out.seek(0, os.SEEK_END)
        return out

    def write(self, line: bytes) -> int:
        """Append ``line``, first rotating the file if it would grow past the cap."""
        if self._size and self._size + len(line) > self.max_bytes:
            self._rotate()
        self._size += len(line)
        return self._out.write(line)

    def _rotate(self) -> None:
        """``NAME.k-1`` becomes ``NAME.k`` (the oldest goes), ..., ``NAME`` becomes ``NAME.1``."""
        self._out.close()
        for number in range(self.kept, 0, -1):
            older = self._numbered(number - 1)
            if older.exists():
                older.replace(self._numbered(number))
        self.path.unlink(missing_ok=True)  # kept == 0: no older files at all
        self._out = self._open()

    def _numbered(self, number: int) -> Path:
        return self.path if number == 0 else self.path.with_name(f"{self.path.name}.{number}")

    def flush(self) -> None:
        """Flush the file."""
        self._out.flush()

    def close(self) -> None:
        """Close the file."""
        self._out.close()


def _records(pipe: int) -> None:
    """Read the JVM's output as records of the daemon's log (``ENRICHD_SPARK_LOG=log``)."""
    records = SparkRecords(log_record)
    pending = b""
    try:
        while True:
            ready, _, _ = select.select([pipe], [], [], _IDLE_S)
            if not ready:
                records.idle()
                continue
            chunk = os.read(pipe, 65536)
            if not chunk:
                break
            *lines, pending = (pending + chunk).split(b"\n")
            for line in lines:
                records.line(line.decode("utf-8", "replace"))
    finally:
        if pending:
            records.line(pending.decode("utf-8", "replace"))
        records.close()
        os.close(pipe)


def _copy(pipe: IO[bytes], out: RotatingLog | IO[bytes]) -> None:
    """Copy the JVM's output to the log; hand its error lines to :data:`log`."""
    with pipe:
        for raw in pipe:
            out.write(raw)
            out.flush()
            if raw.startswith(ERROR_TAG.encode()):
                log.error("%s", raw[len(ERROR_TAG) :].decode("utf-8", "replace").rstrip())
