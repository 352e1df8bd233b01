r"""Spark's output as log records of the daemon's own: ``ENRICHD_SPARK_LOG=log``.

In a container every line of the process's output is one log event to the collector that
reads it. Spark's JVM writes its log as text, a stack trace being many lines, and its Python
workers print what they print; ``daemon run`` writes JSON lines. With ``ENRICHD_SPARK_LOG=log``
(the container image's setting) Spark's output becomes records of the daemon's own log, in its
format and on its stream: one JSON line per Spark log event, its stack trace in ``error``.

How the lines are put back together: log4j writes each event between markers that no log
line contains, the ASCII record separators (:data:`LOG4J_PATTERN`): a record starts with
:data:`RECORD_START`, its exception (if any) with :data:`ERROR_START`, and it ends with a line
of :data:`RECORD_END` alone, so an event's lines stay together however many there are and
whatever else is written between two events. Lines outside any event (a Python worker's
own output, the JVM's warnings before log4j starts) are records of their own, logger
``spark.output``: an indented line belongs with the line before it, and a Python traceback
(``Traceback (most recent call last):`` to the exception's line) is one record. A line of
librdkafka's own log (the Kafka clients of Spark's tasks: ``%3|1767225600.123|FAIL|
rdkafka#consumer-1| ...``) is a record of logger ``librdkafka`` at the level its syslog
severity says, with its time.

Example::

    reader = SparkRecords(print)
    reader.line("\x1e1767225600000 WARN org.apache.spark.executor.Executor lost a task")
    reader.line("\x1djava.lang.IllegalStateException: boom")
    reader.line("\tat org.apache.spark.Task.run(Task.scala:1)")
    reader.line("\x1f")
    # SparkRecord(time_ms=1767225600000, level=30, logger='org.apache.spark.executor.Executor',
    #             message='lost a task', error='java.lang.IllegalStateException: boom\n\tat ...')
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from dataclasses import dataclass

RECORD_START = "\x1e"
ERROR_START = "\x1d"
RECORD_END = "\x1f"

LOG4J_PATTERN = (
    f"{RECORD_START}%d{{UNIX_MILLIS}} %p %c %m%n%notEmpty{{{ERROR_START}%ex}}{RECORD_END}%n"
)
"""log4j2's layout for records: the time in epoch milliseconds, the level, the logger, the
message, the exception, between the markers."""

OUTPUT_LOGGER = "spark.output"
"""The logger named by lines that are not log4j's."""

LEVELS = {
    "TRACE": logging.DEBUG,
    "DEBUG": logging.DEBUG,
    "INFO": logging.INFO,
    "WARN": logging.WARNING,
    "ERROR": logging.ERROR,
    "FATAL": logging.CRITICAL,
}

_TRACEBACK = "Traceback (most recent call last):"
KAFKA_LOGGER = "librdkafka"
_KAFKA_LINE = re.compile(r"%(\d)\|(\d+)\.(\d{3})\|([^|]*)\|([^|]*)\| (.*)")
"""librdkafka's default log line: syslog severity, epoch seconds, facility, client, message."""
_SEVERITIES = [logging.CRITICAL] * 3 + [logging.ERROR, logging.WARNING] + [logging.INFO] * 2


@dataclass(frozen=True)
class SparkRecord:
    """One event of Spark's output."""

    time_ms: int | None
    """When log4j logged it (epoch ms); None for output lines, which carry no time."""
    level: int
    logger: str
    message: str
    error: str | None = None
    """The exception's stack trace, as log4j wrote it (or a Python traceback)."""


