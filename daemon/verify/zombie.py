"""``daemon verify``'s zombie scenario: a paused run that wakes up after a new one took over.

A run frozen mid-batch (a stopped VM, a long GC pause, a host cut off from its
orchestrator) is replaced by a new one, and then wakes up, unaware. verify stops the child
run with SIGSTOP (driver, JVM and Python workers) once a task of a micro-batch committed
while the others run, starts a new run on a copy of the checkpoints taken while it is
stopped, waits until the new run committed every micro-batch the old one had planned, and
resumes the old one with SIGCONT. A continuous run is stopped once a sub-batch committed,
inside its long batch; the new run runs that long batch again, replaying what the stopped
one committed, and the woken task either finds the long batch's time up or is fenced.

Why a copy: on one host the checkpoint's lock (:mod:`daemon.pipeline.lock`) refuses a
second ``daemon run`` on it, and the stopped run still holds the lock. A copy is what a
second host sees on a replicated or restored volume, where that lock (a per-host
``flock``) does not reach; both runs then share what fencing rests on: the transactional
ids, the query id and so the batch-marker groups. (Two drivers on one shared folder fare
no better: Spark refuses a micro-batch another driver already logged, "Concurrent update
to the log".)

What must happen: the new run's tasks initialise the transactional ids the old run's tasks
hold. A woken task that had its producer then has its transaction refused (fenced) at its
commit, and starts over with a new producer that reads the batch marker again; a woken task
that starts after the takeover takes the id back in turn and reads the marker first. Either
way it writes nothing for a batch the new run committed, which the woken run logs as
replayed tasks that found their batch committed. The woken run is watched until it exits, is
fenced, commits the batch it was stopped in, or :data:`WATCH_S` pass, and is then killed, as
an orchestrator stops a replaced instance. The new run goes on to the end, and the output
check proves that nothing was written twice or lost.
"""

from __future__ import annotations

import json
import re
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from daemon.checkpoint.batch_logs import last_committed
from daemon.signals import StopRequest
from daemon.verify import child as runs
from daemon.verify.plan import VerifiedPipeline

WATCH_S = 30.0
"""The longest a resumed run is watched before it is killed."""
FENCED = re.compile(r"fenc|old epoch|INVALID_PRODUCER_EPOCH|PRODUCER_FENCED", re.IGNORECASE)
"""What the woken run logs when a transaction of its is refused for a newer producer."""
SPARK_LOG = re.compile(r"Spark's own log: (\S+)")
"""The line a start names Spark's own log with (``daemon.service``)."""


@dataclass
class Zombie:
    """What the zombie scenario saw."""

    paused_batch: int
    """The micro-batch last planned (of all pipelines, the highest) when the run was stopped."""
    in_flight: bool
    """Whether that batch was not committed yet when the run was stopped."""
    new_batch: int = -1
    """The micro-batch last planned by the new run when the old one was resumed (it had
    committed every one the old run had planned)."""
    fenced_lines: int = 0
    """Lines the woken run logged of transactions refused for a newer producer."""
    replays_found: int = 0
    """Tasks of the woken run that found their batch committed (by the new run)."""
    ended: str = ""
    """How the woken run ended: by itself (its exit code), or killed by verify, and when."""


class Markers(Protocol):
    """Whether a task committed since :meth:`mark` (:class:`daemon.verify.kills.MarkerWatch`)."""

    def mark(self) -> None:
        """Remember where the markers are now."""

    def moved(self) -> bool:
        """Whether a marker landed since :meth:`mark`."""


Wait = Callable[[runs.ChildRun, str, Callable[[], bool]], None]
"""Polls a condition while a child run goes on, until it holds (or fails verify)."""
Planned = Callable[[], list[int]]
"""The last micro-batch each pipeline planned."""


