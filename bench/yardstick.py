"""The latency yardstick: a raw consume-transform-produce loop, exactly once, as Kafka Streams runs.

enrichd's end-to-end latency means little alone: the broker, the machine and exactly-once
delivery set a floor under any pipeline. So each latency run of a joiner is measured against
a raw loop doing the same join in the same run, at the same offered rate, read back by the
same ``read_committed`` reader (:mod:`bench.latency`): its p50 and p99 are the reference, and
enrichd's are given as ratios to them.

The loop (:func:`transactional_loop`, in a spawned process of its own) does what a Kafka
Streams application does under ``processing.guarantee = exactly_once_v2`` with the defaults:

- one consumer, ``read_committed``, reading every partition of the pipeline's inputs from
  offset 0 (``assign()``: the test broker takes 20-25 s to join a group; a short
  :data:`FETCH_WAIT_MS`, as enrichd's readers), and one transactional producer;
- each poll's records applied oldest first (by Kafka timestamp, left before right on a tie),
  without waiting for a partition that has nothing buffered (Kafka Streams with
  ``max.task.idle.ms = 0`` waits for none that is caught up, as the loaded inputs are);
  the join is the joiner's rules on plain dicts (a :class:`bench.rawjoin.RawJoin`), and each
  output carries its source record's timestamp and the ``enrichd.source.*`` headers, as
  enrichd's do, so the reader matches it to the record offered;
- every :data:`COMMIT_INTERVAL_S` (``commit.interval.ms = 100``), when records came in since
  the last commit, the consumer's positions go into the transaction
  (``send_offsets_to_transaction``) and it commits; a ``read_committed`` reader sees the
  outputs only then.

It leaves out what Streams adds around that loop: a changelog topic for its state (the
loop keeps the join's state in memory only, so it writes less per commit than Streams
would), repartitioning, more threads. So it is a floor for an exactly-once pipeline that
commits every 100 ms on this broker and machine, not a measurement of Kafka Streams.
"""

from __future__ import annotations

import io
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import fastavro

from bench import ceiling
from bench.rawjoin import RawSpec, schema
from bench.spawned import Child
from daemon.kafka import clients

COMMIT_INTERVAL_S = 0.1
"""Kafka Streams' ``commit.interval.ms`` under exactly-once (100 ms; 30 s otherwise)."""
FETCH_WAIT_MS = 10
"""The consumer's ``fetch.wait.max.ms``, as the reader's (:mod:`bench.latency`) and enrichd's
own readers' (``daemon.kafka.clients.RANGE_FETCH``). With the default (500 ms, Kafka Streams'
too) the loop committed about every 170 ms instead of every 100, and its p50 at 500 records/s
was 172 ms against 90 with 10 ms (on the test broker, a loaded machine): a fetch there seems
to wait out its time rather than end when records arrive, as Apache Kafka's does."""
_POLL_RECORDS = 10_000
"""The most records one poll takes (Kafka Streams' ``max.poll.records`` is 1,000 by default;
more here, since a Python loop pays per call, not per record)."""


@dataclass(frozen=True)
class Progress:
    """Where the loop stood at its last commit."""

    transactions: int
    """Transactions committed so far."""
    records: int
    """Input records applied so far."""
    outputs: int
    """Outputs produced so far."""
    late: int
    """Records the join refused as late (enrichd's dead letters)."""
    committed_at: float
    """Epoch seconds when the last transaction committed."""


