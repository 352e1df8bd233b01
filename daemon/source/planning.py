"""The driver side of the Kafka source: each micro-batch planned as offset ranges.

How it works: the planner plans each micro-batch as a range of offsets per partition,
``{"topic/partition": offset}`` (and a :data:`~daemon.model.wire.CLOCK` for joiners that
wake quiet keys, a :data:`~daemon.model.wire.BOOTSTRAP` while a table input bootstraps),
which Spark stores in its checkpoint; a restart resumes from the last committed range, and no
consumer group is involved. The end of each partition comes from the high watermark that the
broker returns with every Fetch response (a ListOffsets request under-reports it on some
brokers), read from a probe consumer that follows the log end.

A micro-batch capped at ``max_records_per_batch`` admits the earliest records across all
partitions (:func:`~daemon.source.admission.admit_earliest`), which needs their timestamps:
the planner reads those *heads* of the records ahead (:class:`~daemon.source.admission.Heads`),
plus end-of-input markers just past the cap, which ride along free. The ranges are dealt out
to as many Spark tasks as the cluster has cores (:func:`deal`), which read them on executors
(:mod:`daemon.source.reading`): a task costs tens of milliseconds of Spark's own beside its
reading, and on two cores four tasks (two topics of two partitions) ran in two waves, so a
small micro-batch spent twice as long in that stage.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows

from daemon.checkpoint import due_times
from daemon.checkpoint.batch_logs import last_committed
from daemon.kafka import connect
from daemon.kafka.admin import describe_topics
from daemon.kafka.clients import log_starts, read_partition
from daemon.model.reports import MissingOffset, Resumed
from daemon.model.wire import (
    BOOTSTRAP,
    CLOCK,
    RESETS,
    TOPIC_IDS,
    Offsets,
    is_end_of_input,
    is_partition_name,
    partition_name,
    split_partition_name,
)
from daemon.source.admission import Heads, admit_earliest
from daemon.source.long_poll import long_poll
from daemon.source.missing_offsets import failure, find_missing, report, resume
from daemon.source.spec import SourceSpec

_MARKER_LOOKAHEAD = 1_000
"""Records read past a capped batch's budget to find end-of-input markers that follow it."""
_PROBE_QUEUE = {"queued.min.messages": 100_000, "queued.max.messages.kbytes": 1024}
"""How much the probe's fetcher queues before it stops fetching: messages per partition,
kilobytes in all (librdkafka's defaults are 100,000 messages and 64 MB)."""
_PROBE_DRAIN = 100_000
"""Messages the probe takes off its queue at most per call."""
_EARLIEST_EVERY_S = 10.0
"""How often a partition's earliest offset is asked for by ListOffsets while no Fetch response
has told it (:meth:`SourcePlanner._earliest`): a round trip per partition and batch."""
_PROBE_WAIT_S = 0.05
"""How long a plan waits for a Fetch response when the probe's watermarks may be old."""


@dataclass(frozen=True)
class KafkaRange:
    """One Kafka partition's offset range ``[start, end)`` of a micro-batch."""

    topic: str
    partition: int
    start: int
    end: int


@dataclass(frozen=True)
class KafkaPartition(InputPartition):
    """What one Spark task reads of a micro-batch: one or more Kafka partitions' ranges."""

    ranges: tuple[KafkaRange, ...]


