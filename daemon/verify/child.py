"""The `daemon run` that verify puts through its paces, and where its checkpoints stand.

verify starts ``daemon run`` as a child process in a session of its own, tethered so that it
dies with verify (:mod:`daemon.verify.tether`), with its log in the work folder, kills it with
SIGKILL (the driver, Spark's JVM and Spark's Python workers, which
leave the driver's process group, found through ``/proc``), starts it again, and at the end
stops it with SIGTERM as systemd would. It touches no process it did not start.

Progress is read from the pipelines' checkpoints, which verify owns: Spark writes
``offsets/N`` when it plans micro-batch N (one JSON line of ``topic/partition`` offsets for
the source) and ``commits/N`` once the batch is done.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path

from daemon.checkpoint.batch_logs import last_committed, last_planned, planned_batch
from daemon.sink.commit_turn import ending_transaction

STOP_TIMEOUT_S = 60
"""How long verify waits for the child to exit after SIGTERM before it kills it."""
CHILD_STOP_TIMEOUT_S = 15
"""The child's ``--stop-timeout``: verify stops it only once every input is committed, so the
micro-batches in flight then hold no records, and a shorter wait spares each run the time a
loaded machine's Spark can take to shut down (up to the whole timeout, measured)."""
_TAIL_BYTES = 64 << 10
REPLAY_LINE = re.compile(
    r"pipeline \S+: (?:micro-batch|long batch) \d+: (\d+) replayed task\(s\) found their batch "
    r"committed"
)
"""The line a run logs for a batch whose replayed tasks found it committed
(:meth:`daemon.model.reports.BatchCounts.replay_line`)."""


class ChildRun:
    """``daemon run PATH`` as a child process; each start logs to ``NAME-N.log`` in ``folder``."""

    def __init__(self, path: Path, folder: Path, name: str = "run") -> None:
        self.path = path
        self.folder = folder
        self.name = name
        self.starts = 0
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def log(self) -> Path:
        """The current run's log."""
        return self._log(self.starts)

    def _log(self, start: int) -> Path:
        return self.folder / f"{self.name}-{start}.log"

    def start(self) -> None:
        """Start ``daemon run`` (after a kill, from the same checkpoints)."""
        self.starts += 1
        env = {**os.environ, "PYSPARK_PYTHON": sys.executable}
        with self.log.open("wb") as log:
            self.process = subprocess.Popen(  # noqa: S603 - our own command, no shell
                [
                    # Killed if verify dies without killing it (daemon.verify.tether says why).
                    sys.executable,
                    "-m",
                    "daemon.verify.tether",
                    str(os.getpid()),
                    sys.executable,
                    "-m",
                    "daemon",
                    "run",
                    str(self.path),
                    "--stop-timeout",
                    str(CHILD_STOP_TIMEOUT_S),
                    "--log-format",
                    "json",
                ],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def exited(self) -> int | None:
        """The exit code if the run has ended by itself, else None."""
        return None if self.process is None else self.process.poll()

    def kill(self) -> None:
        """SIGKILL the whole run at once: driver, JVM and Python workers."""
        if self.process is None:
            return
        self._signal_all(signal.SIGKILL)
        self.process.wait(30)

    def pause(self, commit_turn: bool = False) -> None:
        """SIGSTOP the whole run, as a frozen VM or a long GC pause would stop it.

        ``commit_turn``: the run's transactions take this machine's turns
        (:mod:`daemon.sink.commit_turn`). The stop is then sent while verify holds the turn,
        so that no task of the run is stopped inside one, which would hold back every
        transaction on the machine, the new run's too, until the stopped run went on.
        """
        with ending_transaction(commit_turn):
            self._signal_all(signal.SIGSTOP)

    def resume(self) -> None:
        """SIGCONT the whole run after :meth:`pause`."""
        self._signal_all(signal.SIGCONT)

    def _signal_all(self, signum: signal.Signals) -> None:
        """Signal every process group of the run (Spark's Python workers leave the driver's)."""
        if self.process is None:
            return
        groups = {self.process.pid}
        for pid in descendants(self.process.pid):
            try:
                groups.add(os.getpgid(pid))
            except ProcessLookupError:
                pass
        for group in groups:
            try:
                os.killpg(group, signum)
            except ProcessLookupError:
                pass

    def stop(self) -> int:
        """SIGTERM the driver, as systemd does; its exit code (killed if it does not exit)."""
        if self.process is None or self.process.poll() is not None:
            return -1 if self.process is None else self.process.returncode
        self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.kill()
            return -int(signal.SIGKILL)

    def replays_found(self) -> int:
        """Replayed tasks that found their batch committed, as every start's log says."""
        found = 0
        for message in self.messages():
            said = REPLAY_LINE.match(message)
            if said is not None:
                found += int(said.group(1))
        return found

    def messages(self, start: int = 1) -> list[str]:
        """The messages every start from ``start`` on logged (lines not JSON as they are)."""
        found = []
        for number in range(start, self.starts + 1):
            try:
                text = self._log(number).read_text(errors="replace")
            except OSError:
                continue
            for line in text.splitlines():
                try:
                    found.append(str(json.loads(line).get("message", "")))
                except (ValueError, AttributeError):
                    found.append(line)
        return found

    def log_tail(self, lines: int = 20) -> str:
        """The end of the current run's log."""
        try:
            with self.log.open("rb") as log:
                # Only the end: verify polls it many times a second, the log only grows.
                log.seek(max(log.seek(0, os.SEEK_END) - _TAIL_BYTES, 0))
                text = log.read().decode("utf-8", errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])


