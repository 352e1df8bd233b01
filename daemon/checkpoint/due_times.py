"""When a pipeline's buckets are next due: the file that lets an idle query run no batch.

How it works: Spark fires ``transformWithState``'s processing-time timers only inside a
micro-batch, and runs one only when a source's offsets move, so the source plans a
:data:`~daemon.model.wire.CLOCK` entry for joiners that wake quiet keys. Moving it every
``wake_ms`` costs a batch a period while nothing happens. Instead each operator call reports,
in its counts row, the timer its bucket holds after the call (bucket label -> ms, None for
no timer); the sink's commit, on the driver, merges them into :class:`DueTimes` and writes
them to the checkpoint's due-time file (:func:`~daemon.checkpoint.layout.due_times_file`,
:func:`write`); the planner, also on the driver, reads it and moves the clock only when a
timer is due (:func:`clock_moves`).

The map is *known* only when it holds every bucket's timer: it starts known, empty, in a new
checkpoint (or holds a seed's timers, written by ``daemon reset``/``daemon rescale``), and each
commit carries it on from the batch before. A checkpoint that ran batches without it (made by
an older enrichd), or a commit that could not write it, leaves it unknown or behind the
checkpoint's commit log: the planner then moves the clock every ``wake_ms``, as before.

Reported timers are facts about the state a batch commits, not counts: a batch that Spark runs
again (after a crash between this file and Spark's commit log) reports the same timers, and
merging them twice changes nothing.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from daemon.checkpoint.batch_logs import last_committed
from daemon.checkpoint.layout import due_times_file
from daemon.private_paths import write_private_text

NO_BATCH = -1
"""The batch id a map is current as of before the checkpoint's first micro-batch."""


@dataclass(frozen=True)
class DueTimes:
    """Every bucket's processing-time timer, as of a committed micro-batch."""

    batch: int
    """The last micro-batch whose calls are merged in (:data:`NO_BATCH`: none yet)."""
    timers: dict[int, int] = field(default_factory=dict)
    """Bucket label -> the ms its timer fires at; a bucket without a timer is absent."""

    @property
    def earliest(self) -> int | None:
        """The first timer to fire, or None without any."""
        return min(self.timers.values(), default=None)


def merged(
    base: DueTimes | None, batch: int, reported: Mapping[int, int | None]
) -> DueTimes | None:
    """``base`` with the timers that ``batch``'s calls reported; None when not known.

    Known only when ``base`` is as of the batch before (or of ``batch`` itself, which Spark ran
    again: the same reports merge to the same map). A gap means a commit's reports were lost.
    """
    if base is None or base.batch not in (batch - 1, batch):
        return None
    timers = dict(base.timers)
    for bucket, timer in reported.items():
        if timer is None:
            timers.pop(bucket, None)
        else:
            timers[bucket] = timer
    return DueTimes(batch, timers)


def clock_moves(due: DueTimes | None, last_committed: int | None, now_ms: int) -> bool:
    """Whether the planner moves the clock: a timer is due, or the map is not known.

    ``last_committed``: the checkpoint's last committed batch (None: none). A map behind it
    misses that batch's timers, so it is not trusted. A timer fires in a batch whose
    timestamp is at or past it, and Spark takes that timestamp after the plan, so a timer due
    by ``now_ms`` fires in the batch the moved clock makes.
    """
    if due is None or due.batch < (NO_BATCH if last_committed is None else last_committed):
        return True
    earliest = due.earliest
    return earliest is not None and now_ms >= earliest


def read(checkpoint: str | Path) -> DueTimes | None:
    """The checkpoint's due times; None when it has none or they do not read."""
    try:
        data = json.loads(due_times_file(checkpoint).read_text(encoding="utf-8"))
        timers = {int(bucket): int(ms) for bucket, ms in data["timers"].items()}
        return DueTimes(int(data["batch"]), timers)
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None  # absent or torn: not known, so the clock ticks as it always did


def write(checkpoint: str | Path, due: DueTimes) -> None:
    """Write ``due`` whole, or leave the file as it was (a new file renamed over it)."""
    text = json.dumps(
        {"batch": due.batch, "timers": {str(b): ms for b, ms in sorted(due.timers.items())}}
    )
    write_private_text(due_times_file(checkpoint), text, atomic=True)


def start_known(checkpoint: str | Path) -> None:
    """Start a new checkpoint's map known and empty, unless it has one or ran batches.

    A checkpoint that committed batches without the map (an older enrichd's) stays unknown:
    its buckets' timers cannot be told from here.
    """
    if due_times_file(checkpoint).exists() or last_committed(checkpoint) is not None:
        return
    write(checkpoint, DueTimes(NO_BATCH))