def transactional_loop(spec: RawSpec, name: str, orders: Any, reports: Any) -> None:
    """The yardstick's process: read, join, produce and commit, until told to stop.

    ``name`` is its transactional id and group. Orders: ``("reach", ends)`` asks for a
    ``("reached", Progress)`` report once a commit covers ``ends`` (``"topic/partition"`` ->
    offset); ``("stop",)`` ends the loop.
    """
    # Late, as the bench's other clients: importing this module loads no librdkafka.
    from confluent_kafka import Consumer, Producer, TopicPartition

    consumer = Consumer(
        {
            **spec.conf,
            "group.id": name,
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "fetch.wait.max.ms": FETCH_WAIT_MS,
        }
    )
    producer = Producer({**spec.conf, "transactional.id": name})
    producer.init_transactions(30)
    metadata = consumer.list_topics(timeout=10).topics
    partitions = [
        TopicPartition(topic, partition, 0)
        for topic in spec.roles
        for partition in sorted(metadata[topic].partitions)
    ]
    consumer.assign(partitions)
    group = consumer.consumer_group_metadata()
    readers = {topic: schema(name) for topic, name in spec.schemas.items()}
    output_schema = schema(spec.output_schema)
    reader: Any = fastavro.schemaless_reader
    writer: Any = fastavro.schemaless_writer
    buffer = io.BytesIO()
    source: list[Any] = [None]  # the record being applied, whose outputs these are
    outputs = 0

    def emit(key: str, value: dict[str, Any]) -> None:
        nonlocal outputs
        message = source[0]
        buffer.seek(0)
        buffer.truncate()
        writer(buffer, output_schema, value)
        clients.produce(
            producer,
            spec.output,
            value=buffer.getvalue(),
            key=key.encode(),
            headers=ceiling.provenance(message),
            timestamp=message.timestamp()[1],
        )
        outputs += 1

    join = spec.join(spec.options, emit)
    committed: dict[str, int] = {}
    target: dict[str, int] | None = None
    transactions = records = 0
    pending = False  # records applied since the last commit
    last_commit = time.monotonic()
    producer.begin_transaction()
    reports.put(("ready",))
    while True:
        while not orders.empty():
            order = orders.get()
            if order[0] == "stop":
                producer.abort_transaction(10)  # nothing in it: the last commit covered all
                consumer.close()
                return
            target = order[1]
        if target is not None and all(committed.get(k, 0) >= v for k, v in target.items()):
            progress = Progress(transactions, records, outputs, join.late, time.time())
            reports.put(("reached", progress))
            target = None
        wait = max(0.0, last_commit + COMMIT_INTERVAL_S - time.monotonic()) if pending else 0.1
        first = consumer.poll(wait)
        messages = [] if first is None else [first, *consumer.consume(_POLL_RECORDS - 1, 0)]
        good: list[Any] = [m for m in messages if m.error() is None]
        good.sort(key=lambda m: (m.timestamp()[1], spec.rank(m.topic())))
        for message in good:
            source[0] = message
            topic = message.topic()
            join.apply(spec.roles[topic], reader(io.BytesIO(message.value()), readers[topic], None))
        records += len(good)
        pending = pending or bool(good)
        if pending and time.monotonic() - last_commit >= COMMIT_INTERVAL_S:
            positions = [tp for tp in consumer.position(partitions) if tp.offset >= 0]
            producer.send_offsets_to_transaction(positions, group)
            producer.commit_transaction()
            producer.begin_transaction()
            last_commit = time.monotonic()
            transactions += 1
            pending = False
            committed.update({f"{tp.topic}/{tp.partition}": tp.offset for tp in positions})


@contextmanager
def running(spec: RawSpec, timeout_s: float) -> Iterator[Callable[[dict[str, int]], Progress]]:
    """The loop over ``spec`` in a process of its own; yields ``reach(ends)``, which waits
    until a commit covers ``ends`` and gives the loop's :class:`Progress` then.

    Raises:
        RuntimeError: the loop failed, or did not get there within ``timeout_s``.
    """
    name = f"enrichd-bench-yardstick-{uuid.uuid4().hex[:8]}"
    child = Child(transactional_loop, (spec, name), "yardstick loop")
    try:
        child.expect("ready", timeout_s)

        def reach(ends: dict[str, int]) -> Progress:
            child.orders.put(("reach", ends))
            progress: Progress = child.expect("reached", timeout_s)[0]
            return progress

        yield reach
    finally:
        child.orders.put(("stop",))
        child.stop()
