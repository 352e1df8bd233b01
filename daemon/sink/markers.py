"""Batch markers: the last micro-batch each task committed, and what that batch covered.

Each task of micro-batch N writes its share of the output in one Kafka transaction
(:mod:`daemon.sink.task_producer`). In that transaction it also produces a *marker*, a small
JSON record on the pipeline's markers topic (``<id_prefix>.<pipeline>.markers``, one
partition: :func:`daemon.kafka.names.markers_topic`), and commits, for the task's marker
group (``<id_prefix>.<pipeline>.marker.<query id>.<task>``), the offset just past that
record. The group's offset becomes visible with the transaction's records, or not at all,
and *points at* the marker record the committed transaction wrote: an aborted try's marker
record (which some brokers hand to readers all the same) is never taken for it.

A marker says which batch the task committed last, and what its share of that batch was
(:class:`Marker`): the offset ranges of the packs the task got (each pack carries the
range its partition was read over, :attr:`daemon.model.wire.SourceRow.read_range`), the
batch's processing time if a timer fired in the task, and a digest of both. A replay of
batch N that finds N's marker writes nothing; it runs all the same (its state is Spark's to
recompute), and when it closes compares the digest of what it read with the marker's
(:mod:`daemon.sink.task_output`): the same batch over other ranges means the checkpoint
lost what the output holds (:class:`~daemon.errors.CheckpointDivergedError`).

Reading a marker: the group's committed offset, then the record just before it. A task
that fenced its id reads the offset ``read_committed``, which on Kafka waits for a
transaction still holding offsets of the group (KIP-447's stable offsets); the driver at
start reads a whole query's markers uncommitted (:func:`query_markers`).
A group's offset that points at a record the topic no longer holds stops the pipeline: the
task's last batch cannot be told.

Sub-batches (continuous mode, docs/architecture.md): a task of a long batch commits a
transaction every commit interval, each with a marker of the long batch that also numbers
the sub-batch and says where in the topic the task's committed marker of the sub-batch before
it lies, and its first one. A task attempt that finds it died inside a long batch reads them
all (:func:`sub_batches`) and replays them, each over the ranges and with the clock it
recorded. They are found by that chain of places, from the one the group points at, not by
the reader skipping aborted records: some brokers hand those to every reader.

Layout before the markers topic: an older enrichd kept no record, only the offset N + 1 of
the group ``<id_prefix>.<pipeline>.sink.<query id>.<task>`` on the output topic's partition
0, which lag exporters showed as a consumer with absurd lag. A task whose new group has
nothing reads that one (a :class:`Marker` without a digest), so a checkpoint of an older
enrichd goes on where it was; its first committed batch writes the new layout.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass, field
from typing import Any

from daemon.errors import CheckpointDivergedError
from daemon.kafka import connect, names
from daemon.kafka.clients import OffsetNotAvailableError, read_partition
from daemon.model.wire import split_range_name

MARKER_FORMAT = 2
"""The newest version of a marker record's JSON this enrichd reads. A micro-batch's marker is
written as version 1, which enrichd has read since markers had records; a sub-batch's as 2,
which an enrichd that knows no sub-batches refuses rather than take for a whole batch."""
_WAIT_S = 30.0
"""How long a marker read waits for the broker."""


@dataclass(frozen=True)
class Share:
    """What one task read of a micro-batch.

    Its packs' ranges, and the batch's processing time if a timer fired in it.
    """

    ranges: frozenset[str] = frozenset()
    """The :func:`~daemon.model.wire.range_name` of each range the task's packs came from."""
    time_ms: int | None = None

    @property
    def digest(self) -> str:
        """A digest of the share: equal shares, equal digests."""
        text = "\n".join(sorted(self.ranges)) + f"\ntime {self.time_ms}"
        return hashlib.sha256(text.encode("utf-8")).hexdigest()[:32]

    def by_partition(self) -> dict[str, tuple[int, int]]:
        """The ranges by partition name: ``{"tweets/0": (10, 25)}``."""
        found = {}
        for name in self.ranges:
            partition, start, end = split_range_name(name)
            found[partition] = (start, end)
        return dict(sorted(found.items()))


