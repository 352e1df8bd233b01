"""A pipeline whose input lost the offsets it needs stops for good, saying why, and is not
restarted: a restart would fail the same way for ever."""

from __future__ import annotations

import logging
from types import SimpleNamespace
from typing import Any

import pytest

from daemon.errors import CheckpointDivergedError
from daemon.model.reports import MissingOffset
from daemon.service import supervisor
from daemon.service.supervisor import Supervised
from daemon.source.missing_offsets import failure

REMOVED = MissingOffset("clicks", 2, needed=40, earliest=100, end=150)
MESSAGE = str(failure("views", REMOVED))


class FailedQuery:
    """A streaming query that failed with a missing offset, as Spark words it."""

    isActive = False
    lastProgress = None

    def exception(self) -> str:
        return (
            "[PYTHON_EXCEPTION] Traceback (most recent call last):\n"
            f"daemon.errors.MissingOffsetsError: {MESSAGE}\n\tat org.apache.spark..."
        )


def test_a_pipeline_that_lost_its_offsets_stops_and_is_not_restarted(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    started: list[object] = []
    monkeypatch.setattr(supervisor, "start_query", lambda spark, plan: started.append(plan))
    plan: Any = SimpleNamespace(config=SimpleNamespace(name="views"))
    pipe = Supervised(plan, query=FailedQuery())
    with caplog.at_level(logging.ERROR, logger="enrichd.service"):
        for now in (100.0, 200.0, 400.0):
            pipe.check(None, now=now)  # type: ignore[arg-type]
    assert (pipe.stopped, pipe.restart_at, started) == (True, None, [])
    assert pipe.last_failure == MESSAGE
    assert [r.getMessage() for r in caplog.records] == [f"pipeline views stopped: {MESSAGE}"]


def test_a_checkpoint_behind_its_output_stops_the_pipeline_at_start(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The start's marker check refuses a rewound checkpoint: stopped with its one line, once,
    never restarted (a restart would refuse it again)."""
    line = "pipeline 'views': checkpoint /c ends at micro-batch 0, but task 1's marker says 1"
    calls: list[object] = []

    def refused(spark: Any, plan: Any) -> None:
        calls.append(plan)
        raise CheckpointDivergedError(line)

    monkeypatch.setattr(supervisor, "start_query", refused)
    plan: Any = SimpleNamespace(config=SimpleNamespace(name="views", joiner="comap"))
    pipe = Supervised(plan)
    with caplog.at_level(logging.ERROR, logger="enrichd.service"):
        pipe.start(None, "started", now=100.0)  # type: ignore[arg-type]
        for now in (200.0, 400.0):
            pipe.check(None, now=now)  # type: ignore[arg-type]
    assert (pipe.stopped, pipe.restart_at, len(calls)) == (True, None, 1)
    assert [r.getMessage() for r in caplog.records] == [f"pipeline views stopped: {line}"]
