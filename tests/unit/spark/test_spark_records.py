"""Spark's output read back into records: log4j's marked events, and the lines between them."""

from __future__ import annotations

import json
import logging

import pytest

from daemon.service.logs import JsonFormatter, TextFormatter
from daemon.spark.spark_records import (
    ERROR_START,
    KAFKA_LOGGER,
    LOG4J_PATTERN,
    OUTPUT_LOGGER,
    RECORD_END,
    RECORD_START,
    SparkRecord,
    SparkRecords,
    log_record,
)


def read(*lines: str, idle_after: int | None = None) -> list[SparkRecord]:
    found: list[SparkRecord] = []
    records = SparkRecords(found.append)
    for n, line in enumerate(lines):
        records.line(line)
        if idle_after == n:
            records.idle()
    records.close()
    return found


def event(level: str, logger: str, *lines: str, error: tuple[str, ...] = ()) -> list[str]:
    """The lines log4j writes for one event with :data:`LOG4J_PATTERN`."""
    head, *more = lines
    trace = [ERROR_START + error[0], *error[1:]] if error else []
    return [f"{RECORD_START}1767225600123 {level} {logger} {head}", *more, *trace, RECORD_END]


def test_the_pattern_marks_start_exception_and_end() -> None:
    assert LOG4J_PATTERN.startswith(RECORD_START + "%d{UNIX_MILLIS} %p %c %m%n")
    assert "%notEmpty{" + ERROR_START + "%ex}" in LOG4J_PATTERN
    assert LOG4J_PATTERN.endswith(RECORD_END + "%n")


def test_an_event_with_a_stack_trace_is_one_record() -> None:
    trace = (
        "org.apache.spark.api.python.PythonException: Traceback (most recent call last):",
        '  File "worker.py", line 1, in process',
        "TypeError: cannot pickle 'generator' object",
        "",
        "\tat org.apache.spark.api.python.BasePythonRunner.read(PythonRunner.scala:572)",
        "Caused by: java.lang.IllegalStateException: boom",
        "\t... 12 more",
    )
    lines = event(
        "ERROR", "org.apache.spark.executor.Executor", "Exception in task 0.0", error=trace
    )
    (record,) = read(*lines)
    assert record == SparkRecord(
        1767225600123,
        logging.ERROR,
        "org.apache.spark.executor.Executor",
        "Exception in task 0.0",
        "\n".join(trace),
    )


def test_a_message_of_several_lines_without_an_exception() -> None:
    lines = event("WARN", "org.apache.spark.sql.X", "first line", "second line")
    (record,) = read(*lines)
    assert (record.level, record.message, record.error) == (
        logging.WARNING,
        "first line\nsecond line",
        None,
    )


def test_output_between_events_is_records_of_its_own() -> None:
    """A worker's print between two events is neither event's; indented lines go with the
    line before them; a Python traceback is one record, ending at the exception's line."""
    first = event("WARN", "a.B", "one")
    second = event("WARN", "a.C", "two")
    records = read(
        *first,
        "Streaming Python worker started",
        "    with an indented detail",
        "Traceback (most recent call last):",
        '  File "x.py", line 3, in <module>',
        "ValueError: bad",
        *second,
    )
    assert [(r.logger, r.level, r.message) for r in records] == [
        ("a.B", logging.WARNING, "one"),
        (
            OUTPUT_LOGGER,
            logging.INFO,
            "Streaming Python worker started\n    with an indented detail",
        ),
        (OUTPUT_LOGGER, logging.ERROR, "ValueError: bad"),
        ("a.C", logging.WARNING, "two"),
    ]
    assert records[2].error is not None and records[2].error.startswith("Traceback")
    assert all(r.time_ms is None for r in records[1:3])


def test_librdkafkas_lines_are_records_at_their_own_level_and_time() -> None:
    """What the Kafka clients of Spark's tasks log (every failed connection, while a broker
    is away): one record each, at the level of its syslog severity."""
    records = read(
        "%3|1767225600.123|FAIL|rdkafka#consumer-1| [thrd:b:9092/1]: b:9092/1: Connect to "
        "ipv4#127.0.0.1:9092 failed: Connection refused (after 1ms in state CONNECT)",
        "%6|1767225601.000|FAIL|rdkafka#producer-2| [thrd:b:9092/1]: Disconnected",
        "%7|1767225601.500|INIT|rdkafka#producer-2| debug line",
    )
    assert [(r.logger, r.level, r.time_ms) for r in records] == [
        (KAFKA_LOGGER, logging.ERROR, 1767225600123),
        (KAFKA_LOGGER, logging.INFO, 1767225601000),
        (KAFKA_LOGGER, logging.DEBUG, 1767225601500),
    ]
    assert records[0].message.startswith("rdkafka#consumer-1 FAIL: [thrd:b:9092/1]: b:9092/1: Co")


def test_a_quiet_moment_ends_an_output_record() -> None:
    records = read("a line", "    its detail", "another line", idle_after=1)
    assert [r.message for r in records] == ["a line\n    its detail", "another line"]


def test_an_event_cut_short_is_still_emitted() -> None:
    records = read(f"{RECORD_START}1 ERROR a.B dying", f"{RECORD_START}2 WARN a.C next")
    assert [(r.logger, r.message) for r in records] == [("a.B", "dying"), ("a.C", "next")]


@pytest.mark.parametrize("formatter", [JsonFormatter(), TextFormatter()])
def test_a_record_reaches_the_log_with_its_time_logger_and_trace(
    formatter: logging.Formatter,
) -> None:
    handled: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            handled.append(record)

    keep = Keep()
    logging.getLogger().addHandler(keep)
    try:
        log_record(
            SparkRecord(1767225600123, logging.ERROR, "org.apache.spark.X", "lost", "trace\n\tat y")
        )
    finally:
        logging.getLogger().removeHandler(keep)
    (entry,) = handled
    text = formatter.format(entry)
    if isinstance(formatter, JsonFormatter):
        line = json.loads(text)
        assert line["time"] == "2026-01-01T00:00:00.123+00:00"
        assert (line["level"], line["logger"], line["message"]) == (
            "ERROR",
            "org.apache.spark.X",
            "lost",
        )
        assert line["error"] == "trace\n\tat y"
        assert "\n" not in text  # one line
    else:
        assert text.endswith("ERROR org.apache.spark.X: lost\ntrace\n\tat y")