def descendants(pid: int) -> set[int]:
    """Every process below ``pid``, from /proc."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            parent = int(stat.rpartition(")")[2].split()[1])
            children.setdefault(parent, []).append(int(entry.name))
    found: set[int] = set()
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def batch_offsets(checkpoint: Path, batch: int) -> dict[str, int]:
    """The ``topic/partition`` offsets micro-batch ``batch`` was planned to end at."""
    try:
        return planned_batch(checkpoint, batch).ends
    except OSError:
        return {}


def planned(checkpoint: Path) -> tuple[int, dict[str, int]]:
    """The last planned micro-batch and its offsets (-1 and none before the first)."""
    batch = last_planned(checkpoint)
    return (-1, {}) if batch is None else (batch, batch_offsets(checkpoint, batch))


def planned_since(before: list[int], now: list[int]) -> bool:
    """Whether some pipeline planned a micro-batch after those it had planned ``before``.

    Per pipeline: after a restart each replays the batch a kill cut short under its old
    number, and the pipelines that were furthest may have nothing left to plan, so the highest
    number across them says nothing about whether the restart is back.
    """
    return any(later > earlier for earlier, later in zip(before, now, strict=True))


def in_flight(checkpoint: Path) -> bool:
    """Whether the last planned micro-batch is not committed yet."""
    planned_last, committed_last = last_planned(checkpoint), last_committed(checkpoint)
    return planned_last is not None and (committed_last is None or committed_last < planned_last)


def any_in_flight(checkpoints: Iterable[Path]) -> bool:
    """Whether any of the checkpoints planned a micro-batch it has not committed."""
    return any(in_flight(Path(checkpoint)) for checkpoint in checkpoints)


def committed(checkpoint: Path) -> dict[str, int]:
    """The offsets the last committed micro-batch ended at."""
    batch = last_committed(checkpoint)
    return {} if batch is None else batch_offsets(checkpoint, batch)


def reached(offsets: dict[str, int], ends: dict[str, int]) -> bool:
    """Whether ``offsets`` are at or past ``ends`` in every partition."""
    return all(offsets.get(name, 0) >= end for name, end in ends.items())


def records_within(offsets: dict[str, int], ends: dict[str, int]) -> int:
    """Records from the start up to ``offsets``, counted within ``ends``."""
    return sum(min(offsets.get(name, 0), end) for name, end in ends.items())
