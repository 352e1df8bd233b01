"""Where a pipeline's checkpoint stands: planned and committed micro-batches; stopping a run."""

from __future__ import annotations

import json
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import pytest

from daemon.checkpoint.layout import COMMIT_LOG, OFFSET_LOG, log_folder
from daemon.verify.child import batch_offsets, committed, planned, reached, records_within


def write_batch(checkpoint: Path, batch: int, offsets: dict[str, object], done: bool) -> None:
    planned, committed = log_folder(checkpoint, OFFSET_LOG), log_folder(checkpoint, COMMIT_LOG)
    planned.mkdir(parents=True, exist_ok=True)
    committed.mkdir(parents=True, exist_ok=True)
    text = "v1\n" + json.dumps({"batchWatermarkMs": 0}) + "\n" + json.dumps(offsets)
    (planned / str(batch)).write_text(text)
    (planned / f".{batch}.crc").write_text("x")  # Spark's checksums are skipped
    if done:
        (committed / str(batch)).write_text('v1\n{"nextBatchWatermarkMs":0}')


def test_planned_and_committed_batches_of_a_checkpoint(tmp_path: Path) -> None:
    assert planned(tmp_path) == (-1, {}) and committed(tmp_path) == {}
    write_batch(tmp_path, 0, {"t/0": 5, "t/1": 3, "clock": 17}, done=True)
    write_batch(tmp_path, 1, {"t/0": 9, "t/1": 3, "clock": 18}, done=False)
    assert planned(tmp_path) == (1, {"t/0": 9, "t/1": 3})  # the clock is no partition
    assert committed(tmp_path) == {"t/0": 5, "t/1": 3}
    assert batch_offsets(tmp_path, 7) == {}


def test_reaching_the_ends_and_counting_records_within_them() -> None:
    ends = {"t/0": 10, "t/1": 4}
    assert not reached({"t/0": 10}, ends)
    assert reached({"t/0": 10, "t/1": 5}, ends)
    assert records_within({"t/0": 6, "t/1": 9}, ends) == 10


def test_the_replays_that_found_their_batch_committed_are_counted_over_every_start(
    tmp_path: Path,
) -> None:
    from daemon.model.reports import BatchCounts
    from daemon.verify.child import ChildRun

    def logged(message: str) -> str:
        return json.dumps({"level": "INFO", "message": message})

    said = BatchCounts("p-comap", 4, replayed=2).replay_line()
    # A continuous pipeline's task names its long batch.
    continuous = BatchCounts("p-window", 3, replayed=4, positions={"t/0": 9}).replay_line()
    assert said is not None and continuous is not None
    (tmp_path / "run-1.log").write_text(logged("pipeline p-comap started") + "\nnot json\n")
    (tmp_path / "run-2.log").write_text(
        logged(said) + "\n" + logged(said.replace("p-comap", "p-comap.totals").replace("2", "1"))
    )
    (tmp_path / "run-3.log").write_text(logged(continuous))
    child = ChildRun(tmp_path / "verify.toml", tmp_path)
    child.starts = 3
    assert child.replays_found() == 7


def test_a_run_is_stopped_outside_the_machines_commit_turn(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run stopped while one of its tasks held the turn would hold every transaction on
    the machine back, the new run's too (the zombie scenario hung so once)."""
    from daemon.sink.commit_turn import ending_transaction
    from daemon.verify.child import ChildRun

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # a runtime folder of its own
    child = ChildRun(tmp_path / "verify.toml", tmp_path)
    child.process = subprocess.Popen(["sleep", "600"], start_new_session=True)  # noqa: S607
    try:
        held, release = threading.Event(), threading.Event()

        def a_task_in_its_turn() -> None:
            with ending_transaction(True):
                held.set()
                release.wait(60)

        task = threading.Thread(target=a_task_in_its_turn)
        task.start()
        held.wait(60)
        pausing = threading.Thread(target=child.pause, args=(True,))
        pausing.start()
        pausing.join(1.0)
        assert pausing.is_alive() and _state(child.process.pid) != "T"  # waits for the turn
        release.set()
        task.join(60)
        pausing.join(60)
        assert _stopped(child.process.pid)
        child.resume()
        child.pause()  # where transactions take no turns
        assert _stopped(child.process.pid)
    finally:
        child.kill()


def _stopped(pid: int) -> bool:
    """Whether the process stops (a signal is delivered a moment after it is sent)."""
    for _ in range(200):
        if _state(pid) == "T":
            return True
        time.sleep(0.05)
    return False


def _state(pid: int) -> str:
    """A process's state letter from /proc (``T``: stopped)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat.rsplit(")", 1)[1].split()[0]
