"""One task of a long batch: its lease read and joined in sub-batches, each committed.

The task takes its transactional id over (fencing any attempt before it) and reads its last
marker. If an earlier attempt of this long batch committed sub-batches, it replays them
first, each over the ranges and with the clock its marker recorded, writing nothing and
checking it read what the marker says; state as of the long batch's start is the caller's
(the state store's, in Spark). Then it reads on from where they stopped: every commit
interval it hands what arrived (at most ``max_records_per_batch`` of it:
:mod:`daemon.continuous.arrivals`), packed by bucket as the source packs a micro-batch, to the
operators' calls (:mod:`daemon.continuous.operators`: one, or a chain's), wakes the buckets
due, and commits the sub-batch's output with its marker. While a partition has not been
read to where it ended when it was assigned (a backlog), a sub-batch takes only what comes
before every record that partition may still bring, as a micro-batch planned from every
partition's offsets would (:meth:`Arrivals.take`): the consumer fetches partitions in its
own order. While more than a sub-batch waits so, the other partitions are not fetched. A
sub-batch with nothing read and nothing due commits nothing. It stops taking records when
the lease's time is up, or earlier when ``daemon run`` stops or when the state it holds has
passed the lease's ``held_state_budget`` (:attr:`LeaseOperators.held_bytes`): each ends the long
batch the same way, after a committed sub-batch, so that the state written is that of every
sub-batch committed and the next long batch reads on from where they stopped. What it
committed reaches the daemon's metrics as it goes (:mod:`daemon.continuous.progress`).

A bootstrap (a new pipeline reading its bootstrapped tables to the ends they had at its start
before anything else, docs/semantics.md) narrows what the task reads: only those partitions,
none past its end, until each reached it; then every partition from where it is. A long
batch that ends first leaves the rest of it to the next (:class:`LongBatchRun`).
"""

from __future__ import annotations

import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from daemon.continuous.arrivals import Arrivals
from daemon.continuous.lease import Lease, Positions
from daemon.continuous.operators import LeaseOperators
from daemon.continuous.progress import Progress
from daemon.errors import CheckpointDivergedError
from daemon.kafka import connect
from daemon.kafka.clients import raise_unless_transient
from daemon.model.sizes import in_words
from daemon.model.wire import (
    SOURCE,
    partition_name,
    range_name,
    split_partition_name,
    split_range_name,
    unpack,
)
from daemon.sink import markers
from daemon.sink.markers import Marker
from daemon.sink.spec import OutputSpec
from daemon.sink.sub_batches import SubBatchProducer, sub_batch_output
from daemon.source.planning import KafkaRange
from daemon.source.reading import pack_messages, read_range
from daemon.source.spec import SourceSpec

_CONSUME_MAX = 10_000
"""Records one consume call may return."""
BACKLOG_IDLE_MS = 2_000
"""How long a partition behind its backlog's end may hold the others back without moving.

One whose position stays put is then taken as read to its end: an open transaction of its
producer holds a ``read_committed`` reader back until it ends (or times out), and the others
must not wait for that."""


def wall_ms() -> int:
    """The wall clock, in milliseconds: a sub-batch's processing time."""
    return time.time_ns() // 1_000_000


def _topic_partitions(names: Iterable[str], at: Mapping[str, int] | None = None) -> list[Any]:
    """The client's partitions of ``names``, each at its offset in ``at`` if given."""
    # Late: confluent_kafka loads with the first client (daemon.model.constants says why).
    from confluent_kafka import TopicPartition

    if at is None:
        return [TopicPartition(*split_partition_name(name)) for name in names]
    return [TopicPartition(*split_partition_name(name), at[name]) for name in names]


@dataclass
class LongBatchRun:
    """What one attempt of a lease did."""

    replayed: int = 0
    """Sub-batches an earlier attempt had committed, replayed with output suppressed."""
    committed: int = 0
    """Sub-batches this attempt committed."""
    ends: dict[str, int] = field(default_factory=dict)
    """Where each partition was read up to: the next long batch's start."""
    ended_early: str = ""
    """Why the long batch ended before its time was up, as a line ("": it did not, or a stop
    ended it)."""
    bootstrap: dict[str, int] = field(default_factory=dict)
    """The bootstrap's ends not reached yet, by partition name (``{}``: it is done)."""


