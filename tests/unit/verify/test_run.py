"""How `daemon verify` waits on its child: progress after a restart, and where a stop ends it."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from daemon.errors import EnrichdError
from daemon.signals import StopRequest
from daemon.verify.child import ChildRun
from daemon.verify.facts import BrokerFacts
from daemon.verify.run import (
    Interrupted,
    VerifyOptions,
    VerifyReport,
    _await,
    _interrupted_line,
    _planned_since,
)


def test_a_restart_is_back_once_any_pipeline_plans_past_its_own_last_batch() -> None:
    at_kill = [12, 7, -1]  # the third had planned nothing yet
    assert not _planned_since(at_kill, [12, 7, -1])  # replaying the cut batches: not yet
    assert _planned_since(at_kill, [12, 8, -1])  # the second is past its own last batch
    assert _planned_since(at_kill, [12, 7, 0])
    # The highest number across pipelines is not the measure: the first may have nothing
    # left to plan while the others go on.
    assert _planned_since([12, 3], [12, 4])


def test_a_stop_ends_the_wait_for_the_child_at_once(tmp_path: Path) -> None:
    stop = StopRequest()
    stop.event.set()  # what SIGTERM or SIGINT does, through the handler
    child = ChildRun(tmp_path / "verify.toml", tmp_path)  # never started: no process to end
    deadline = time.monotonic() + 3600
    with pytest.raises(Interrupted, match="^kill -9 #1$"):
        _await(child, deadline, "kill -9 #1", lambda: False, prefix="p", stop=stop)


def report(kept: str | None = None, notes: list[str] | None = None) -> VerifyReport:
    return VerifyReport(
        "r1",
        "enrichd-verify",
        BrokerFacts("127.0.0.1:9092"),
        VerifyOptions(),
        kept=kept,
        notes=notes or [],
    )


def test_the_line_says_where_it_stopped_and_what_became_of_the_topics() -> None:
    stopped = Interrupted("every input record committed")
    assert _interrupted_line(stopped, report(), 12) == (
        "daemon verify was stopped (SIGTERM or SIGINT) before every input record committed: "
        "no child daemon run left running, its 12 topic(s) under enrichd-verify.r1 deleted; "
        "nothing was checked"
    )
    kept = _interrupted_line(stopped, report(kept="/srv/verify-files"), 12)
    assert "its topics under enrichd-verify.r1 and files in /srv/verify-files kept" in kept
    refused = _interrupted_line(stopped, report(notes=["could not delete topic t: no"]), 1)
    assert "could not delete topic t: no; nothing was checked" in refused


def test_a_deadline_passed_is_one_line_naming_the_wait_and_the_childs_last_words(
    tmp_path: Path,
) -> None:
    child = ChildRun(tmp_path / "verify.toml", tmp_path)
    child.starts = 3  # restarted after its second kill, and silent so far
    stop = StopRequest()
    with pytest.raises(EnrichdError) as silent:
        _await(child, 0.0, "a micro-batch after the restart", lambda: False, prefix="p", stop=stop)
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
        _await(child, 0.0, "a micro-batch after the restart", lambda: False, prefix="p", stop=stop)
    (tmp_path / "run-3.log").write_text(json.dumps(lines[1]) + "\n")
    with pytest.raises(EnrichdError, match="logged last: ready: 1 of 1 pipelines running$"):
        _await(child, 0.0, "a micro-batch after the restart", lambda: False, prefix="p", stop=stop)
