"""How `daemon verify` waits on its child: progress after a restart, a stop, a deadline."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from daemon.errors import EnrichdError
from daemon.signals import StopRequest
from daemon.verify.child import ChildRun
from daemon.verify.kills import Interrupted, await_progress, planned_since


def test_a_restart_is_back_once_any_pipeline_plans_past_its_own_last_batch() -> None:
    at_kill = [12, 7, -1]  # the third had planned nothing yet
    assert not planned_since(at_kill, [12, 7, -1])  # replaying the cut batches: not yet
    assert planned_since(at_kill, [12, 8, -1])  # the second is past its own last batch
    assert planned_since(at_kill, [12, 7, 0])
    # The highest number across pipelines is not the measure: the first may have nothing
    # left to plan while the others go on.
    assert planned_since([12, 3], [12, 4])


def test_a_stop_ends_the_wait_for_the_child_at_once(tmp_path: Path) -> None:
    stop = StopRequest()
    stop.event.set()  # what SIGTERM or SIGINT does, through the handler
    child = ChildRun(tmp_path / "verify.toml", tmp_path)  # never started: no process to end
    deadline = time.monotonic() + 3600
    with pytest.raises(Interrupted, match="^kill -9 #1$"):
        await_progress(child, deadline, "kill -9 #1", lambda: False, prefix="p", stop=stop)


AFTER_RESTART = "a micro-batch after the restart"


def test_a_deadline_passed_is_one_line_naming_the_wait_and_the_childs_last_words(
    tmp_path: Path,
) -> None:
    child = ChildRun(tmp_path / "verify.toml", tmp_path)
    child.starts = 3  # restarted after its second kill, and silent so far
    stop = StopRequest()
    with pytest.raises(EnrichdError) as silent:
        await_progress(child, 0.0, AFTER_RESTART, lambda: False, prefix="p", stop=stop)
    assert str(silent.value) == (
        "timed out (--timeout) waiting for a micro-batch after the restart; "
        "daemon run (start 3) logged last: nothing yet"
    )
    lines = [
        {"message": "pipeline p.comap failed: Python worker failed to connect back.; restarting"},
        {"message": "ready: 1 of 1 pipelines running"},
    ]
    (tmp_path / "run-3.log").write_text("".join(json.dumps(line) + "\n" for line in lines))
    with pytest.raises(EnrichdError, match="logged last: pipeline p.comap failed: Python worker"):
        await_progress(child, 0.0, AFTER_RESTART, lambda: False, prefix="p", stop=stop)
    (tmp_path / "run-3.log").write_text(json.dumps(lines[1]) + "\n")
    with pytest.raises(EnrichdError, match="logged last: ready: 1 of 1 pipelines running$"):
        await_progress(child, 0.0, AFTER_RESTART, lambda: False, prefix="p", stop=stop)
