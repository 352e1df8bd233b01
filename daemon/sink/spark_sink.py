"""How a micro-batch's counts reach the daemon, and a Spark sink that writes rows to Kafka.

A pipeline's joiner operator writes its records to Kafka itself
(:class:`daemon.sink.task_output.TaskOutput`); what reaches the end of its query is one
counts row per operator call (:data:`daemon.model.wire.COUNTS_TOPIC`): what the call wrote
and what the joiner counted. :class:`CountTotals` adds them up. They also carry the source
timestamps of the records written, which become the end-to-end latency histogram once all
are read, which is just after the operator's tasks committed (:mod:`daemon.model.latency`),
the newest event time of each input, and the timer of each bucket stored.

A pipeline's query hands each micro-batch's counts rows to :class:`BatchCounter` through
``foreachBatch``: Spark calls it on the driver, in the daemon's own process, once per batch,
and it collects the rows, keeps the buckets' timers in the checkpoint's due-time map and
reports the totals, all before Spark writes the batch to its commit log.

Why not a Spark sink: a Python data source's sink costs every micro-batch two round trips to
Python processes on the driver (one to make the batch's writer, one to commit it) and each
stateful task a Python writer of its own; ``foreachBatch`` costs one call into the process
that is already there. An ``observe()``d metric would come too late: Spark reports it with
the batch's progress, after its commit log, where the due-time map must be written before.

:class:`KafkaSink` stays: the pass-through benchmark writes through it (rows that are not
counts rows are written by the sink's own :class:`TaskOutput`, in the same exactly-once way),
and ``ENRICHD_COUNTS_SINK=data-source`` (:mod:`daemon.pipeline.switches`) makes a pipeline's
query count through it as before, so that the two ways can be measured against each other.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceStreamArrowWriter,
    DataSourceStreamWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

from daemon.checkpoint import due_times
from daemon.model import latency
from daemon.model.reports import BatchCounts
from daemon.model.wire import COUNTS_TOPIC, FAILURES_REPORTED, OUTPUT, counts_of
from daemon.report_socket import send
from daemon.sink.spec import OutputSpec
from daemon.sink.task_output import TaskOutput
from daemon.spark.worker_gc import freeze_loaded

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

_TOPIC = OUTPUT.position("topic")
_VALUE = OUTPUT.position("value")


@dataclass
class Written(WriterCommitMessage):
    """What one task wrote: records per topic, and whether it skipped a committed replay."""

    partition: int
    batch_id: int
    records: dict[str, int]
    skipped: bool = False
    dead_letters: dict[str, int] = field(default_factory=dict)
    """Dead letters written, by reason (their ``enrichd.error.class`` header)."""
    joiner_counts: dict[str, int] = field(default_factory=dict)
    """What the joiner counted with ``ctx.count`` (matched, unmatched, revisions, ...)."""
    tallies: dict[str, latency.Tally] = field(default_factory=dict)
    """End-to-end latency of the records written, per output topic
    (:mod:`daemon.model.latency`)."""
    event_time: dict[str, int] = field(default_factory=dict)
    """The newest event time of the records read, per input."""
    timers: dict[int, int | None] = field(default_factory=dict)
    """The timer each bucket the task's calls stored holds after them (None: none), reported
    by a skipped replay too (:mod:`daemon.checkpoint.due_times`)."""
    state_cache: dict[str, int] = field(default_factory=dict)
    """Loads of stored buckets by the worker cache's outcome (``hit``, ``miss``)."""
    failed_calls: int = 0
    """Joiner calls that failed in the operator tasks whose counts it read."""
    failures: list[str] = field(default_factory=list)
    """The lines of the first few of those failures."""
    replayed: int = 0
    """Tasks of the batch (operator tasks whose counts it read, or itself) that replayed it
    and found it committed by their marker."""