@dataclass(frozen=True)
class Marker:
    """A task's last committed micro-batch, or sub-batch of a long batch, and its share of it.

    ``share`` is None for a marker of the older layout, which recorded only the batch. The
    record also carries the share's digest, for whoever reads the topic.
    """

    batch: int
    share: Share | None = None
    sub: int | None = None
    """The sub-batch's number in long batch :attr:`batch`, from 0; None: a micro-batch's."""
    first_at: int | None = None
    """Where the task's marker of sub-batch 0 of the long batch lies in the markers topic;
    None for that marker itself (its place is known only once it is written)."""
    previous_at: int | None = None
    """Where the task's marker of sub-batch :attr:`sub` - 1 lies; None for sub-batch 0."""

    def encode(self) -> bytes:
        """The marker record's value."""
        share = self.share or Share()
        found: dict[str, Any] = {
            "format": 1 if self.sub is None else 2,
            "batch": self.batch,
            "digest": share.digest,
            "ranges": {name: list(pair) for name, pair in share.by_partition().items()},
            "time_ms": share.time_ms,
        }
        if self.sub is not None:
            found.update(sub=self.sub, first_at=self.first_at, previous_at=self.previous_at)
        return json.dumps(found).encode("utf-8")

    @staticmethod
    def decode(value: bytes) -> Marker:
        """A marker record's value back.

        Raises:
            ValueError: not a marker this enrichd can read.
        """
        found = json.loads(value)
        if not isinstance(found, dict) or int(found.get("format", 0)) > MARKER_FORMAT:
            raise ValueError(f"not a marker this enrichd reads: {value[:80]!r}")
        ranges = frozenset(
            f"{name}:{int(start)}-{int(end)}" for name, (start, end) in found["ranges"].items()
        )
        time_ms, sub = found.get("time_ms"), found.get("sub")
        first_at, previous_at = found.get("first_at"), found.get("previous_at")
        return Marker(
            int(found["batch"]),
            Share(ranges, None if time_ms is None else int(time_ms)),
            None if sub is None else int(sub),
            None if first_at is None else int(first_at),
            None if previous_at is None else int(previous_at),
        )


def record_key(query_id: str, task: int) -> bytes:
    """A marker record's key: the query and the task it is of."""
    return f"{query_id}/{task}".encode()


def describe(share: Share | None, against: Share | None = None) -> str:
    """A share in words, for an operator's line.

    Its ranges (those that differ from ``against``'s, when given) and its processing time.

    Example:
        >>> describe(Share(frozenset({"tweets/0:10-25", "users/0:0-2"})))
        'tweets/0 offsets 10-25, users/0 offsets 0-2'
        >>> describe(
        ...     Share(frozenset({"tweets/0:10-35", "users/0:0-2"})),
        ...     Share(frozenset({"tweets/0:10-25", "users/0:0-2"})),
        ... )
        'tweets/0 offsets 10-35 (and 1 range alike)'
    """
    if share is None:
        return "no ranges (a marker of an older enrichd)"
    mine = share.by_partition()
    other = against.by_partition() if against is not None else {}
    differing = {name: pair for name, pair in mine.items() if other.get(name) != pair}
    alike = len(mine) - len(differing)
    if against is not None:
        differing.update({name: (-1, -1) for name in other if name not in mine})
    parts = [
        f"{name} nothing" if start < 0 else f"{name} offsets {start}-{end}"
        for name, (start, end) in sorted(differing.items())
    ]
    text = ", ".join(parts) or "no input range"
    if against is not None and alike:
        text += f" (and {alike} range{'s' if alike > 1 else ''} alike)"
    if share.time_ms is not None and (against is None or against.time_ms != share.time_ms):
        text += f", timers at {share.time_ms} ms"
    return text


@dataclass
class _Readers:
    """The consumers a process reads markers with: one per marker group, one for records."""

    groups: dict[tuple[str, bool], Any] = field(default_factory=dict)
    records: Any = None
    found: dict[tuple[str, int], Marker] = field(default_factory=dict)
    """Markers read before, by topic and offset: a marker record never changes."""


_READERS = _Readers()


