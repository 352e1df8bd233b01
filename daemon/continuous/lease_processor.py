"""A long batch's task in Spark: a ``transformWithState`` call per lease.

Spark groups the long batch's rows by lease and calls the processor once per lease, for the
whole long batch (:mod:`daemon.continuous.task` runs it). The lease's state is where it
stopped (a value state: the end offsets by partition, and its buckets' timers, so that a
bucket the next long batch does not load still wakes when due) and its buckets (a map
state, one entry a bucket), read the first time the long batch needs one and written, those
changed, when the long batch ends: Spark commits them with the batch, so the next long batch
starts where this one stopped, and a long batch run again starts as this one did. A chain's
operators (a lookup of several tables) each have a map state of their own
(:func:`buckets_variable`), and their timers are labelled apart as a micro-batch query's
reports label them (:func:`~daemon.operator.chain_step.timer_label`).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from pyspark.sql import Row as SparkRow
from pyspark.sql.streaming import StatefulProcessor, StatefulProcessorHandle
from pyspark.sql.types import BinaryType, IntegerType, StringType, StructField, StructType

from daemon.continuous.held_buckets import HeldBuckets, Key
from daemon.continuous.lease import Lease
from daemon.continuous.lease_source import LongBatches
from daemon.continuous.operators import LeaseOperators, timers_by_operator
from daemon.continuous.task import LongBatchTask
from daemon.operator.chain_processor import ChainProcessor
from daemon.operator.chain_step import ChainStep, operator_id
from daemon.operator.processor import JoinerProcessor
from daemon.operator.spec import OperatorPlan
from daemon.sink.spec import OutputSpec
from daemon.sink.task_output import running_task
from daemon.source.spec import SourceSpec
from daemon.spark.worker_gc import freeze_loaded

ENDS_SCHEMA = StructType([StructField("ends", StringType())])
BUCKET_KEY_SCHEMA = StructType([StructField("bucket", IntegerType())])
HELD_SCHEMA = StructType([StructField("blob", BinaryType())])


def buckets_variable(operator: int) -> str:
    """The map state of operator ``operator``'s buckets (Spark's numbering: 0 writes)."""
    return "lease_buckets" if operator == 0 else f"lease_buckets_{operator}"


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
        chain: with a joiner that runs as a chain, each operator's plan and place, in query
            order (``plan`` is then the whole joiner's, unused); empty: ``plan``'s alone.
    """

    def __init__(
        self,
        plan: OperatorPlan,
        output: OutputSpec,
        source: SourceSpec,
        starts: dict[str, int],
        labels: tuple[int, ...],
        batches: LongBatches,
        chain: tuple[tuple[OperatorPlan, ChainStep], ...] = (),
    ) -> None:
        self.plan = plan
        self.chain = chain
        self.output_spec = output
        self.source = source
        self.starts = starts
        self.labels = labels
        self.batches = batches

    def init(self, handle: StatefulProcessorHandle) -> None:
        """Declare the lease's state: where it stopped, and its buckets."""
        freeze_loaded()
        self.ends = handle.getValueState("lease_ends", ENDS_SCHEMA)
        self.held = {
            operator: handle.getMapState(buckets_variable(operator), BUCKET_KEY_SCHEMA, HELD_SCHEMA)
            for operator in range(len(self.chain) or 1)
        }

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
        operators = self._operators(stopped.timers)
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
            operators, self.source, self.output_spec, lease, query, bootstrap=bootstrap
        ).run()
        self._write(operators, run.ends, bootstrap=run.bootstrap)
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
        this lease's buckets, of the operator the row names (a chain's each have their own).
        The lease starts where the seed says (``starts``).
        """
        stopped = self._stopped()
        operators = self._operators(stopped.timers)
        place = operator_id(int(initialState.operator), len(operators.processors))
        processor = operators.processors[place]
        processor.handleInitialState((int(initialState.bucket),), initialState, timerValues)
        self._write(operators, stopped.ends, stopped.timers)

    def _operators(self, timers: dict[int, int]) -> LeaseOperators:
        """The lease's operators, each with its buckets as stored and its timers."""
        output = self.output_spec
        processors: list[JoinerProcessor] = [
            ChainProcessor(plan, output, step) for plan, step in self.chain
        ] or [JoinerProcessor(self.plan, output)]
        count = len(processors)
        buckets = [
            HeldBuckets(partial(self._stored, operator_id(place, count)), found)
            for place, found in enumerate(timers_by_operator(timers, count))
        ]
        return LeaseOperators(processors, buckets)

    def _write(
        self,
        operators: LeaseOperators,
        ends: dict[str, int],
        timers: dict[int, int] | None = None,
        bootstrap: dict[str, int] | None = None,
    ) -> None:
        """Write the buckets that changed, and where the lease stopped, with their timers."""
        for operator, bucket_key, blob in operators.changed():
            if blob is None:
                self.held[operator].removeKey(bucket_key)
            else:
                self.held[operator].updateValue(bucket_key, (blob,))
        timers = {**(timers or {}), **operators.timers()}
        self.ends.update((Stopped(ends, timers, bootstrap or {}).text(),))

    def _stopped(self) -> Stopped:
        found = self.ends.get() if self.ends.exists() else None
        return Stopped.read(None if found is None else found[0])

    def _stored(self, operator: int, key: Key) -> bytes | None:
        held = self.held[operator]
        found = held.getValue(key) if held.containsKey(key) else None
        return None if found is None else bytes(found[0])

    def close(self) -> None:
        """Nothing is open between calls: each sub-batch committed its own transaction."""
