"""A Spark streaming sink that writes rows to Kafka exactly once, and reports each batch's counts.

A pipeline's joiner operator writes its records to Kafka itself
(:class:`daemon.sink.task_output.TaskOutput`); what reaches this sink from it is one counts
row per operator call (:data:`daemon.model.wire.COUNTS_TOPIC`): what the call wrote and
what the joiner counted. The sink adds them up per task, and once every task of the
micro-batch succeeded, ``commit()`` relays the totals to the daemon's metrics. The counts
rows also carry the source timestamps of the records written, which the sink's task turns
into the end-to-end latency histogram once it has read them all, which is just after the
operator's task committed (:mod:`daemon.model.latency`), and the newest event time of each
input. Other rows (the pass-through benchmark's) are written by the sink's own
:class:`TaskOutput`, in the same exactly-once way.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field

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
    failed_calls: int = 0
    """Joiner calls that failed in the operator tasks whose counts it read."""
    failures: list[str] = field(default_factory=list)
    """The lines of the first few of those failures."""


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
        so the counts are of committed output only (a skipped replay adds nothing). First,
        the buckets' timers go into the checkpoint's due-time map, which the planner reads
        before the next batch (:mod:`daemon.checkpoint.due_times`).
        """
        if self.spec.checkpoint is not None:
            keep_due_times(self.spec.checkpoint, messages, batchId)
        if self.spec.metrics_address is None:
            return
        try:
            records: dict[str, int] = {}
            dead_letters: dict[str, int] = {}
            joiner: dict[str, int] = {}
            latencies: dict[str, latency.Tally] = {}
            event_time: dict[str, int] = {}
            failed_calls = 0
            failures: list[str] = []
            for message in messages:
                if isinstance(message, Written):
                    _add(records, message.records)
                    _add(dead_letters, message.dead_letters)
                    _add(joiner, getattr(message, "joiner_counts", {}))
                    latency.add(latencies, getattr(message, "tallies", {}))
                    _newest(event_time, getattr(message, "event_time", {}))
                    failed_calls += getattr(message, "failed_calls", 0)
                    failures += getattr(message, "failures", [])
            send(
                self.spec.metrics_address,
                BatchCounts(
                    self.spec.pipeline,
                    batchId,
                    records,
                    dead_letters,
                    joiner,
                    latency=latencies,
                    event_time=event_time,
                    failed_calls=failed_calls,
                    failures=failures[:FAILURES_REPORTED],
                ),
            )
        except Exception:  # noqa: S110 - metrics must never fail a committed batch
            pass

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        """Nothing to do: an uncommitted transaction is aborted when its id is next used."""


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
    counts: dict[str, dict[str, int]] = {"records": {}, "dead_letters": {}, "joiner": {}}
    stamps: dict[str, dict[int, int]] = {}
    event_time: dict[str, int] = {}
    timers: dict[int, int | None] = {}
    failed_calls = 0
    failures: list[str] = []
    for batch in batches:
        # Plain tuples, handed on as they are: most rows of the pass-through benchmark's.
        for row in OUTPUT.tuples(batch):
            if row[_TOPIC] != COUNTS_TOPIC:
                output.send_row(row)
                continue
            added = counts_of(row[_VALUE])
            for topic, pairs in added.get("stamps", {}).items():
                latency.merge(stamps.setdefault(topic, {}), pairs)
            _newest(event_time, added.get("event_time", {}))
            # In call order: a bucket's later call (its timer after its data) wins.
            timers.update((int(b), ms) for b, ms in added.get("timers", {}).items())
            _add(counts["records"], added.get("records", {}))
            _add(counts["dead_letters"], added.get("dead_letters", {}))
            _add(counts["joiner"], added.get("joiner", {}))
            failed_calls += added.get("failed_calls", 0)
            failures += added.get("failures", [])[: FAILURES_REPORTED - len(failures)]
    # Every row is read: the operator's task has committed what these stamps are of.
    now_ms = time.time_ns() // 1_000_000
    tallies = {topic: latency.tally(found, now_ms) for topic, found in stamps.items()}
    if output.opened:
        output.reports_refusals = False  # its dead letters are counted below, with the rest
        output.commit()
        _add(counts["records"], output.records)
        _add(counts["dead_letters"], output.dead_letters)
    return Written(
        output.partition,
        output.batch_id,
        counts["records"],
        skipped=output.skipped,
        dead_letters=counts["dead_letters"],
        joiner_counts=counts["joiner"],
        tallies=tallies,
        event_time=event_time,
        timers=timers,
        failed_calls=failed_calls,
        failures=failures,
    )


def _newest(into: dict[str, int], times: dict[str, int]) -> None:
    for name, ms in times.items():
        into[name] = max(into.get(name, ms), int(ms))


def _add(totals: dict[str, int], counts: dict[str, int]) -> None:
    for name, n in counts.items():
        totals[name] = totals.get(name, 0) + int(n)