def task_marker(
    conf: dict[str, str],
    prefix: str,
    pipeline: str,
    query_id: str,
    task: int,
    output_topic: str,
    *,
    stable: bool,
) -> Marker | None:
    """Task ``task``'s last marker; None: it committed no batch (or its group's offset expired).

    ``stable``: the group's offset is read ``read_committed``, which waits for a
    transaction that still holds offsets of the group (Kafka's stable offsets). Only after
    the task's producer initialised its id, which ended every such transaction: otherwise a
    transaction a dead task left open would hold the read until it times out. Read
    uncommitted, a marker may be one batch behind, never ahead.

    Without a marker in the markers topic, the older layout's offset on ``output_topic``
    (partition 0) is read (see the module docstring).

    Raises:
        CheckpointDivergedError: the group's offset points at a marker record the topic no
            longer holds.
    """
    # Late: confluent_kafka loads with the first client (daemon.model.constants says why).
    from confluent_kafka import TopicPartition

    topic = names.markers_topic(prefix, pipeline)
    group = names.marker_group(prefix, pipeline, query_id, task)
    offset = _committed(conf, group, TopicPartition(topic, 0), stable)
    if offset > 0:
        marker = _record(conf, prefix, topic, offset - 1)
        if marker is None:
            raise CheckpointDivergedError(
                f"pipeline {pipeline!r}: task {task}'s marker group {group!r} points at offset "
                f"{offset - 1} of the markers topic {topic!r}, which no longer holds it (its "
                "retention.ms is shorter than the brokers' offsets.retention.minutes, or it was "
                "deleted and created again): which micro-batch the task committed last cannot "
                "be told, so running it could write a batch twice or skip one; see "
                'docs/operations.md, "When the checkpoint and the output disagree"'
            )
        return marker
    legacy = names.legacy_marker_group(prefix, pipeline, query_id, task)
    offset = _committed(conf, legacy, TopicPartition(output_topic, 0), stable)
    return Marker(offset - 1) if offset > 0 else None


def sub_batches(
    conf: dict[str, str], prefix: str, pipeline: str, query_id: str, task: int, last: Marker
) -> list[tuple[int, Marker]]:
    """Every sub-batch of ``last``'s long batch that task ``task`` committed, in order.

    Each with its marker's place in the markers topic, which the next sub-batch's marker
    names (:class:`Marker`).

    ``last`` is the task's last marker, read stable (:func:`task_marker`) after its producer
    took the id over. The topic is read from the long batch's first marker to ``last``,
    uncommitted (a transaction another task holds open must not hold the read), and the
    committed markers are found by their chain of places back from ``last`` (see the module
    docstring), passing over any aborted try's.

    Raises:
        ValueError: ``last`` is a micro-batch's marker.
        CheckpointDivergedError: a marker of the chain is not in the topic any more (its
            retention), so the long batch cannot be replayed as it ran.
    """
    # Late: confluent_kafka loads with the first client (daemon.model.constants says why).
    from confluent_kafka import TopicPartition

    if last.sub is None:
        raise ValueError(f"micro-batch {last.batch}'s marker has no sub-batches")
    topic = names.markers_topic(prefix, pipeline)
    group = names.marker_group(prefix, pipeline, query_id, task)
    end = _committed(conf, group, TopicPartition(topic, 0), True)  # just past ``last``
    start = end - 1 if last.first_at is None else last.first_at
    key = record_key(query_id, task)
    written: dict[int, Marker] = {}
    reader = _records_reader(conf, prefix)
    try:
        for records in read_partition(reader, TopicPartition(topic, 0, start), end):
            mine = (m for m in records if m.key() == key)
            written.update((m.offset(), Marker.decode(m.value())) for m in mine)
    except OffsetNotAvailableError:
        written.clear()
    finally:
        reader.close()
    chain: list[tuple[int, Marker]] = []
    at: int | None = end - 1
    while at is not None and at in written and len(chain) <= last.sub:
        marker = written[at]
        chain.append((at, marker))
        at = marker.previous_at
    chain.reverse()
    if [(m.batch, m.sub) for _, m in chain] != [(last.batch, n) for n in range(last.sub + 1)]:
        raise CheckpointDivergedError(
            f"pipeline {pipeline!r}: task {task} died inside long batch {last.batch} after "
            f"sub-batch {last.sub}, but the markers topic {topic!r} no longer holds every "
            "sub-batch marker before it (its retention): the long batch cannot be replayed as "
            'it ran; see docs/operations.md, "When the checkpoint and the output disagree"'
        )
    return chain


