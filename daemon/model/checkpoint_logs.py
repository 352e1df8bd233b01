"""The micro-batch ids in a checkpoint's logs, as Spark writes them.

Spark writes ``offsets/N`` when it plans micro-batch N and ``commits/N`` once the batch is
done. The planner's clock (:mod:`daemon.model.due_times`) and the commands that read a
checkpoint from outside (:mod:`daemon.state`) both ask which batch committed last.
"""

from __future__ import annotations

from pathlib import Path


def batches(checkpoint: str | Path, log: str) -> list[int]:
    """The micro-batch ids in one of a checkpoint's logs (``offsets`` or ``commits``), in order."""
    try:
        entries = list((Path(checkpoint) / log).iterdir())
    except OSError:  # no such log (yet)
        return []
    return sorted(int(entry.name) for entry in entries if entry.name.isdigit())


def last_planned(checkpoint: str | Path) -> int | None:
    """The last micro-batch the checkpoint's offset log holds; None: none yet."""
    planned = batches(checkpoint, "offsets")
    return planned[-1] if planned else None


def last_committed(checkpoint: str | Path) -> int | None:
    """The last micro-batch the checkpoint's commit log holds; None: none yet."""
    committed = batches(checkpoint, "commits")
    return committed[-1] if committed else None


def planned_past_commit(checkpoint: str | Path) -> int | None:
    """A micro-batch planned (in the offset log) after the last committed one, if any."""
    planned = last_planned(checkpoint)
    committed = last_committed(checkpoint)
    if planned is not None and (committed is None or planned > committed):
        return planned
    return None
