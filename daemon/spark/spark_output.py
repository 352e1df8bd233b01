"""Where Spark's own output goes: a log file, unless the user asks to see it.

enrichd's commands print their own lines and Spark's errors, nothing else: the JVM's log
(log4j's warnings, "Your hostname resolves to a loopback address", ...) and what Spark's
Python workers print ("Streaming TransformWithStateInPandas Python worker ...") go to a file,
:func:`log_path`. ``--verbose``, ``ENRICHD_VERBOSE=1`` or ``ENRICHD_DEBUG=1`` leave all of it
on the terminal, as Spark prints it.

How: the JVM starts with a log4j configuration of enrichd's (:data:`LOG4J`): everything from
``WARN`` up into the file, and errors also to the JVM's stderr, one line each, tagged. The
JVM's stdout and stderr, which also carry its Python workers' output, are a pipe that a
thread copies into the file; it passes each tagged error line on to the ``enrichd.spark``
logger, so it reaches the terminal in the command's own format.
"""

from __future__ import annotations

import logging
import os
import tempfile
import threading
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark import SparkConf

log = logging.getLogger("enrichd.spark")

ERROR_TAG = "enrichd-spark-error "
"""What starts a line of Spark's that is an error (see :data:`LOG4J`)."""

LOG4J = f"""\
rootLogger.level = warn
rootLogger.appenderRef.file.ref = file
rootLogger.appenderRef.console.ref = console

appender.file.type = File
appender.file.name = file
appender.file.fileName = ${{sys:enrichd.spark.log}}
appender.file.append = true
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = %d{{yy/MM/dd HH:mm:ss}} %p %c{{1}}: %m%n%ex

appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.filter.threshold.type = ThresholdFilter
appender.console.filter.threshold.level = error
appender.console.layout.type = PatternLayout
appender.console.layout.alwaysWriteExceptions = false
appender.console.layout.pattern = {ERROR_TAG}%c{{1}}: %replace{{%m}}{{[\\r\\n]+}}{{ }}%n
"""
"""log4j2's configuration: the file gets ``WARN`` and up with exceptions; stderr gets
errors alone, one tagged line each."""


VERBOSE_VARIABLES = ("ENRICHD_VERBOSE", "ENRICHD_DEBUG")
"""Either set (and not 0) shows Spark's own output; ``--verbose`` sets the first."""


def verbose() -> bool:
    """Whether the user asked to see Spark's own output."""
    return any(os.environ.get(name, "") not in ("", "0") for name in VERBOSE_VARIABLES)


def log_path() -> Path:
    """The file Spark's output goes to: ``$ENRICHD_SPARK_LOG``, or one per process.

    The default is ``enrichd-UID/spark-PID.log`` in the temporary folder.
    """
    given = os.environ.get("ENRICHD_SPARK_LOG")
    if given:
        return Path(given)
    return Path(tempfile.gettempdir()) / f"enrichd-{os.getuid()}" / f"spark-{os.getpid()}.log"


def java_options(path: Path) -> str:
    """The JVM options that send log4j's output to ``path`` (its configuration beside it)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    config = path.with_suffix(".log4j2.properties")
    config.write_text(LOG4J, encoding="utf-8")
    return f"-Dlog4j2.configurationFile={config} -Denrichd.spark.log={path}"


def launch_jvm(conf: SparkConf, path: Path) -> Any:
    """Start Spark's JVM (PySpark's gateway) with its stdout and stderr copied into ``path``.

    Returns:
        The gateway, for ``SparkContext._ensure_initialized``.
    """
    # Late: Spark loads when a session starts, not in commands that start none.
    from pyspark.java_gateway import launch_gateway

    reader, writer = os.pipe()
    try:
        gateway = launch_gateway(conf, popen_kwargs={"stdout": writer, "stderr": writer})
    finally:
        os.close(writer)  # the JVM holds its own copy: the pipe ends when the JVM does
    copier = threading.Thread(
        target=_copy,
        args=(os.fdopen(reader, "rb"), path),
        name="enrichd-spark-output",
        daemon=True,
    )
    copier.start()
    return gateway


def _copy(pipe: IO[bytes], path: Path) -> None:
    """Copy the JVM's output into the log file; hand its error lines to :data:`log`."""
    with pipe, path.open("ab") as out:
        for raw in pipe:
            out.write(raw)
            out.flush()
            if raw.startswith(ERROR_TAG.encode()):
                log.error("%s", raw[len(ERROR_TAG) :].decode("utf-8", "replace").rstrip())