def _committed(conf: dict[str, str], group: str, partition: Any, stable: bool) -> int:
    """The group's committed offset on ``partition``; -1: none."""
    key = (group, stable)
    reader = _READERS.groups.get(key)
    if reader is None:
        isolation = "read_committed" if stable else "read_uncommitted"
        reader = _READERS.groups[key] = connect.consumer(
            conf, {"group.id": group, "isolation.level": isolation}
        )
    found = reader.committed([partition], timeout=_WAIT_S)[0]
    if found.error is not None:
        raise RuntimeError(f"cannot read the batch marker of group {group!r}: {found.error}")
    return int(found.offset)


def _record(conf: dict[str, str], prefix: str, topic: str, offset: int) -> Marker | None:
    """The marker record at ``offset``; None if the topic no longer has it (retention)."""
    cached = _READERS.found.get((topic, offset))
    if cached is not None:
        return cached
    if _READERS.records is None:
        _READERS.records = _records_reader(conf, prefix)
    value = _fetch_one(_READERS.records, topic, offset)
    if value is None:
        return None
    marker = Marker.decode(value)
    if len(_READERS.found) > 1024:
        _READERS.found.clear()
    _READERS.found[(topic, offset)] = marker
    return marker


def _records_reader(conf: dict[str, str], prefix: str) -> Any:
    """A consumer of marker records, read uncommitted.

    Markers are found by a group's offset or by their chain (:func:`sub_batches`), both of
    committed records: no need to wait for the transactions after them, as a read_committed
    reader would.
    """
    return connect.consumer(
        conf,
        {
            "group.id": names.reader_group(prefix),  # never joined or committed to
            "enable.auto.commit": False,
            "isolation.level": "read_uncommitted",
            "auto.offset.reset": "error",
            "fetch.wait.max.ms": 10,
        },
    )


def _fetch_one(consumer: Any, topic: str, offset: int) -> bytes | None:
    """The value of partition 0's record at ``offset``; None: the partition no longer has it."""
    # Late: confluent_kafka loads with the first client (daemon.model.constants says why).
    from confluent_kafka import KafkaError, TopicPartition

    consumer.assign([TopicPartition(topic, 0, offset)])
    deadline = time.monotonic() + _WAIT_S
    try:
        while time.monotonic() < deadline:
            for message in consumer.consume(num_messages=1, timeout=0.5):
                error = message.error()
                if error is None:
                    if message.offset() == offset:
                        return bytes(message.value() or b"")
                    if (message.offset() or 0) > offset:
                        return None  # removed, and the client went on past it
                elif error.code() in (
                    KafkaError._AUTO_OFFSET_RESET,
                    KafkaError.OFFSET_OUT_OF_RANGE,
                ):
                    return None  # removed by retention
    finally:
        consumer.unassign()
    raise RuntimeError(f"no answer for the batch marker at {topic}/0 offset {offset}")


def query_markers(
    conf: dict[str, str], prefix: str, pipeline: str, query_id: str, output_topic: str
) -> dict[int, Marker]:
    """Every task's last marker of one query, by task.

    Read at a query's start (:mod:`daemon.pipeline.marker_check`), before any task's
    producer initialised its id: so read uncommitted, as :func:`task_marker`
    says, else a transaction a killed task left open would hold the read until the
    transaction timeout. What a committed transaction wrote is there all the same; a marker
    still pending in an open one is not, and the task's own read after fencing finds it.
    The tasks are found by the cluster's groups of the query, of either layout.

    Raises:
        KafkaUnavailableError: the cluster would not list the groups.
        CheckpointDivergedError: a group points at a marker record the topic no longer holds.
    """
    # Late: the admin module loads confluent_kafka's admin client.
    from daemon.kafka.admin import groups_starting

    tasks: set[int] = set()
    for start in (
        names.marker_groups_of(prefix, pipeline, query_id),
        names.legacy_marker_groups_of(prefix, pipeline, query_id),
    ):
        suffixes = (group[len(start) :] for group in groups_starting(conf, start))
        tasks.update(int(task) for task in suffixes if task.isdigit())
    found = {}
    try:
        for task in sorted(tasks):
            marker = task_marker(conf, prefix, pipeline, query_id, task, output_topic, stable=False)
            if marker is not None:
                found[task] = marker
    finally:
        forget_readers()  # a consumer per group: the driver reads them once per start
    return found


def forget_readers() -> None:
    """Close the marker readers this process keeps (before its broker stops)."""
    for reader in _READERS.groups.values():
        reader.close()
    _READERS.groups.clear()
    if _READERS.records is not None:
        _READERS.records.close()
        _READERS.records = None
    _READERS.found.clear()