class CountTotals:
    """Counts rows added up: a sink task's, or a whole micro-batch's on the driver."""

    def __init__(self) -> None:
        self.records: dict[str, int] = {}
        self.dead_letters: dict[str, int] = {}
        self.joiner: dict[str, int] = {}
        self.stamps: dict[str, dict[int, int]] = {}
        self.event_time: dict[str, int] = {}
        self.timers: dict[int, int | None] = {}
        self.state_cache: dict[str, int] = {}
        self.failed_calls = 0
        self.failures: list[str] = []
        self.replayed = 0

    def add(self, value: bytes) -> None:
        """Add the counts of one counts row's value (:class:`~daemon.model.wire.CallCounts`)."""
        added = counts_of(value)
        for topic, pairs in added.get("stamps", {}).items():
            latency.merge(self.stamps.setdefault(topic, {}), pairs)
        _newest(self.event_time, added.get("event_time", {}))
        # In call order: a bucket's later call (its timer after its data) wins.
        self.timers.update((int(b), ms) for b, ms in added.get("timers", {}).items())
        _add(self.records, added.get("records", {}))
        _add(self.dead_letters, added.get("dead_letters", {}))
        _add(self.joiner, added.get("joiner", {}))
        _add(self.state_cache, added.get("cache", {}))
        self.failed_calls += added.get("failed_calls", 0)
        self.failures += added.get("failures", [])[: FAILURES_REPORTED - len(self.failures)]
        self.replayed += added.get("replayed", 0)

    def written(self, partition: int, batch_id: int, now_ms: int, skipped: bool = False) -> Written:
        """The totals as a task's commit message; latencies are up to ``now_ms``."""
        tallies = {topic: latency.tally(found, now_ms) for topic, found in self.stamps.items()}
        return Written(
            partition,
            batch_id,
            self.records,
            skipped=skipped,
            dead_letters=self.dead_letters,
            joiner_counts=self.joiner,
            tallies=tallies,
            event_time=self.event_time,
            timers=self.timers,
            state_cache=self.state_cache,
            replayed=self.replayed + int(skipped),
            failed_calls=self.failed_calls,
            failures=self.failures,
        )


class BatchCounter:
    """``foreachBatch``'s function: a micro-batch's counts rows, counted on the driver.

    Spark calls it once per micro-batch, in the daemon's process, after nothing else has run
    for the batch: collecting the batch's rows runs its tasks, the joiner operator's, which
    commit their output and state. Then it keeps the buckets' timers and reports the batch
    as the sink's ``commit()`` did (:func:`report_batch`); Spark writes the batch to its commit
    log once it returns.
    """

    def __init__(self, spec: OutputSpec) -> None:
        self.spec = spec

    def __call__(self, frame: DataFrame, batch_id: int) -> None:
        """Count one micro-batch's rows: all counts rows, since the operator writes its records.

        Raises:
            RuntimeError: a row that is not a counts row (a record the operator did not
                write), which fails the batch rather than drop the record.
        """
        totals = CountTotals()
        for topic, value in frame.select(OUTPUT.column("topic"), OUTPUT.column("value")).collect():
            if topic != COUNTS_TOPIC:
                raise RuntimeError(
                    f"pipeline {self.spec.pipeline!r}: its operator handed on a record for "
                    f"{topic!r} instead of writing it"
                )
            totals.add(value)
        now_ms = time.time_ns() // 1_000_000
        report_batch(self.spec, [totals.written(0, batch_id, now_ms)], batch_id)


class KafkaSink(DataSource):
    """``df.writeStream.format("enrichd-kafka-sink").option("spec", OutputSpec(...).encode())``."""

    @classmethod
    def name(cls) -> str:
        """The format name."""
        return "enrichd-kafka-sink"

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        """The writer of every micro-batch."""
        return KafkaStreamWriter(OutputSpec.decode(self.options["spec"]))