class LongBatchTask:
    """One attempt of one lease (see the module docstring).

    Args:
        operators: the operators, with the state as of the long batch's start held for it.
        source: what the pipeline reads.
        output: where it writes.
        lease: the task's share of the long batch.
        query_id: the streaming query's id: the marker group's name has it.
        clock: the wall clock in milliseconds.
        after_commit: called with each sub-batch's number once it committed (tests stop an
            attempt there, as a crash would).
        bootstrap: the ends a bootstrap has yet to reach, by partition name (``{}``: none).
    """

    def __init__(
        self,
        operators: LeaseOperators,
        source: SourceSpec,
        output: OutputSpec,
        lease: Lease,
        query_id: str,
        *,
        clock: Callable[[], int] = wall_ms,
        after_commit: Callable[[int], None] | None = None,
        bootstrap: dict[str, int] | None = None,
    ) -> None:
        self.operators = operators
        self.source = source
        self.output = output
        self.lease = lease
        self.query_id = query_id
        self.clock = clock
        self.after_commit = after_commit or (lambda sub: None)
        self.positions = Positions(dict(lease.starts))
        ranks: dict[str, int] = {}  # the inputs come in the joiner's role order
        for rank, spec in enumerate(source.inputs):
            ranks.setdefault(spec.topic, rank)
        answered = operators.answered_input
        stream = None if answered is None else source.inputs[answered].topic
        self.arrivals = Arrivals(ranks, source.max_records_per_batch, stream)
        self.mine = lease.owns(source.state_buckets)
        """The state buckets this lease joins: each lease reads every partition."""
        self.bootstrap = dict(bootstrap or {})
        """The bootstrap's ends not reached yet: while there are any, only they are read."""
        self.backlog: dict[str, int | None] = {}
        """The partitions not yet read to where they ended when they were assigned, and that
        end (None: not known yet): a sub-batch takes nothing they may still precede
        (:class:`Arrivals`)."""
        self._moved: dict[str, tuple[int, int]] = {}
        """Each backlog partition's position when it last moved, and when."""
        self._held_back = False
        """Whether the last sub-batch left records waiting for a backlog partition."""
        self._paused: set[str] = set()
        """The partitions not fetched while records wait for a backlog partition."""

    def run(self) -> LongBatchRun:
        """Replay what an earlier attempt committed, then read and commit until time is up.

        Raises:
            CheckpointDivergedError: the task's marker is of a later batch, or a micro-batch's
                (the checkpoint lost what the output holds), or the long batch's sub-batch
                markers are gone.
        """
        lease, run = self.lease, LongBatchRun()
        producer = SubBatchProducer(self.output, lease.task, lease.batch, self.query_id)
        last = producer.take_over()
        if last is not None and last.batch >= lease.batch:
            committed = self._committed(last)
            for _, marker in committed:
                self._replay(producer, marker)
                run.replayed += 1
            producer.resume(committed)
        self._bootstrapped()
        progress = Progress(self.output, lease.batch, lease.task, self.clock)
        # A replay counts nothing but that it was one: its output was counted the first time.
        progress.committed(self.operators.counts(), Counter())
        consumer = connect.consumer(self.source.reader_conf())
        try:
            self._assign(consumer)
            while self.clock() < lease.until_ms and not lease.stopped():
                # Between sub-batches, as a stop: what the long batch writes is then the state
                # of every sub-batch it committed, and where they stopped.
                if lease.over_budget(self.operators.held_bytes):
                    run.ended_early = self._ended_early()
                    break
                progress.report(self.positions.at)
                # Records left waiting by a capped sub-batch go on at once; those held back
                # for a partition behind its backlog wait for what the next poll brings.
                wait = 0 if self.arrivals and not self._held_back else lease.commit_interval_ms
                self.arrivals.add(self._admitted(self._poll(consumer, self.clock() + wait)))
                now = self.clock()
                behind = self._behind(consumer, now)
                messages = self.arrivals.take(behind)
                self._held_back = bool(behind) and bool(self.arrivals)
                self._pace(consumer, behind)
                reached = self._reached(consumer, messages)
                ranges = self.positions.ranges(reached)
                # While bootstrapping, a range of transaction markers alone is committed too:
                # the bootstrap ends once its partitions are covered to their ends.
                if not messages and not self.operators.due(now) and not (self.bootstrap and ranges):
                    continue
                read = self._sub_batch(producer, self._packs(messages, ranges), now, ranges)
                self.after_commit(producer.sub - 1)
                run.committed += 1
                progress.committed(self.operators.counts(), read)
                if self._bootstrapped():
                    self._assign(consumer)  # the rest of it, or every partition once it is done
        finally:
            consumer.close()
        progress.report(self.positions.at, last=True, ended_early=run.ended_early)
        run.ends = dict(self.positions.at)
        run.bootstrap = dict(self.bootstrap)
        return run

    def _bootstrapped(self) -> bool:
        """Drop the bootstrap's partitions read to their ends; whether there were any."""
        at, before = self.positions.at, len(self.bootstrap)
        self.bootstrap = {name: end for name, end in self.bootstrap.items() if at[name] < end}
        return len(self.bootstrap) < before

    def _reading(self) -> dict[str, int]:
        """The partitions read now, from where: the bootstrap's alone while it goes on."""
        at = self.positions.at
        return {name: at[name] for name in self.bootstrap} if self.bootstrap else dict(at)

    def _admitted(self, messages: list[Any]) -> list[Any]:
        """``messages`` but those past the bootstrap's ends (read again once it is done)."""
        ends = self.bootstrap
        if not ends:
            return messages
        return [m for m in messages if m.offset() < ends[partition_name(m.topic(), m.partition())]]

    def _ended_early(self) -> str:
        """The line that says why the long batch ends before its time: its held state."""
        lease = self.lease
        which = f" (lease {lease.index + 1} of {lease.of})" if lease.of > 1 else ""
        return (
            f"long batch {lease.batch}{which} ended early: held state "
            f"{in_words(self.operators.held_bytes)} passed the budget "
            f"{in_words(lease.held_state_budget)}"
        )

    def _committed(self, last: Marker) -> list[tuple[int, Marker]]:
        """The sub-batches an earlier attempt of this long batch committed, with their places."""
        lease, spec = self.lease, self.output
        if last.batch > lease.batch or last.sub is None:
            what = "micro-batch" if last.sub is None else "long batch"
            raise CheckpointDivergedError(
                f"pipeline {spec.pipeline!r}: task {lease.task} runs long batch {lease.batch}, "
                f"but its marker says {what} {last.batch} was written to Kafka already: the "
                'checkpoint lost what the output holds; see docs/operations.md, "When the '
                'checkpoint and the output disagree"'
            )
        return markers.sub_batches(
            spec.client_conf, spec.id_prefix, spec.pipeline, self.query_id, lease.task, last
        )

    def _replay(self, producer: SubBatchProducer, marker: Marker) -> None:
        """A committed sub-batch again: its ranges read, with its clock, writing nothing."""
        share = marker.share
        assert share is not None and share.time_ms is not None  # noqa: S101 - a sub-batch's
        packs: list[pa.RecordBatch] = []
        ranges = share.by_partition()
        for name, (start, end) in ranges.items():
            topic, partition = split_partition_name(name)
            packs.extend(read_range(self.source, KafkaRange(topic, partition, start, end)))
        self._sub_batch(producer, packs, share.time_ms, ranges, marker)

    def _sub_batch(
        self,
        producer: SubBatchProducer,
        packs: Iterable[pa.RecordBatch],
        now: int,
        ranges: dict[str, tuple[int, int]],
        replayed: Marker | None = None,
    ) -> Counter[str]:
        """Join one sub-batch's packs at processing time ``now`` and wake its due buckets.

        Then commit its output with its marker, or, ``replayed`` (its marker), check that it
        read what the marker says, writing nothing. The records of its buckets it read, by
        topic: each lease counts its own, so that the pipeline's add up.
        """
        output = sub_batch_output(self.output, producer, replayed)
        output.timer_ms = now  # recorded whether a timer fires or not: TTL reads it too
        for name, (start, end) in ranges.items():
            output.covered.add(range_name(*split_partition_name(name), start, end))
        self.operators.write_to(output)
        by_bucket: dict[int, list[Any]] = defaultdict(list)
        read: Counter[str] = Counter()
        mine = self.mine
        for batch in packs:
            for row in SOURCE.rows(batch):
                if row.bucket in mine:
                    by_bucket[row.bucket].append(row)
                    topic, _ = split_partition_name(split_range_name(row.read_range)[0])
                    read[topic] += unpack(row.records).num_rows
        self.operators.sub_batch(by_bucket, now)
        output.commit()
        self.positions.cover(output.covered)
        return read

    def _assign(self, consumer: Any) -> None:
        if self._paused:  # a new assignment reads every partition it names
            consumer.resume(_topic_partitions(self._paused))
        reading = self._reading()
        consumer.assign(_topic_partitions(reading, at=reading))
        self.arrivals.clear()  # read again from where each partition is
        self.backlog, self._moved, self._paused = dict.fromkeys(reading), {}, set()

    def _behind(self, consumer: Any, now: int) -> frozenset[str]:
        """The partitions not yet read to where they ended when they were assigned.

        That end is the high watermark of the first Fetch response for the partition (the
        consumer keeps it; Tansu's ListOffsets under-reports it), and a partition without one
        yet is behind. A partition leaves once its position reaches its end, or once it has
        not moved for :data:`BACKLOG_IDLE_MS`.
        """
        if not self.backlog:
            return frozenset()
        names = list(self.backlog)
        parts = _topic_partitions(names)
        for name, part, tp in zip(names, parts, consumer.position(parts), strict=True):
            end = self.backlog[name]
            if end is None:
                _, high = consumer.get_watermark_offsets(part, cached=True)
                end = self.backlog[name] = high if high >= 0 else None
            at = max(tp.offset, self.positions.at[name])  # none yet: where it starts
            moved = self._moved.get(name)
            if moved is None or moved[0] != at:
                self._moved[name] = moved = (at, now)
            if (end is not None and at >= end) or now - moved[1] > BACKLOG_IDLE_MS:
                del self.backlog[name]
        return frozenset(self.backlog)

    def _pace(self, consumer: Any, behind: frozenset[str]) -> None:
        """Fetch only the backlog partitions while more than a sub-batch waits for them.

        What the others bring would only wait in the worker's memory; they are fetched again
        once nothing is held back, from where their reader stands.
        """
        full = self._held_back and len(self.arrivals) > self.source.max_records_per_batch
        paused = set(self._reading()) - behind if full else set()
        if paused == self._paused:
            return
        resumed, self._paused = self._paused - paused, paused
        if resumed:
            consumer.resume(_topic_partitions(resumed))
        if paused:
            consumer.pause(_topic_partitions(paused))

    def _poll(self, consumer: Any, until_ms: int) -> list[Any]:
        """What arrives before ``until_ms``."""
        # Late: confluent_kafka loads with the first client (daemon.model.constants says why).
        from confluent_kafka import TopicPartition

        got: list[Any] = []
        while (left := until_ms - self.clock()) > 0:
            for message in consumer.consume(num_messages=_CONSUME_MAX, timeout=left / 1000):
                error = message.error()
                if error is None:
                    got.append(message)
                    continue
                tp = TopicPartition(message.topic() or "", message.partition() or 0)
                raise_unless_transient(error, tp, message.offset() or 0)
        return got

    def _reached(self, consumer: Any, messages: list[Any]) -> dict[str, int]:
        """Where each partition is read up to now (transaction markers move it too)."""
        names = list(self._reading())
        parts = _topic_partitions(names)
        reached = {
            name: max(self.positions.at[name], tp.offset)
            for name, tp in zip(names, consumer.position(parts), strict=True)
        }
        for message in messages:
            name = partition_name(message.topic(), message.partition())
            reached[name] = max(reached[name], message.offset() + 1)
        # Not past what still waits for a sub-batch, nor past a bootstrap's end.
        for name, waiting in self.arrivals.first_waiting().items():
            reached[name] = min(reached[name], waiting)
        for name, end in self.bootstrap.items():
            reached[name] = min(reached[name], end)
        return reached

    def _packs(
        self, messages: list[Any], ranges: dict[str, tuple[int, int]]
    ) -> list[pa.RecordBatch]:
        """The sub-batch's messages packed by bucket, a partition at a time."""
        by_partition: dict[str, list[Any]] = defaultdict(list)
        for message in messages:
            by_partition[partition_name(message.topic(), message.partition())].append(message)
        packs = []
        for name, found in by_partition.items():
            topic, partition = split_partition_name(name)
            read = range_name(topic, partition, *ranges[name])
            packs.append(pack_messages(self.source, topic, partition, found, read))
        return packs
