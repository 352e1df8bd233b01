"""Log output of ``daemon run``: human text by default, one JSON object a line on request.

Secrets never reach a line: both formats pass it through :func:`daemon.secrets.redact`.

JSON lines are for log shippers (journald's JSON export, Loki, Elasticsearch): every line has
``time`` (UTC, ISO 8601), ``level``, ``logger`` and ``message``, plus ``pipeline`` when the
line is about one pipeline (the service passes it with ``extra={"pipeline": name}``),
``error`` with the traceback when one was logged (or a stack trace passed as
``extra={"error": text}``, as Spark's own records are: :mod:`daemon.spark.spark_records`), and
``traceback`` with the Python traceback of a failed Spark task (passed as
``extra={"traceback": text}``), so that the message stays one line. Text lines show both under
the line, as Python shows a logged exception's.

Example::

    configure_logging("json")
    logging.getLogger("enrichd.service").info("started", extra={"pipeline": "tweet-views"})
    # {"time": "2026-11-22T01:30:00.000+00:00", "level": "INFO", "logger": "enrichd.service",
    #  "message": "started", "pipeline": "tweet-views"}
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from typing import Literal

from daemon.secrets import redact

LogFormat = Literal["text", "json"]
"""``text``: ``time level logger: message`` for people; ``json``: one object a line."""

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class JsonFormatter(logging.Formatter):
    """Formats a record as one line of JSON (see the module docstring for the fields)."""

    def format(self, record: logging.LogRecord) -> str:
        """The record as a JSON object on one line."""
        line: dict[str, object] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": redact(record.getMessage()),
        }
        pipeline = getattr(record, "pipeline", None)
        if pipeline is not None:
            line["pipeline"] = pipeline
        if record.exc_info:
            line["error"] = redact(self.formatException(record.exc_info))
        elif error := getattr(record, "error", None):
            line["error"] = redact(str(error))
        task = getattr(record, "traceback", None)
        if task:
            line["traceback"] = redact(str(task))
        return json.dumps(line, ensure_ascii=False, default=str)


class TextFormatter(logging.Formatter):
    """``time level logger: message``, with secrets masked (:func:`daemon.secrets.redact`)."""

    def __init__(self) -> None:
        super().__init__(TEXT_FORMAT)

    def format(self, record: logging.LogRecord) -> str:
        """The record as text, a traceback included (a Spark task's too), secrets masked."""
        text = super().format(record)
        for more in (getattr(record, "error", None), getattr(record, "traceback", None)):
            if more:
                text = f"{text}\n{more}"
        return redact(text)


def configure_logging(log_format: LogFormat = "text", level: int = logging.INFO) -> None:
    """Send the process's log records to stderr in ``log_format``, replacing earlier handlers."""
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter() if log_format == "json" else TextFormatter())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
    # Python's warnings, which would be printed as text beside the log, become its records.
    logging.captureWarnings(True)
    # py4j logs every connection of Spark's callback server at INFO, and the registry
    # client's HTTP library every request: noise to an operator.
    for noisy in ("py4j", "httpx", "httpx2", "httpcore"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def json_lines_configured() -> bool:
    """Whether :func:`configure_logging` set the process up for JSON lines.

    The command line's one-line errors then go out as JSON lines too, so that a log shipper
    reading a container's output sees why it stopped.
    """
    return any(isinstance(h.formatter, JsonFormatter) for h in logging.getLogger().handlers)
