"""A long batch's task writes in sub-batches: one transaction each, on one producer.

Continuous mode (docs/architecture.md): a task of a long batch commits a transaction every
commit interval. Its :class:`SubBatchProducer` takes the task's transactional id over once,
at the start, and numbers the sub-batches it commits, each marker naming the places of the
task's markers of the sub-batch before it and of the long batch's first
(:class:`~daemon.sink.markers.Marker`). Each sub-batch's records go through a
:class:`~daemon.sink.task_output.TaskOutput` of their own (:func:`sub_batch_output`), which
dead-letters what the topics refuse as a micro-batch's does; a sub-batch replayed after a
crash writes nothing and checks it read what its marker says.
"""

from __future__ import annotations

from daemon.sink.markers import Marker, Share
from daemon.sink.spec import OutputSpec
from daemon.sink.task_output import TaskOutput
from daemon.sink.task_producer import TaskProducer


class SubBatchProducer(TaskProducer):
    """The producer of one task of a long batch, and the place of its next sub-batch."""

    def __init__(self, spec: OutputSpec, task: int, batch_id: int, query_id: str) -> None:
        super().__init__(spec, task, batch_id, query_id)
        self.sub = 0
        """The number of the next sub-batch this task commits."""
        self.first_at: int | None = None
        """Where the long batch's first sub-batch marker of the task lies (None: none yet)."""
        self.previous_at: int | None = None
        """Where the task's last sub-batch marker lies (None: none of this long batch yet)."""

    def resume(self, committed: list[tuple[int, Marker]]) -> None:
        """Go on after the sub-batches an earlier attempt committed (with their places)."""
        if committed:
            self.first_at = committed[0][0]
            self.previous_at, last = committed[-1]
            self.sub = (last.sub or 0) + 1

    def marker_of(self, share: Share) -> Marker:
        """The next sub-batch's marker."""
        return Marker(self.batch_id, share, self.sub, self.first_at, self.previous_at)

    def commit(self, share: Share) -> int:
        """Commit the next sub-batch (see :meth:`TaskProducer.commit`); its marker's place."""
        at = super().commit(share)
        self.first_at = at if self.first_at is None else self.first_at
        self.previous_at, self.sub = at, self.sub + 1
        return at


def sub_batch_output(
    spec: OutputSpec, producer: SubBatchProducer, replayed: Marker | None = None
) -> TaskOutput:
    """The output of one sub-batch, through ``producer``, which took the id over already.

    ``replayed``: the sub-batch was committed before (its marker): it writes nothing, and its
    commit checks that it read what the marker says.
    """
    output = TaskOutput(spec, producer.partition, producer.batch_id, producer.query_id)
    output.adopt(producer, replayed)
    return output
