"""How far verify's child run got: what it planned, and what it committed, by its mode.

A micro-batch pipeline's checkpoint says it: Spark writes ``offsets/N`` with the input offsets
micro-batch N is to end at when it plans the batch, and ``commits/N`` once its output is
committed (:class:`CheckpointProgress`).
"""

from __future__ import annotations

from typing import Protocol

from daemon.verify import child as runs
from daemon.verify.child import planned_since
from daemon.verify.plan import VerifiedPipeline


class RunProgress(Protocol):
    """How far the child run got (see the module docstring)."""

    def planned(self) -> tuple[list[int], int]:
        """The last batch each pipeline planned, and the input records planned in all."""

    def all_committed(self) -> bool:
        """Whether every input record produced so far is in a committed batch."""

    def back(self, batches: list[int], records: int) -> bool:
        """Whether a restarted run went past where :meth:`planned` stood at the kill."""


class CheckpointProgress:
    """A micro-batch run's progress, from its pipelines' offset and commit logs."""

    def __init__(self, pipelines: list[VerifiedPipeline]) -> None:
        self.pipelines = pipelines

    def planned(self) -> tuple[list[int], int]:
        """The last micro-batch each pipeline planned, and the input records they cover."""
        batches, records = [], 0
        for pipe in self.pipelines:
            number, offsets = runs.planned(pipe.config.checkpoint)
            batches.append(number)
            records += runs.records_within(offsets, pipe.ends)
        return batches, records

    def all_committed(self) -> bool:
        """Whether every pipeline's last committed micro-batch ends past its input."""
        return all(
            runs.reached(runs.committed(p.config.checkpoint), p.ends) for p in self.pipelines
        )

    def back(self, batches: list[int], records: int) -> bool:
        """Whether a pipeline planned a micro-batch past ``batches`` (or all is in).

        A restarted run replays the batch the kill cut short under its old number.
        """
        return planned_since(batches, self.planned()[0]) or self.all_committed()
