"""How far verify's child run got: what it planned, and what it committed, by its mode.

A micro-batch pipeline's checkpoint says it: Spark writes ``offsets/N`` with the input offsets
micro-batch N is to end at when it plans the batch, and ``commits/N`` once its output is
committed (:class:`CheckpointProgress`). A continuous pipeline's offset log holds only its
long batches' numbers and ends in time (:mod:`daemon.continuous.lease_source`): its tasks read
Kafka themselves and commit a transaction per sub-batch. Where those read to reaches the
pipeline's group, ``<id_prefix>.<pipeline>``, which the daemon commits from its tasks' reports
only once their sub-batches' output is committed (:mod:`daemon.service.lag_group`), and which
never runs ahead of the output (:class:`LagGroupProgress`).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any, Protocol

from daemon.checkpoint.batch_logs import last_planned, planned_batch
from daemon.checkpoint.layout import downstream
from daemon.kafka import connect, names
from daemon.model.wire import split_partition_name
from daemon.verify import child as runs
from daemon.verify.child import planned_since
from daemon.verify.plan import VerifiedPipeline

_COMMITTED_WAIT_S = 10
"""How long one read of a group's committed offsets may take."""


class RunProgress(Protocol):
    """How far the child run got (see the module docstring)."""

    def planned(self) -> tuple[list[int], int]:
        """The last batch each pipeline planned, and the input records planned in all."""

    def all_committed(self) -> bool:
        """Whether every input record produced so far is in a committed batch."""

    def back(self, batches: list[int], records: int) -> bool:
        """Whether a restarted run went past where :meth:`planned` stood at the kill."""

    def stage_reached(self, pipe: VerifiedPipeline, stage: str, ends: dict[str, int]) -> bool:
        """Whether ``pipe``'s second stage (output ``stage``) read its input to ``ends``."""


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

    def stage_reached(self, pipe: VerifiedPipeline, stage: str, ends: dict[str, int]) -> bool:
        """Whether the stage's last committed micro-batch ends at ``ends`` or past them."""
        return runs.reached(runs.committed(downstream(pipe.config.checkpoint, stage)), ends)


class LagGroupProgress:
    """A continuous run's progress: its long batches, and its groups' committed offsets.

    Records count as read once a committed sub-batch read them, which the daemon learns from
    the task's report about a second later: the group lags the output, never leads it.
    """

    def __init__(
        self, conf: dict[str, str], id_prefix: str, pipelines: list[VerifiedPipeline]
    ) -> None:
        self.pipelines = pipelines
        self.conf, self.id_prefix = conf, id_prefix
        self.readers = [self._reader(pipe.config.name) for pipe in pipelines]
        self.stage_readers: dict[str, Any] = {}
        """A reader of each second stage's group, by the stage's query name, once asked."""

    def _reader(self, query: str) -> Any:
        """A consumer that reads the committed offsets of query ``query``'s group."""
        group = names.pipeline_group(self.id_prefix, query)
        return connect.consumer(self.conf, {"group.id": group, "enable.auto.commit": False})

    def read(self, index: int) -> dict[str, int]:
        """Where pipeline ``index``'s group says its committed sub-batches read to."""
        return _committed(self.readers[index], self.pipelines[index].ends)

    def planned(self) -> tuple[list[int], int]:
        """The last long batch each pipeline planned, and the input records committed."""
        batches, records = [], 0
        for index, pipe in enumerate(self.pipelines):
            number = last_planned(pipe.config.checkpoint)
            batches.append(-1 if number is None else number)
            records += runs.records_within(self.read(index), pipe.ends)
        return batches, records

    def all_committed(self) -> bool:
        """Whether every pipeline's group is at its input's ends."""
        return all(
            runs.reached(self.read(index), pipe.ends) for index, pipe in enumerate(self.pipelines)
        )

    def back(self, batches: list[int], records: int) -> bool:
        """Whether the restarted run read on: sub-batches past ``records``, or a new long batch.

        Spark first runs the long batch the kill cut short again, under its number: its task
        replays what the dead one committed and reads on until the batch's end in time. A
        run that had read every record produced so far has nothing to read on: it is back
        once it plans the next long batch.
        """
        now, read = self.planned()
        return read > records or planned_since(batches, now)

    def stage_reached(self, pipe: VerifiedPipeline, stage: str, ends: dict[str, int]) -> bool:
        """Whether the stage's group (a continuous query of its own) is at ``ends``."""
        query = f"{pipe.config.name}.{stage}"
        reader = self.stage_readers.get(query)
        if reader is None:
            reader = self.stage_readers[query] = self._reader(query)
        return runs.reached(_committed(reader, ends), ends)

    def ends_in_time(self) -> list[int]:
        """When each pipeline's last planned long batch stops taking records, in ms (or 0)."""
        found = []
        for pipe in self.pipelines:
            found.append(_until(pipe.config.checkpoint))
        return found

    def close(self) -> None:
        """Close the readers."""
        for reader in [*self.readers, *self.stage_readers.values()]:
            reader.close()


def _until(checkpoint: Path) -> int:
    number = last_planned(checkpoint)
    if number is None:
        return 0
    try:
        source: dict[str, Any] = planned_batch(checkpoint, number).sources[0] or {}
    except (OSError, IndexError, ValueError):
        return 0
    return int(source.get("until", 0))


def _committed(reader: Any, partitions: Iterable[str]) -> dict[str, int]:
    """Where ``reader``'s group committed, for each of ``partitions`` (by name; 0: nowhere)."""
    # Late: confluent_kafka loads with the first client (daemon.model.constants says why).
    from confluent_kafka import TopicPartition

    wanted = [TopicPartition(*split_partition_name(name)) for name in partitions]
    if not wanted:
        return {}
    found = reader.committed(wanted, timeout=_COMMITTED_WAIT_S)
    return {f"{tp.topic}/{tp.partition}": max(tp.offset, 0) for tp in found}
