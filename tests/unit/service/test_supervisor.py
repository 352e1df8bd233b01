"""The supervisor's view of failures: one line naming pipeline and joiner, a micro-batch that
fails the same way again and again reported as stuck, and the report cleared once a
micro-batch goes through. Queries are stand-ins; the real path is tests/service/."""

from __future__ import annotations

import logging
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from daemon.checkpoint.layout import COMMIT_LOG, OFFSET_LOG, log_folder
from daemon.service import supervisor as service
from daemon.service.supervisor import Supervised

TASK_ERROR = (
    "Job aborted: org.apache.spark.api.python.PythonException: [PYTHON_EXCEPTION] An exception "
    "was thrown from the Python worker.\n"
    "Traceback (most recent call last):\n"
    '  File "core.py", line 222, in _store\n'
    "TypeError: cannot pickle 'generator' object\n"
    "\n"
    "\tat org.apache.spark.api.python.BasePythonRunner\n"
)


class FakeQuery:
    """What the supervisor reads of a streaming query."""

    def __init__(self, error: str | None = None, progress: Any = None) -> None:
        self.isActive = error is None
        self.error = error
        self.lastProgress = progress

    def exception(self) -> str | None:
        return self.error


def pipeline(checkpoint: Path, stuck_after: int = 3) -> Supervised:
    config = SimpleNamespace(name="views", joiner="leaky", checkpoint=checkpoint)
    plan: Any = SimpleNamespace(config=config, operator=SimpleNamespace(plugin="leaky-plugin"))
    return Supervised(plan, stuck_after=stuck_after)


def planned(checkpoint: Path, *batches: int, committed: tuple[int, ...] = ()) -> None:
    """A checkpoint whose offset log planned ``batches`` and whose commit log has ``committed``."""
    for log, numbers in ((OFFSET_LOG, batches), (COMMIT_LOG, committed)):
        log_folder(checkpoint, log).mkdir(parents=True, exist_ok=True)
        for number in numbers:
            (log_folder(checkpoint, log) / str(number)).write_text("v1")


def fail_again(pipe: Supervised, monkeypatch: pytest.MonkeyPatch, error: str, now: float) -> float:
    """Restart ``pipe`` into a query that fails with ``error``; notice it; the time after."""
    monkeypatch.setattr(service, "start_query", lambda spark, plan: FakeQuery(error))
    assert pipe.restart_at is not None
    now = pipe.restart_at
    pipe.check(None, now)  # type: ignore[arg-type]  # restarts
    pipe.check(None, now)  # type: ignore[arg-type]  # notices the failure
    return now


def test_a_task_failure_is_one_line_naming_pipeline_joiner_and_exception(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    pipe = pipeline(tmp_path)
    pipe.query = FakeQuery(TASK_ERROR)
    with caplog.at_level(logging.ERROR, logger="enrichd.service"):
        pipe.check(None, now=10.0)  # type: ignore[arg-type]
    (record,) = caplog.records
    assert record.getMessage() == (
        "pipeline views (joiner leaky of plugin leaky-plugin) failed: "
        "TypeError: cannot pickle 'generator' object; restarting in 1 s"
    )
    assert record.traceback.startswith("Traceback (most recent call last):")  # type: ignore[attr-defined]
    assert record.traceback.endswith("TypeError: cannot pickle 'generator' object")  # type: ignore[attr-defined]
    assert pipe.last_failure == "TypeError: cannot pickle 'generator' object"
    assert pipe.stuck is None


def test_the_same_batch_failing_the_same_way_n_times_is_stuck(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    planned(tmp_path, 0, 1, 2, committed=(0, 1))
    pipe = pipeline(tmp_path, stuck_after=3)
    pipe.query = FakeQuery(TASK_ERROR)
    with caplog.at_level(logging.ERROR, logger="enrichd.service"):
        pipe.check(None, now=0.0)  # type: ignore[arg-type]
        now = fail_again(pipe, monkeypatch, TASK_ERROR, 0.0)
        assert pipe.stuck is None  # two failures: still one more passing failure
        now = fail_again(pipe, monkeypatch, TASK_ERROR, now)
        assert pipe.stuck == (
            "stuck: micro-batch 2 failed 3 times in a row with the same error (joiner leaky of "
            "plugin leaky-plugin): TypeError: cannot pickle 'generator' object; retried every 4 s"
        )
        fail_again(pipe, monkeypatch, TASK_ERROR, now)
    assert pipe.stuck is not None and "failed 4 times in a row" in pipe.stuck
    stuck_lines = [r.getMessage() for r in caplog.records if "is stuck" in r.getMessage()]
    assert stuck_lines == [  # said once, not at every failure
        "pipeline views is stuck: micro-batch 2 failed 3 times in a row with the same error; "
        "it is retried, but needs the operator"
    ]


def test_a_different_error_starts_the_count_over(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pipe = pipeline(tmp_path, stuck_after=2)
    pipe.query = FakeQuery(TASK_ERROR)
    pipe.check(None, now=0.0)  # type: ignore[arg-type]
    fail_again(pipe, monkeypatch, "registry down", 0.0)
    assert (pipe.same_failures, pipe.stuck) == (1, None)


def test_a_micro_batch_that_goes_through_clears_stuck(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    pipe = pipeline(tmp_path, stuck_after=2)
    pipe.query = FakeQuery(TASK_ERROR)
    pipe.check(None, now=0.0)  # type: ignore[arg-type]
    now = fail_again(pipe, monkeypatch, TASK_ERROR, 0.0)
    assert pipe.stuck is not None and "its next micro-batch" in pipe.stuck  # none planned
    monkeypatch.setattr(service, "start_query", lambda spark, plan: FakeQuery())
    assert pipe.restart_at is not None
    pipe.check(None, pipe.restart_at)  # type: ignore[arg-type]  # restarted, running
    pipe.query.lastProgress = object()  # a micro-batch completed
    with caplog.at_level(logging.INFO, logger="enrichd.service"):
        pipe.check(None, now + 10)  # type: ignore[arg-type]
    assert (pipe.stuck, pipe.same_failures, pipe.failures_in_row) == (None, 0, 0)
    assert "pipeline views is no longer stuck: a micro-batch completed" in caplog.messages
    # The next failure is a first failure again, not the third of a stuck batch.
    pipe.query = FakeQuery(TASK_ERROR)
    pipe.check(None, now + 20)  # type: ignore[arg-type]
    assert (pipe.same_failures, pipe.stuck) == (1, None)


def test_the_next_pipeline_starts_once_the_last_progressed_failed_or_waited_long_enough(
    tmp_path: Path,
) -> None:
    waiting = pipeline(tmp_path)
    waiting.query = FakeQuery()
    assert not service.settled(waiting, since=10.0, now=10.0 + service.START_WAIT_S - 0.5)
    assert service.settled(waiting, since=10.0, now=10.0 + service.START_WAIT_S)
    progressed = pipeline(tmp_path)
    progressed.query = FakeQuery(progress={"batchId": 0})
    failed = pipeline(tmp_path)
    failed.query = FakeQuery("boom")
    not_started = pipeline(tmp_path)  # its start raised: a restart is scheduled
    for pipe in (progressed, failed, not_started):
        assert service.settled(pipe, since=10.0, now=10.5)