class SparkRecords:
    """Turns Spark's output, line by line, into :class:`SparkRecord` s handed to ``emit``.

    Call :meth:`line` with each line (without its line break), :meth:`idle` when no line
    has come for a moment (an output line may be the last of its record), :meth:`close`
    at the end of the output.
    """

    def __init__(self, emit: Callable[[SparkRecord], None]) -> None:
        self._emit = emit
        self._event: list[str] | None = None
        """The lines of the log4j event being read, its first one the header."""
        self._output: list[str] = []
        """Output lines outside events, not yet emitted."""
        self._traceback = False

    def line(self, text: str) -> None:
        """Take one line of the output."""
        text = text.rstrip("\r")
        if self._event is not None:
            if text == RECORD_END:
                self._finish_event()
                return
            if not text.startswith(RECORD_START):
                self._event.append(text)
                return
            self._finish_event()  # an event cut short (the JVM died mid-write)
        if text.startswith(RECORD_START):
            self._flush_output()
            self._event = [text[len(RECORD_START) :]]
        elif self._traceback:
            self._output.append(text)
            if text and not text[0].isspace():  # the exception's line ends a traceback
                self._flush_output()
        elif text.startswith(_TRACEBACK):
            self._flush_output()
            self._output, self._traceback = [text], True
        elif found := _KAFKA_LINE.fullmatch(text):
            self._flush_output()
            self._emit(kafka_record(found))
        elif self._output and (not text or text[0].isspace()):
            self._output.append(text)
        elif text.strip():
            self._flush_output()
            self._output = [text]

    def idle(self) -> None:
        """No line came for a while: the output lines read so far are a record."""
        self._flush_output()

    def close(self) -> None:
        """The output ended: emit whatever is left."""
        if self._event is not None:
            self._finish_event()
        self._flush_output()

    def _finish_event(self) -> None:
        lines, self._event = self._event or [""], None
        header, *rest = lines
        parts = header.split(" ", 3)
        if len(parts) < 3 or not parts[0].isdigit() or parts[1] not in LEVELS:
            self._emit(SparkRecord(None, logging.WARNING, OUTPUT_LOGGER, "\n".join(lines)))
            return
        millis, level, logger = parts[:3]
        message = [parts[3] if len(parts) == 4 else ""]
        error: list[str] = []
        for text in rest:
            if not error and text.startswith(ERROR_START):
                error.append(text[len(ERROR_START) :])
            elif error:
                error.append(text)
            else:
                message.append(text)
        self._emit(
            SparkRecord(
                int(millis),
                LEVELS[level],
                logger,
                "\n".join(message).rstrip("\n"),
                "\n".join(error).rstrip("\n") or None,
            )
        )

    def _flush_output(self) -> None:
        lines, traceback = self._output, self._traceback
        self._output, self._traceback = [], False
        while lines and not lines[-1].strip():
            lines.pop()
        if not lines:
            return
        if traceback:
            last = lines[-1] if not lines[-1][0].isspace() else "an unfinished traceback"
            record = SparkRecord(None, logging.ERROR, OUTPUT_LOGGER, last, "\n".join(lines))
        else:
            record = SparkRecord(None, logging.INFO, OUTPUT_LOGGER, "\n".join(lines))
        self._emit(record)


def kafka_record(line: re.Match[str]) -> SparkRecord:
    """A record of one of librdkafka's log lines, as :data:`_KAFKA_LINE` matched it."""
    severity, seconds, millis, facility, client, message = line.groups()
    level = _SEVERITIES[int(severity)] if int(severity) < len(_SEVERITIES) else logging.DEBUG
    return SparkRecord(
        int(seconds) * 1000 + int(millis), level, KAFKA_LOGGER, f"{client} {facility}: {message}"
    )


def log_record(record: SparkRecord) -> None:
    """Hand a Spark record to the process's logging, under the record's own logger name.

    Only if that logger takes the record's level: the daemon's log starts at INFO.
    """
    logger = logging.getLogger(record.logger)
    if not logger.isEnabledFor(record.level):
        return
    entry = logging.LogRecord(record.logger, record.level, "", 0, record.message, None, None)
    if record.time_ms is not None:
        entry.created = record.time_ms / 1000
        entry.msecs = float(record.time_ms % 1000)
    if record.error:
        entry.error = record.error
    logger.handle(entry)