class SourcePlanner:
    """Plans a query's micro-batches as offset ranges, on the driver (see the module docstring).

    Spark's stream reader hands its driver-side calls to it (:mod:`daemon.source.spark_source`).
    """

    def __init__(self, spec: SourceSpec) -> None:
        self.spec = spec
        self._probe: Any = None
        self._probe_assigned: set[str] = set()
        self._admin: Any = None
        self._topic_ids: dict[str, str] = {}
        """The input topics' ids, as the cluster described them last (:meth:`_partitions`);
        none for a broker that gives no topic ids."""
        self._reader: Any = None
        self._head_cache: dict[str, Heads] = {}
        self._read_ahead: threading.Thread | None = None
        """Reads the next plan's heads while Spark runs the batch just planned; joined before
        the cache or the reader is used again."""
        self._listed_ends: set[str] = set()
        """The partitions whose last log end came from ListOffsets, not a Fetch response: it
        may under-report, so it is not taken as proof that an offset lies past the end."""
        self._earliest_asked: dict[str, tuple[int, float]] = {}
        """Each partition's earliest offset, and when it was asked for (:meth:`_earliest`)."""
        self._initial: Offsets | None = None
        """What :meth:`initial_offsets` answered."""
        self._last_plan: Offsets | None = None
        """The plan :meth:`latest_offsets` made last; any other batch Spark asks to read was
        planned before (by an earlier run) and is checked again (:meth:`partitions`)."""

    def _partitions(self) -> list[tuple[str, int]]:
        if self._probe is None:
            self._probe = connect.consumer(
                self.spec.consumer_conf(),
                {
                    "fetch.wait.max.ms": 100,
                    **_PROBE_QUEUE,
                    # After its queue was full, fetch again soon after it is drained (the
                    # default waits a second).
                    "fetch.queue.backoff.ms": 10,
                    "max.partition.fetch.bytes": 65536,
                },
            )
        if self._admin is None:
            self._admin = connect.admin(self.spec.client_conf)
        # Only the inputs are described (a whole cluster's metadata is not needed), with
        # their ids, by which a topic created again is told from the one a plan read.
        described = describe_topics(self._admin, sorted({spec.topic for spec in self.spec.inputs}))
        found: list[tuple[str, int]] = []
        for spec in self.spec.inputs:
            topic = described.get(spec.topic)
            if topic is None:
                raise RuntimeError(f"input topic {spec.topic!r} does not exist")
            found.extend((spec.topic, p) for p in topic.partitions)
        self._topic_ids = {
            name: facts.topic_id
            for name, facts in sorted(described.items())
            if facts is not None and facts.topic_id is not None
        }
        return found

    def initial_offsets(self) -> Offsets:
        """Start every partition at its earliest offset, as Kafka's ``earliest`` reset does.

        Spark asks only when the query has no checkpoint yet. A seeded checkpoint starts where
        its seed says (``spec.start``); a seed's offset the broker no longer has (below the
        earliest offset still there, past the log end, of a topic created again since, of a
        partition gone) is handled as ``on_missing_offsets`` says, as a batch's start is
        (:meth:`_resets`). The earliest offset is the log start of a Fetch response, not
        ListOffsets' answer, which on some brokers lies past the first records
        (:func:`log_starts`). With bootstrapped inputs, the ends their partitions have now go
        along as the :data:`BOOTSTRAP` entry.

        Spark may ask more than once in a run: the first answer stands (and a seed's move
        past missing offsets is reported once).
        """
        if self._initial is None:
            self._initial = self._first_offsets()
        return dict(self._initial)

    def _first_offsets(self) -> Offsets:
        """:meth:`initial_offsets`, found."""
        lows = self._log_starts(self._partitions())
        offsets: Offsets = dict(lows)
        seed = self.spec.start
        if seed is not None:
            moved = self._resets(seed, self._log_ends(seed), earliest=lows)
            for name in lows:
                if name in seed:
                    offsets[name] = moved.get(name, int(seed[name]))
        targets = self._bootstrap_ends(offsets)
        if targets:
            offsets[BOOTSTRAP] = targets
        if self._topic_ids:
            offsets[TOPIC_IDS] = dict(self._topic_ids)
        return offsets

    def _log_starts(self, partitions: list[tuple[str, int]]) -> dict[str, int]:
        """Where every partition starts, from the log start offsets of Fetch responses."""
        return log_starts(self.spec.consumer_conf(), partitions)

    def _bootstrap_ends(self, start: Offsets) -> dict[str, int]:
        """The ends now of the bootstrapped inputs' partitions that hold records past ``start``."""
        topics = {spec.topic for spec in self.spec.inputs if spec.bootstrap}
        if not topics:
            return {}
        ends = self._log_ends(start)
        return {
            name: end
            for name, end in sorted(ends.items())
            if split_partition_name(name)[0] in topics and end > start.get(name, 0)
        }

    def _log_ends(self, start: Offsets) -> dict[str, int]:
        """The end of every partition, from the high watermarks of recent Fetch responses."""
        # Late: confluent_kafka loads with the first client (daemon.model.constants says why).
        from confluent_kafka import KafkaException, TopicPartition

        partitions = self._partitions()
        fresh = [
            TopicPartition(t, p, start.get(partition_name(t, p), 0))
            for t, p in partitions
            if partition_name(t, p) not in self._probe_assigned
        ]
        if fresh:
            self._probe.incremental_assign(fresh)
            self._probe_assigned.update(partition_name(tp.topic, tp.partition) for tp in fresh)
        ends: dict[str, int] = {}
        self._listed_ends = set()
        deadline = time.monotonic() + 2.0
        wait_s = _PROBE_WAIT_S if self._probe_may_have_paused() else 0.0
        while True:
            if wait_s:  # for a Fetch response, whose watermark is fresh
                self._probe.consume(num_messages=_PROBE_DRAIN, timeout=wait_s)
            missing = []
            for topic, partition in partitions:
                tp = TopicPartition(topic, partition)
                _, high = self._probe.get_watermark_offsets(tp, cached=True)
                if high >= 0:
                    ends[partition_name(topic, partition)] = high
                else:
                    missing.append(tp)
            if not missing:
                break
            wait_s = _PROBE_WAIT_S
            if time.monotonic() > deadline:
                for tp in missing:  # no Fetch answered yet: fall back to ListOffsets
                    _, high = self._probe.get_watermark_offsets(tp, timeout=10)
                    ends[partition_name(tp.topic, tp.partition)] = high
                    self._listed_ends.add(partition_name(tp.topic, tp.partition))
                break
        behind = [
            TopicPartition(*split_partition_name(name), end)
            for name, end in ends.items()
            if self._probe.position([TopicPartition(*split_partition_name(name))])[0].offset < end
        ]
        for tp in behind:  # the probe only needs watermarks, not the data in between
            try:
                self._probe.seek(tp)
            except KafkaException:
                pass  # not fetching yet; it will start from its assigned offset
        return ends

    def _probe_may_have_paused(self) -> bool:
        """Drain the probe's queue; whether its fetcher may have stopped since the last plan.

        The fetcher fetches only while its queue holds less than :data:`_PROBE_QUEUE`
        (messages per partition, bytes in all). A queue that got near that may have stopped
        fetching, and so holds old watermarks: the plan then waits for a new Fetch response.
        A queue that stayed well below kept fetching, so its watermarks are the latest
        responses', and the plan need not wait (:data:`_PROBE_WAIT_S` per batch, data or not).
        """
        drained = self._probe.consume(num_messages=_PROBE_DRAIN, timeout=0)
        per_partition = Counter((m.topic(), m.partition()) for m in drained)
        half_bytes = _PROBE_QUEUE["queued.max.messages.kbytes"] * 1024 // 2
        half_messages = _PROBE_QUEUE["queued.min.messages"] // 2
        return (
            len(drained) >= _PROBE_DRAIN  # more may be queued
            or sum(len(m) for m in drained) >= half_bytes
            or max(per_partition.values(), default=0) >= half_messages
        )

    def latest_offsets(self, start: Offsets, limit: ReadLimit) -> Offsets:
        """The end of the next micro-batch: the log ends, capped to the read limit.

        While the query bootstraps (``start`` has a :data:`BOOTSTRAP` entry), only the
        bootstrapped partitions move, and the entry goes on until they reach its ends. With
        the spec's ``wake_ms``, also the :data:`CLOCK`, when a timer is due
        (:meth:`_clock`). The partitions come in the order of
        their names, whatever order their ends were found in: Spark compares offsets as JSON
        text, and the same ends in another order made it run a batch that read nothing.
        """
        planned = self._plan(start, limit)
        # Spark would run no batch: wait for a record, and plan again (daemon.source.long_poll).
        if planned == start and self._probe_assigned and long_poll(self._probe, self.spec):
            planned = self._plan(start, limit)
        self._last_plan = planned
        return planned

    def _plan(self, start: Offsets, limit: ReadLimit) -> Offsets:
        """:meth:`latest_offsets`, made once without waiting."""
        targets = start.get(BOOTSTRAP)
        ends = self._log_ends(start)
        resets = self._resets(start, ends)
        begin = {**start, **resets}
        found = (
            self._bootstrapping(begin, targets, limit, ends)
            if targets
            else self._planned(begin, limit, ends)
        )
        planned: Offsets = dict(sorted(found.items()))
        if targets and any(planned.get(name, 0) < end for name, end in targets.items()):
            planned[BOOTSTRAP] = targets
        if resets:
            planned[RESETS] = resets
        if self.spec.wake_ms:
            clock = self._clock(start)
            if clock is not None:
                planned[CLOCK] = clock
        if self._topic_ids:
            planned[TOPIC_IDS] = dict(self._topic_ids)
        return planned

    def _clock(self, start: Offsets) -> int | None:
        """The plan's :data:`CLOCK`: the current ``wake_ms`` period when a timer is due.

        Otherwise the start's, so that a plan without records equals its start and Spark
        runs no batch. Whether one is due, the checkpoint's due-time map says, which the
        sink's commit wrote after the last batch (:mod:`daemon.checkpoint.due_times`); a map that
        is not known moves the clock every period.
        """
        now_ms = time.time_ns() // 1_000_000
        checkpoint = self.spec.checkpoint
        if checkpoint is None or due_times.clock_moves(
            due_times.read(checkpoint), last_committed(checkpoint), now_ms
        ):
            return now_ms // self.spec.wake_ms
        clock = start.get(CLOCK)
        return None if clock is None else int(clock)

    def _resets(
        self, start: Offsets, ends: dict[str, int], earliest: dict[str, int] | None = None
    ) -> dict[str, int]:
        """Where partitions go on whose ``start`` the broker no longer has (by the policy).

        A partition that is gone gets no entry: it is left out of the plan (:meth:`_lost`).
        ``earliest``: each partition's earliest offset, when known; else the probe's.

        Raises:
            MissingOffsetsError: one does, and the policy is ``fail``.
        """
        lost = self._lost(start, ends, earliest)
        skipped = {item.name for item in lost}
        names = [n for n in start if is_partition_name(n) and n in ends and n not in skipped]
        trusted = [name for name in ends if name not in self._listed_ends]
        lows = self._earliest(names) if earliest is None else earliest
        checked = {name: start[name] for name in names}
        missing = find_missing(checked, lows, ends, trusted_ends=trusted) + lost
        missing.sort(key=lambda item: item.name)
        return {item.missing.name: item.at for item in self._go_on(missing) if item.at >= 0}

    def _lost(
        self, start: Offsets, ends: dict[str, int], earliest: dict[str, int] | None = None
    ) -> list[MissingOffset]:
        """The partitions of ``start`` whose offsets are of no topic the cluster has now.

        A partition of an input topic that has no end is gone (the topic was created again
        with fewer partitions); one of a topic whose id differs from the one ``start`` names
        (:data:`TOPIC_IDS`) is of a topic created again, however many records it holds. On a
        broker without topic ids only the offsets tell (:func:`find_missing`).
        """
        inputs = {spec.topic for spec in self.spec.inputs}
        named, now = start.get(TOPIC_IDS) or {}, self._topic_ids
        changed = {
            topic
            for topic in inputs
            if named.get(topic) is not None and now.get(topic) not in (None, named[topic])
        }
        names = [n for n in start if is_partition_name(n) and split_partition_name(n)[0] in inputs]
        recreated = [n for n in names if n in ends and split_partition_name(n)[0] in changed]
        lows = self._earliest(recreated) if earliest is None else earliest
        lost = [
            MissingOffset(*split_partition_name(n), int(start[n]), lows[n], ends[n], "recreated")
            for n in recreated
        ]
        lost += [
            MissingOffset(*split_partition_name(n), int(start[n]), -1, -1, "gone")
            for n in names
            if n not in ends
        ]
        return lost

    def _go_on(self, missing: list[MissingOffset]) -> list[Resumed]:
        """Fail on the first of ``missing``, or go on past each and report it, by the policy."""
        if not missing:
            return []
        if self.spec.on_missing_offsets == "fail":
            raise failure(self.spec.pipeline, missing[0])
        resumed = [resume(item, self.spec.on_missing_offsets) for item in missing]
        report(self.spec.metrics_address, self.spec.pipeline, resumed)
        return resumed

    def _earliest(self, names: list[str]) -> dict[str, int]:
        """Each partition's earliest offset: the log start of the probe's Fetch responses.

        The probe fetches every partition all along, and each Fetch response carries the log
        start, right on every broker; ListOffsets(EARLIEST) can answer past the first records
        on the test broker (Tansu), which would fail a pipeline that lost nothing. Only a
        partition no Fetch has answered yet is asked by ListOffsets, at most every 10 s.
        """
        # Late: confluent_kafka loads with the first client (daemon.model.constants says why).
        from confluent_kafka import TopicPartition

        now = time.monotonic()
        found: dict[str, int] = {}
        for name in names:
            tp = TopicPartition(*split_partition_name(name))
            low, _ = self._probe.get_watermark_offsets(tp, cached=True)
            if low < 0:
                asked = self._earliest_asked.get(name)
                if asked is None or now - asked[1] >= _EARLIEST_EVERY_S:
                    asked = (self._probe.get_watermark_offsets(tp, timeout=10)[0], now)
                    self._earliest_asked[name] = asked
                low = asked[0]
            found[name] = low
        return found

    def _planned(self, start: Offsets, limit: ReadLimit, ends: dict[str, int]) -> dict[str, int]:
        planned = {name: max(start.get(name, 0), end) for name, end in ends.items()}
        return self._capped(start, planned, limit)

    def _bootstrapping(
        self, start: Offsets, targets: dict[str, int], limit: ReadLimit, ends: dict[str, int]
    ) -> dict[str, int]:
        """A bootstrap's plan: the bootstrapped partitions up to their ends at start, no other."""
        planned = {name: start.get(name, 0) for name in ends}
        for name, target in targets.items():
            planned[name] = max(start.get(name, 0), min(ends.get(name, target), target))
        return self._capped(start, planned, limit)

    def _capped(self, start: Offsets, planned: dict[str, int], limit: ReadLimit) -> dict[str, int]:
        """``planned`` cut to the read limit: its earliest records across partitions."""
        if isinstance(limit, ReadAllAvailable):
            return planned
        budget = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        if budget is None:
            return planned
        if sum(planned[n] - start.get(n, 0) for n in planned) <= budget:
            return planned
        self._await_read_ahead()
        capped = self._earliest_first(start, planned, budget)
        # Spark runs the batch before it plans the next one: read that one's heads meanwhile.
        self._read_ahead = threading.Thread(
            target=self._read_heads_ahead,
            args=(capped, planned, budget),
            name="enrichd-plan-read-ahead",
            daemon=True,
        )
        self._read_ahead.start()
        return capped

    def _read_heads_ahead(
        self, start: dict[str, int], planned: dict[str, int], budget: int
    ) -> None:
        try:
            self._heads_for(start, planned, budget)
        except Exception:  # noqa: BLE001 - the next plan reads again, and raises there
            return

    def _await_read_ahead(self) -> None:
        if self._read_ahead is not None:
            self._read_ahead.join()
            self._read_ahead = None

    def _earliest_first(
        self, start: Offsets, planned: dict[str, int], budget: int
    ) -> dict[str, int]:
        """Admit the ``budget`` records with the smallest timestamps across all partitions.

        Like a Kafka Streams task choosing the partition whose next record is oldest, this
        keeps a capped micro-batch a prefix of the input in time order, so the cap cannot
        change the order in which a key's records from different topics are applied.
        """
        ranks: dict[str, int] = {}  # the inputs come in the joiner's role order
        for i, spec in enumerate(self.spec.inputs):
            ranks.setdefault(spec.topic, i)
        heads = self._heads_for(start, planned, budget)
        admitted = admit_earliest(
            heads, {name: ranks[split_partition_name(name)[0]] for name in heads}, budget
        )
        return {name: admitted.get(name, int(start.get(name, 0))) for name in planned}

    def _heads_for(self, start: Offsets, planned: dict[str, int], budget: int) -> dict[str, Heads]:
        """The heads a capped plan from ``start`` needs, per partition with records to read."""
        # Read past the budget: end-of-input markers there ride along free. As many as
        # :data:`_MARKER_LOOKAHEAD` whatever the budget: replay writes a marker per key after
        # every record, and with a cap of one, a lookahead of one left a marker a batch of its
        # own.
        return {
            name: self._heads(
                name,
                start.get(name, 0),
                min(end, start.get(name, 0) + budget + _MARKER_LOOKAHEAD),
            )
            for name, end in planned.items()
            if end > start.get(name, 0)
        }

    def _heads(self, name: str, first: int, stop: int) -> Heads:
        """The heads of one partition's records in ``[first, stop)``.

        Planning reads ahead of each batch, so what one plan read is most of the next one's
        range: the heads stay cached, and each record is read once, not once per plan.
        """
        # Late: confluent_kafka loads with the first client (daemon.model.constants says why).
        from confluent_kafka import TopicPartition

        cached = self._head_cache.get(name)
        if cached is None or not cached.start <= first <= cached.end:
            cached = self._head_cache[name] = Heads(first, first)
        cached.drop_before(first)
        if cached.end < stop:
            if self._reader is None:
                self._reader = connect.consumer(self.spec.reader_conf())
            tp = TopicPartition(*split_partition_name(name), cached.end)
            read = [m for records in read_partition(self._reader, tp, stop) for m in records]
            # Only a complete read joins the cache: a failed one is read again next time.
            cached.timestamps.extend([m.timestamp()[1] for m in read])
            cached.offsets.extend([m.offset() or 0 for m in read])
            cached.markers.extend(
                [m.value() is None and is_end_of_input(m.headers()) for m in read]
            )
            cached.end = stop
        return cached.before(stop)

    def partitions(self, start: Offsets, end: Offsets) -> list[KafkaPartition]:
        """The ranges with records, dealt out to at most ``read_tasks`` Spark partitions.

        A partition the plan moved (its :data:`RESETS` entry) starts there. A batch planned
        before this run (Spark runs it again after a restart) is checked again for offsets
        the broker no longer has (:meth:`_checked_again`).
        """
        begin: dict[str, int] = {**start, **(end.get(RESETS) or {})}
        if end != self._last_plan:
            begin = self._checked_again(begin, end)
        ranges = []
        for name, stop in sorted(end.items()):
            if not is_partition_name(name):
                continue
            first = begin.get(name, 0)
            if stop > first:
                topic, partition = split_partition_name(name)
                ranges.append(KafkaRange(topic, partition, first, stop))
        return [KafkaPartition(tuple(task)) for task in deal(ranges, self.spec.read_tasks)]

    def _checked_again(self, begin: dict[str, int], end: Offsets) -> dict[str, int]:
        """``begin`` past offsets the broker lost since the batch was planned, by the policy.

        ``latest`` skips the rest of the planned range: the batch's end is fixed. Of a
        partition gone or a topic created again (:meth:`_lost`), the batch reads nothing
        (unless the policy is ``fail``): its planned range is the old topic's, and the next
        plan, which starts at this batch's end, moves the partition by the policy and reports
        it, once.
        """
        names = [
            name
            for name, stop in end.items()
            if is_partition_name(name) and stop > begin.get(name, 0)
        ]
        if not names:
            return begin
        ends = self._log_ends({name: begin.get(name, 0) for name in names})  # makes the probe
        planned = {**{name: begin.get(name, 0) for name in names}, TOPIC_IDS: end.get(TOPIC_IDS)}
        lost = self._lost(planned, ends)
        if lost and self.spec.on_missing_offsets == "fail":
            raise failure(self.spec.pipeline, lost[0])
        passed = {item.name for item in lost}
        names = [name for name in names if name not in passed]
        trusted = [name for name in ends if name not in self._listed_ends]
        checked = {name: begin.get(name, 0) for name in names}
        missing = find_missing(checked, self._earliest(names), ends, trusted_ends=trusted)
        moved = {item.missing.name: item.at for item in self._go_on(missing)}
        moved.update({name: int(end[name]) for name in passed})
        return {
            **begin,
            **{name: min(at, int(end[name])) for name, at in moved.items()},
        }

    def stop(self) -> None:
        """Close the probe and the planning reader."""
        self._await_read_ahead()
        if self._probe is not None:
            self._probe.close()
            self._probe = None
        if self._reader is not None:
            self._reader.close()
            self._reader = None
        self._admin = None


def deal(ranges: Sequence[KafkaRange], tasks: int) -> list[list[KafkaRange]]:
    """``ranges`` dealt out to at most ``tasks`` tasks (0: one each), evening out records.

    The largest range goes first, each to the task with the fewest records so far; the
    same ranges always give the same tasks.
    """
    if tasks <= 0 or len(ranges) <= tasks:
        return [[kafka_range] for kafka_range in ranges]
    dealt: list[list[KafkaRange]] = [[] for _ in range(tasks)]
    loads = [0] * tasks
    for kafka_range in sorted(ranges, key=lambda r: r.start - r.end):  # largest first, stable
        least = loads.index(min(loads))
        dealt[least].append(kafka_range)
        loads[least] += kafka_range.end - kafka_range.start
    return dealt
