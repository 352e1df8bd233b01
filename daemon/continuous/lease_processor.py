"""A long batch's task in Spark: a ``transformWithState`` call per lease.

Spark groups the long batch's rows by lease and calls the processor once per lease, for the
whole long batch (:mod:`daemon.continuous.task` runs it). The lease's state is where it
stopped (a value state: the end offsets by partition, and its buckets' timers, so that a
bucket the next long batch does not load still wakes when due) and its buckets (a map
state, one entry a bucket), read the first time the long batch needs one and written, those
changed, when the long batch ends: Spark commits them with the batch, so the next long batch
starts where this one stopped, and a long batch run again starts as this one did.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql import Row as SparkRow
from pyspark.sql.streaming import StatefulProcessor, StatefulProcessorHandle
from pyspark.sql.types import BinaryType, IntegerType, StringType, StructField, StructType

from daemon.continuous.held_buckets import HeldBuckets, Key
from daemon.continuous.lease import Lease
from daemon.continuous.lease_source import LongBatches
from daemon.continuous.task import LongBatchTask
from daemon.operator.processor import JoinerProcessor
from daemon.operator.spec import OperatorPlan
from daemon.sink.spec import OutputSpec
from daemon.sink.task_output import running_task
from daemon.source.spec import SourceSpec
from daemon.spark.worker_gc import freeze_loaded

ENDS_SCHEMA = StructType([StructField("ends", StringType())])
BUCKET_KEY_SCHEMA = StructType([StructField("bucket", IntegerType())])
HELD_SCHEMA = StructType([StructField("blob", BinaryType())])


@dataclass(frozen=True)
class Stopped:
    """Where a lease stopped: what the ``lease_ends`` value state holds, as JSON."""

    ends: dict[str, int]
    """Where each partition was read up to: the next long batch's start."""
    timers: dict[int, int]
    """Each held bucket's timer, by label."""
    bootstrap: dict[str, int] = field(default_factory=dict)
    """The ends a bootstrap had yet to reach when the long batch ended, by partition name
    (``{}``: none, or it is done): the next long batch goes on with it."""

    def text(self) -> str:
        """The value's text."""
        found: dict[str, Any] = {"ends": self.ends, "timers": self.timers}
        if self.bootstrap:
            found["bootstrap"] = self.bootstrap
        return json.dumps(found)

    @staticmethod
    def read(text: str | None) -> Stopped:
        """A value's text back (None: the lease has not run yet).

        The first continuous builds kept the ends alone, without timers: partition names
        have a ``/``, so no partition is named ``ends``.
        """
        found = json.loads(text) if text else {}
        if "ends" not in found:
            return Stopped(found, {})
        timers = {int(label): at for label, at in found["timers"].items()}
        return Stopped(found["ends"], timers, found.get("bootstrap", {}))


class LeaseProcessor(StatefulProcessor):
    """Runs one lease's long batch per call (see the module docstring).

    Args:
        plan: the joiner operator's plan.
        output: where the pipeline writes.
        source: what it reads.
        starts: where a lease without state starts, by partition name.
        labels: each lease's grouping key, in lease order.
        batches: how long batches are cut: how often a sub-batch commits, and what asks
            the long batch to end early (a stop, or its held state's budget).
    """

    def __init__(
        self,
        plan: OperatorPlan,
        output: OutputSpec,
        source: SourceSpec,
        starts: dict[str, int],
        labels: tuple[int, ...],
        batches: LongBatches,
    ) -> None:
        self.plan = plan
        self.output_spec = output
        self.source = source
        self.starts = starts
        self.labels = labels
        self.batches = batches

    def init(self, handle: StatefulProcessorHandle) -> None:
        """Declare the lease's state: where it stopped, and its buckets."""
        freeze_loaded()
        self.ends = handle.getValueState("lease_ends", ENDS_SCHEMA)
        self.held = handle.getMapState("lease_buckets", BUCKET_KEY_SCHEMA, HELD_SCHEMA)

    def handleInputRows(  # noqa: N802 - Spark's name
        self,
        key: Any,
        rows: Iterator[SparkRow],
        timerValues: Any,  # noqa: N803
    ) -> Iterator[SparkRow]:
        """Run the lease's long batch; write what changed. Its task reported its counts.

        A lease that has not run yet takes the bootstrap's ends from the long batch's rows
        (the checkpoint's first long batch has them); one that has goes on with what its last
        long batch left of a bootstrap.
        """
        leased = list(rows)
        until = max(int(row.until) for row in leased)
        _, batch, query = running_task()
        stopped = self._stopped()
        bootstrap = stopped.bootstrap if stopped.ends else json.loads(leased[0].bootstrap or "{}")
        # A partition the lease has not read yet (the topic gained it) starts as a new lease's.
        starts = {**self.starts, **stopped.ends}
        buckets = HeldBuckets(self._stored, stopped.timers)
        processor = JoinerProcessor(self.plan, self.output_spec)
        processor.ready(buckets)
        label = int(key[0])
        lease = Lease(
            batch,
            label,
            starts,
            until,
            self.batches.commit_interval_ms,
            self.batches.stopping,
            index=self.labels.index(label),
            of=len(self.labels),
            held_state_budget=self.batches.held_state_budget,
        )
        run = LongBatchTask(
            processor, self.source, self.output_spec, lease, query, buckets, bootstrap=bootstrap
        ).run()
        self._write(buckets, run.ends, bootstrap=run.bootstrap)
        yield from ()

    def handleInitialState(  # noqa: N802 - Spark's name
        self,
        key: Any,
        initialState: SparkRow,  # noqa: N803
        timerValues: Any,  # noqa: N803
    ) -> None:
        """Take in a bucket of a seed (``daemon rescale`` or ``reset --keep-state``).

        Spark calls this in a new checkpoint's first long batch only, before the lease's
        long batch, once per bucket the lease joins: its keys, each key's entry portable
        (:mod:`daemon.state.seed`), taken in as a micro-batch's operator takes them, into
        this lease's buckets. The lease starts where the seed says (``starts``).
        """
        buckets = HeldBuckets(self._stored)
        processor = JoinerProcessor(self.plan, self.output_spec)
        processor.ready(buckets)
        processor.handleInitialState((int(initialState.bucket),), initialState, timerValues)
        stopped = self._stopped()
        self._write(buckets, stopped.ends, stopped.timers)

    def _write(
        self,
        buckets: HeldBuckets,
        ends: dict[str, int],
        timers: dict[int, int] | None = None,
        bootstrap: dict[str, int] | None = None,
    ) -> None:
        """Write the buckets that changed, and where the lease stopped, with their timers."""
        for bucket_key, blob in buckets.changed():
            if blob is None:
                self.held.removeKey(bucket_key)
            else:
                self.held.updateValue(bucket_key, (blob,))
        timers = {**(timers or {}), **buckets.timers()}
        self.ends.update((Stopped(ends, timers, bootstrap or {}).text(),))

    def _stopped(self) -> Stopped:
        found = self.ends.get() if self.ends.exists() else None
        return Stopped.read(None if found is None else found[0])

    def _stored(self, key: Key) -> bytes | None:
        found = self.held.getValue(key) if self.held.containsKey(key) else None
        return None if found is None else bytes(found[0])

    def close(self) -> None:
        """Nothing is open between calls: each sub-batch committed its own transaction."""
