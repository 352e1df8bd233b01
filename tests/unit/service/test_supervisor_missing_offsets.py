"""A pipeline whose input lost the offsets it needs stops for good, saying why, and is not
restarted: a restart would fail the same way for ever."""

from __future__ import annotations

import logging
from types import SimpleNamespace
from typing import Any

import pytest

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