def replace_paused_run(
    old: runs.ChildRun,
    pipelines: list[VerifiedPipeline],
    planned: Planned,
    more_input: Callable[[], None],
    markers: Markers,
    wait: Wait,
    stop: StopRequest,
    *,
    continuous: bool = False,
    commit_turn: bool = False,
) -> tuple[runs.ChildRun, Zombie]:
    """Run the scenario (see the module docstring); the new run, and what was seen.

    ``more_input`` produces the input of the micro-batch the run is stopped in (with
    ``continuous``, of the sub-batch of a long batch). ``commit_turn``: the runs'
    transactions take the machine's turns (:meth:`~daemon.verify.child.ChildRun.pause`).
    The pipelines' checkpoints are the new run's copies afterwards.
    """
    originals = [Path(pipe.config.checkpoint) for pipe in pipelines]
    if continuous:
        # A long batch is always running, and its task commits input within a commit interval
        # of its arrival: marked before the input goes in, the stop lands once that sub-batch
        # committed, inside the long batch, which the new run then replays.
        markers.mark()
        more_input()
        wait(old, "a sub-batch of the input to stop the run in committed", markers.moved)
    else:
        before = planned()
        more_input()
        wait(old, "a micro-batch to stop the run in", lambda: runs.planned_since(before, planned()))
        # Once a task of it committed, as the first kill: the others then hold producers and
        # transactions the new run fences, and the batch is partly written.
        markers.mark()
        wait(
            old,
            "a task of the micro-batch to stop the run in committed",
            lambda: markers.moved() or not runs.any_in_flight(originals),
        )
    old.pause(commit_turn)
    paused = planned()
    zombie = Zombie(max(paused), runs.any_in_flight(originals))
    copies = [path.with_name(path.name + "-new") for path in originals]
    text = old.path.read_text(encoding="utf-8")
    for pipe, original, copy in zip(pipelines, originals, copies, strict=True):
        shutil.copytree(original, copy)
        pipe.config = pipe.config.model_copy(update={"checkpoint": copy})
        text = text.replace(json.dumps(str(original)), json.dumps(str(copy)))
    new_path = old.path.with_name("verify-new.toml")
    new_path.write_text(text, encoding="utf-8")
    new_path.chmod(0o600)
    new = runs.ChildRun(new_path, old.folder, name="new-run")
    new.start()

    def caught_up() -> bool:
        # It committed every batch the stopped run had planned: its tasks took the
        # transactional ids over (fencing the stopped run's) and wrote or skipped them.
        done = [last_committed(copy) for copy in copies]
        return all(n is not None and n >= batch for n, batch in zip(done, paused, strict=True))

    wait(new, "the new run to commit the stopped run's micro-batches", caught_up)
    zombie.new_batch = max(planned())
    logged = old.starts
    earlier = len(old.messages(logged))
    spark_log = _spark_log(old.messages(logged))
    spark_seen = _size(spark_log)
    resumed = time.monotonic()
    old.resume()

    def woken() -> list[str]:
        """What it logged since, Spark's own log (where a failed task is) included."""
        return old.messages(logged)[earlier:] + _tail(spark_log, spark_seen)

    zombie.ended = _watch(old, originals, paused, woken, stop)
    zombie.ended += f", {time.monotonic() - resumed:.1f} s after SIGCONT"
    old.kill()
    lines = woken()
    zombie.replays_found = sum(
        int(said.group(1)) for line in lines if (said := runs.REPLAY_LINE.match(line))
    )
    zombie.fenced_lines = sum(1 for line in lines if FENCED.search(line))
    # The originals stay (deleted with verify's folder): Spark's checkpoint names its state
    # schema files by absolute path, so the copy still reads them from there (measured: the
    # new run failed with "... _stateSchema/... does not exist" once they were deleted).
    return new, zombie


def _spark_log(messages: list[str]) -> Path | None:
    """Spark's own log of a start, as the start named it."""
    for message in messages:
        named = SPARK_LOG.match(message)
        if named is not None:
            return Path(named.group(1))
    return None


def _size(path: Path | None) -> int:
    try:
        return 0 if path is None else path.stat().st_size
    except OSError:
        return 0


def _tail(path: Path | None, start: int) -> list[str]:
    """The lines of ``path`` past byte ``start``."""
    if path is None:
        return []
    try:
        with path.open("rb") as log:
            log.seek(start)
            return log.read().decode("utf-8", errors="replace").splitlines()
    except OSError:
        return []


def _watch(
    old: runs.ChildRun,
    checkpoints: list[Path],
    paused: list[int],
    woken: Callable[[], list[str]],
    stop: StopRequest,
) -> str:
    """Watch the woken run until it exits, is fenced, or commits where it was stopped.

    Or until :data:`WATCH_S` pass. Fenced, its query fails and the daemon would restart it
    after a backoff, to be fenced or find its batches committed again: an orchestrator stops
    a replaced instance then.
    """
    watched = time.monotonic() + WATCH_S
    while not stop.sleep(0.25):
        code = old.exited()
        if code is not None:
            return f"exited by itself with code {code}"
        done = [last_committed(path) for path in checkpoints]
        if any(n is not None and n >= batch for n, batch in zip(done, paused, strict=True)):
            return "was killed by verify once it committed the batch it was stopped in"
        if any(FENCED.search(line) for line in woken()):
            return "was killed by verify once a transaction of its was refused (fenced)"
        if time.monotonic() > watched:
            return f"was killed by verify after {WATCH_S:g} s awake"
    return "was killed by verify, itself stopped"
