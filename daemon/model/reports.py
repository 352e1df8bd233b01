"""What the stages report to the daemon: one typed report per kind, and its bytes on the socket.

A pipeline's stages run in Spark's processes, not in the daemon's, where the Prometheus
counters and the log live. So what the daemon must hear of them travels as one small JSON
datagram per report to the daemon's unix socket (:mod:`daemon.report_socket`). This module
declares the reports, as :mod:`daemon.model.wire` declares the rows between the stages:

- :class:`BatchCounts`: what a committed micro-batch wrote, from its counting on the driver
  (:mod:`daemon.sink.spark_sink`), and the dead letters of records the broker refused, from a
  task that wrote its output again (:mod:`daemon.sink.task_output`); in continuous mode, what
  a long batch's task committed since its last report, about once a second
  (:mod:`daemon.continuous.progress`).
- :class:`MissingOffsetsResumed`: where the source went on past offsets the broker no longer
  has, from the planner (:mod:`daemon.source.missing_offsets`).

Each report names its :attr:`kind` on the wire, ``{"kind": "batch-counts", "pipeline":
"tweet-views", "batch": 7, ...}``, and the daemon hands it to the handler of that kind. A
new kind is a class here with its ``kind``, :meth:`fields` and ``of_fields``, added to
:data:`KINDS`, and a handler in the daemon.

Example:
    >>> report = BatchCounts("tweet-views", 7, records={"tweet-views": 40})
    >>> decode(encode(report)) == report
    True
    >>> encode(report)[:44]
    b'{"kind": "batch-counts", "pipeline": "tweet-'
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from daemon.model.wire import partition_name

if TYPE_CHECKING:
    from daemon.model.latency import Tally  # numpy's module: the planner need not load it


@dataclass(frozen=True)
class BatchCounts:
    """What a micro-batch wrote, counted once every task of it committed.

    The counts of records written per topic, and of dead letters per reason, are known
    exactly only by the tasks that wrote them, which hand them on in their counts rows;
    they are added up on the driver (or, counted through the Spark sink, in its ``commit()``,
    in a Python worker process of its own).
    """

    kind: ClassVar[str] = "batch-counts"
    pipeline: str
    batch: int
    records: dict[str, int] = field(default_factory=dict)
    """Records written, by topic (the dead-letter topic's too)."""
    dead_letters: dict[str, int] = field(default_factory=dict)
    """Dead letters written, by reason (their ``enrichd.error.class`` header)."""
    joiner: dict[str, int] = field(default_factory=dict)
    """What the joiner counted with ``ctx.count``."""
    latency: dict[str, Tally] = field(default_factory=dict)
    """The end-to-end latency histogram per output topic: counts per bucket and the sum in
    seconds (:mod:`daemon.model.latency`)."""
    event_time: dict[str, int] = field(default_factory=dict)
    """The newest event time read, per input."""
    state_cache: dict[str, int] = field(default_factory=dict)
    """Loads of stored buckets by the worker cache's outcome, ``hit`` or ``miss``."""
    failed_calls: int = 0
    """Joiner calls that failed; their records went to the dead-letter topic (``JoinerFailed``)."""
    failures: list[str] = field(default_factory=list)
    """The lines of the first few of those failures."""
    replayed: int = 0
    """Tasks that replayed the batch (after a crash or a retry) and found by their marker
    that it had committed before: they wrote nothing again."""
    read: dict[str, int] = field(default_factory=dict)
    """A continuous pipeline's task: the records its sub-batches read, by input topic.
    A micro-batch's are known from Spark's progress report instead."""
    positions: dict[str, int] = field(default_factory=dict)
    """A continuous pipeline's task: where its committed sub-batches have read each input
    partition up to, by partition name; empty for a micro-batch."""
    sub_batches: int = 0
    """A continuous pipeline's task: its sub-batches since the last report that read records."""
    lease: int = 0
    """A continuous pipeline's task: the lease it runs (its grouping key)."""
    ended_early: str = ""
    """A continuous pipeline's task, in its long batch's last report: why the long batch
    ended before its time was up, as a line ("": it did not)."""

    def fields(self) -> dict[str, Any]:
        """The report's fields as JSON takes them."""
        return {
            "pipeline": self.pipeline,
            "batch": self.batch,
            "records": self.records,
            "dead_letters": self.dead_letters,
            "joiner": self.joiner,
            "latency": self.latency,
            "event_time": self.event_time,
            "state_cache": self.state_cache,
            "failed_calls": self.failed_calls,
            "failures": self.failures,
            "replayed": self.replayed,
            # A continuous task's only: a micro-batch's report stays as it was.
            **({"read": self.read} if self.read else {}),
            **({"positions": self.positions} if self.positions else {}),
            **({"sub_batches": self.sub_batches} if self.sub_batches else {}),
            **({"lease": self.lease} if self.lease else {}),
            **({"ended_early": self.ended_early} if self.ended_early else {}),
        }

    @classmethod
    def of_fields(cls, fields: Mapping[str, Any]) -> BatchCounts:
        """The report back from :meth:`fields` (a part left out counts nothing)."""
        return cls(
            str(fields["pipeline"]),
            int(fields["batch"]),
            dict(fields.get("records") or {}),
            dict(fields.get("dead_letters") or {}),
            dict(fields.get("joiner") or {}),
            {
                topic: (list(counts), float(total))
                for topic, (counts, total) in dict(fields.get("latency") or {}).items()
            },
            dict(fields.get("event_time") or {}),
            dict(fields.get("state_cache") or {}),
            int(fields.get("failed_calls") or 0),
            [str(line) for line in fields.get("failures") or []],
            int(fields.get("replayed") or 0),
            {str(topic): int(n) for topic, n in dict(fields.get("read") or {}).items()},
            {str(name): int(at) for name, at in dict(fields.get("positions") or {}).items()},
            int(fields.get("sub_batches") or 0),
            int(fields.get("lease") or 0),
            str(fields.get("ended_early") or ""),
        )

    @property
    def batch_name(self) -> str:
        """The batch as the daemon's lines name it: a long batch or a micro-batch.

        A continuous task's report says where its lease has read to; a micro-batch's does not.
        """
        kind = "long batch" if self.positions else "micro-batch"
        return f"{kind} {self.batch}"

    def replay_line(self) -> str | None:
        """The line that says tasks replayed the batch and found it committed (None: none)."""
        if not self.replayed:
            return None
        return (
            f"pipeline {self.pipeline}: {self.batch_name}: {self.replayed} replayed "
            f"task(s) found their batch committed (by its marker) and wrote nothing again"
        )

    def failure_line(self) -> str | None:
        """The line that says joiner calls of the batch failed, naming the first one."""
        if not self.failed_calls:
            return None
        first = self.failures[0] if self.failures else "(no line)"
        return (
            f"pipeline {self.pipeline}: {self.batch_name}: {self.failed_calls} joiner "
            f"call(s) failed; their records went to the dead-letter topic as JoinerFailed; "
            f"the first: {first}"
        )


def least_read(leases: Mapping[int, Mapping[str, int]]) -> dict[str, int]:
    """Where a continuous pipeline has read to, from what each of its leases reported.

    Per partition, the least any lease read, since each lease reads every partition.

    >>> least_read({0: {"t/0": 9, "t/1": 4}, 7: {"t/0": 5}})
    {'t/0': 5, 't/1': 0}
    """
    names = sorted(set().union(*leases.values())) if leases else []
    return {name: min(at.get(name, 0) for at in leases.values()) for name in names}


Cause = Literal["offsets", "recreated", "gone"]
"""How the planner knows an offset is missing: by the partition's earliest offset and log end
(``offsets``), by the topic's id, which changed (``recreated``), or because the partition no
longer exists (``gone``)."""


@dataclass(frozen=True)
class MissingOffset:
    """A partition that no longer has the offset a pipeline is to read next."""

    topic: str
    partition: int
    needed: int
    """The offset the pipeline is to read next."""
    earliest: int
    """The earliest offset the partition has (-1: it is gone)."""
    end: int
    """The partition's log end (its next offset; -1: it is gone)."""
    cause: Cause = "offsets"

    @property
    def name(self) -> str:
        """The partition's name in a plan's offsets."""
        return partition_name(self.topic, self.partition)

    @property
    def past_the_end(self) -> bool:
        """Whether the offset is not the topic's now: it was created again, or lies past the end."""
        return self.cause == "recreated" or self.needed > self.end

    def facts(self) -> str:
        """What is missing, in words: the partition, the offset needed, the earliest there."""
        where = f"input topic {self.topic!r} partition {self.partition}"
        if self.cause == "gone":
            return (
                f"{where} no longer exists (offset {self.needed} was to be read next): the "
                "topic was deleted and created again with fewer partitions"
            )
        if self.cause == "recreated":
            return (
                f"{where} no longer has offset {self.needed}: the topic was deleted and created "
                f"again (its topic id changed), and the new one's earliest offset is "
                f"{self.earliest} and its log ends at {self.end}"
            )
        if self.past_the_end:
            return (
                f"{where} no longer has offset {self.needed}: the earliest it has is "
                f"{self.earliest} and its log ends at {self.end} (was the topic deleted and "
                "created again?)"
            )
        return (
            f"{where} no longer has offset {self.needed}: the earliest it has is "
            f"{self.earliest} (retention or DeleteRecords removed the records before it)"
        )


@dataclass(frozen=True)
class Resumed:
    """Where the pipeline goes on in a partition that lacked its offset, and what it skips."""

    missing: MissingOffset
    policy: str
    at: int
    """The offset the pipeline reads next instead."""
    skipped: int
    """How many offsets it will never read, as far as the offsets tell."""

    def warning(self, pipeline: str) -> str:
        """The WARN line: the facts, the policy, where it goes on and what it skipped."""
        if self.missing.cause == "gone":
            return (
                f"pipeline {pipeline!r}: {self.missing.facts()}; on_missing_offsets = "
                f"{self.policy!r}: reading on without it"
            )
        return (
            f"pipeline {pipeline!r}: {self.missing.facts()}; on_missing_offsets = "
            f"{self.policy!r}: reading on from offset {self.at}, {self.skipped} offsets skipped"
        )


@dataclass(frozen=True)
class MissingOffsetsResumed:
    """The source went on past offsets the broker no longer has (``on_missing_offsets``).

    The planner that finds them runs in Spark's Python worker on the driver; the daemon logs
    one WARN line per partition and counts the skipped offsets.
    """

    kind: ClassVar[str] = "missing-offsets-resumed"
    pipeline: str
    resumed: tuple[Resumed, ...]

    def fields(self) -> dict[str, Any]:
        """The report's fields as JSON takes them."""
        return {
            "pipeline": self.pipeline,
            "resumed": [
                {
                    "topic": item.missing.topic,
                    "partition": item.missing.partition,
                    "needed": item.missing.needed,
                    "earliest": item.missing.earliest,
                    "end": item.missing.end,
                    "cause": item.missing.cause,
                    "policy": item.policy,
                    "at": item.at,
                    "skipped": item.skipped,
                }
                for item in self.resumed
            ],
        }

    @classmethod
    def of_fields(cls, fields: Mapping[str, Any]) -> MissingOffsetsResumed:
        """The report back from :meth:`fields`."""
        resumed = []
        for item in fields["resumed"]:
            missing = MissingOffset(
                str(item["topic"]),
                int(item["partition"]),
                int(item["needed"]),
                int(item["earliest"]),
                int(item["end"]),
                _CAUSES.get(str(item.get("cause")), "offsets"),
            )
            resumed.append(
                Resumed(missing, str(item["policy"]), int(item["at"]), int(item["skipped"]))
            )
        return cls(str(fields["pipeline"]), tuple(resumed))


_CAUSES: dict[str, Cause] = {"offsets": "offsets", "recreated": "recreated", "gone": "gone"}
"""Each :data:`Cause` by its name on the wire (a report without one is by offsets)."""

Report = BatchCounts | MissingOffsetsResumed
"""Any report the daemon's socket carries."""

KINDS: dict[str, type[BatchCounts] | type[MissingOffsetsResumed]] = {
    kind.kind: kind for kind in (BatchCounts, MissingOffsetsResumed)
}
"""Each report class by the kind it names on the wire."""


def encode(report: Report) -> bytes:
    """The datagram of ``report``: its kind and its fields, as JSON."""
    return json.dumps({"kind": report.kind, **report.fields()}).encode()


def decode(data: bytes) -> Report:
    """The report a datagram of :func:`encode` carries.

    Raises:
        ValueError: not a report of a known kind (a missing field raises KeyError).
    """
    message = json.loads(data)
    kind = KINDS.get(str(message.get("kind"))) if isinstance(message, dict) else None
    if kind is None:
        raise ValueError(f"not a report of a known kind: {str(data[:80])}")
    return kind.of_fields(message)