class KafkaStreamWriter(DataSourceStreamArrowWriter):
    """Writes a task's rows in one transaction, and adds up its counts rows."""

    def __init__(self, spec: OutputSpec) -> None:
        self.spec = spec

    def write(self, iterator: Iterator[pa.RecordBatch]) -> Written:
        """Write one task's share of a micro-batch."""
        freeze_loaded()
        return write_rows(TaskOutput.of_task(self.spec), iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        """Report what the batch wrote to the daemon's metrics (the tasks committed already).

        Spark calls this once per micro-batch after every task succeeded, on the driver host,
        in a Python worker process of its own (:func:`report_batch`).
        """
        report_batch(self.spec, messages, batchId)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        """Nothing to do: an uncommitted transaction is aborted when its id is next used."""


def report_batch(
    spec: OutputSpec, messages: list[WriterCommitMessage | None], batch_id: int
) -> None:
    """Keep the batch's timers, then report what it wrote to the daemon's metrics.

    Called once per micro-batch after every task committed, before Spark's commit log, so
    the counts are of committed output only (a skipped replay adds nothing). First, the
    buckets' timers go into the checkpoint's due-time map, which the planner reads before
    the next batch (:mod:`daemon.checkpoint.due_times`). Neither step ever fails the batch.
    """
    if spec.checkpoint is not None:
        keep_due_times(spec.checkpoint, messages, batch_id)
    if spec.metrics_address is None:
        return
    try:
        send(spec.metrics_address, batch_counts(spec.pipeline, messages, batch_id))
    except Exception:  # noqa: S110 - metrics must never fail a committed batch
        pass


def batch_counts(
    pipeline: str, messages: list[WriterCommitMessage | None], batch_id: int
) -> BatchCounts:
    """The report of what the tasks' commit ``messages`` say they wrote, added up."""
    records: dict[str, int] = {}
    dead_letters: dict[str, int] = {}
    joiner: dict[str, int] = {}
    latencies: dict[str, latency.Tally] = {}
    event_time: dict[str, int] = {}
    state_cache: dict[str, int] = {}
    failed_calls = replayed = 0
    failures: list[str] = []
    for message in messages:
        if isinstance(message, Written):
            _add(records, message.records)
            _add(dead_letters, message.dead_letters)
            _add(joiner, getattr(message, "joiner_counts", {}))
            latency.add(latencies, getattr(message, "tallies", {}))
            _newest(event_time, getattr(message, "event_time", {}))
            _add(state_cache, getattr(message, "state_cache", {}))
            failed_calls += getattr(message, "failed_calls", 0)
            failures += getattr(message, "failures", [])
            replayed += getattr(message, "replayed", 0)
    return BatchCounts(
        pipeline,
        batch_id,
        records,
        dead_letters,
        joiner,
        latency=latencies,
        event_time=event_time,
        state_cache=state_cache,
        failed_calls=failed_calls,
        failures=failures[:FAILURES_REPORTED],
        replayed=replayed,
    )


def keep_due_times(
    checkpoint: str, messages: list[WriterCommitMessage | None], batch_id: int
) -> None:
    """Merge the batch's reported timers into the checkpoint's due-time map, and write it.

    A map that is not known (none written, or behind this batch) is left as it is: the
    planner then moves its clock every period, as without it. A write that fails does the
    same, since the map stays behind Spark's commit log; it never fails the batch, whose
    output is committed already.
    """
    reported: dict[int, int | None] = {}
    try:
        for message in messages:
            if isinstance(message, Written):
                reported.update(getattr(message, "timers", {}))
        due = due_times.merged(due_times.read(checkpoint), batch_id, reported)
        if due is not None:
            due_times.write(checkpoint, due)
    except Exception:  # noqa: S110 - behind the commit log, the map is not trusted: the clock ticks
        pass


def write_rows(output: TaskOutput, batches: Iterator[pa.RecordBatch]) -> Written:
    """Send every row to ``output`` and commit it, unless no row is a record.

    A row addressed to :data:`~daemon.model.wire.COUNTS_TOPIC` is not a record: it carries
    the counts (:class:`~daemon.model.wire.CallCounts`) of what the joiner operator wrote,
    and is added to the task's totals instead of sent. A task that has only such rows opens
    no transaction: the operator committed its own.
    """
    totals = CountTotals()
    for batch in batches:
        # Plain tuples, handed on as they are: most rows of the pass-through benchmark's.
        for row in OUTPUT.tuples(batch):
            if row[_TOPIC] != COUNTS_TOPIC:
                output.send_row(row)
            else:
                totals.add(row[_VALUE])
    # Every row is read: the operator's task has committed what these stamps are of.
    now_ms = time.time_ns() // 1_000_000
    if output.opened:
        output.reports_refusals = False  # its dead letters are counted below, with the rest
        output.commit()
        _add(totals.records, output.records)
        _add(totals.dead_letters, output.dead_letters)
    return totals.written(output.partition, output.batch_id, now_ms, skipped=output.skipped)


def _newest(into: dict[str, int], times: dict[str, int]) -> None:
    for name, ms in times.items():
        into[name] = max(into.get(name, ms), int(ms))


def _add(totals: dict[str, int], counts: dict[str, int]) -> None:
    for name, n in counts.items():
        totals[name] = totals.get(name, 0) + int(n)
