"""JSON log lines: one object a line, with the pipeline when the record names one."""

from __future__ import annotations

import json
import logging
import sys

from daemon.service.logs import JsonFormatter


def record(message: str, *args: object, **extra: object) -> logging.LogRecord:
    made = logging.LogRecord("enrichd.service", logging.ERROR, __file__, 1, message, args, None)
    made.created = 1_795_000_000.25
    for key, value in extra.items():
        setattr(made, key, value)
    return made


def test_a_line_has_time_level_logger_message_and_pipeline() -> None:
    line = JsonFormatter().format(
        record("pipeline %s failed: %s", "views", "boom", pipeline="views")
    )
    assert "\n" not in line
    assert json.loads(line) == {
        "time": "2026-11-18T11:06:40.250+00:00",
        "level": "ERROR",
        "logger": "enrichd.service",
        "message": "pipeline views failed: boom",
        "pipeline": "views",
    }


def test_a_line_about_no_pipeline_has_no_pipeline_field() -> None:
    assert "pipeline" not in json.loads(JsonFormatter().format(record("stopped")))


def test_a_traceback_stays_inside_the_one_line() -> None:
    try:
        raise ValueError("bad\nvalue")
    except ValueError:
        with_error = record("failed")
        with_error.exc_info = sys.exc_info()
    line = JsonFormatter().format(with_error)
    assert len(line.splitlines()) == 1
    assert json.loads(line)["error"].endswith("ValueError: bad\nvalue")


def test_a_spark_tasks_traceback_goes_in_its_own_field_and_under_a_text_line() -> None:
    from daemon.service.logs import TextFormatter

    task = 'Traceback (most recent call last):\n  File "core.py", line 1\nTypeError: no'
    failed = record("pipeline views failed: TypeError: no", pipeline="views", traceback=task)
    line = JsonFormatter().format(failed)
    assert len(line.splitlines()) == 1
    parsed = json.loads(line)
    assert (parsed["message"], parsed["traceback"]) == (
        "pipeline views failed: TypeError: no",
        task,
    )
    assert TextFormatter().format(failed).endswith(f"pipeline views failed: TypeError: no\n{task}")
    assert "traceback" not in json.loads(JsonFormatter().format(record("x", traceback=None)))
