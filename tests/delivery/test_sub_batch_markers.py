"""A long batch's sub-batch markers read back from the real broker, as a new attempt would.

A task of long batch 5 commits three sub-batches, each with its marker; between its second
and third it aborts a try whose marker record still reaches the topic (the embedded broker
hands aborted records to readers), and another task commits a sub-batch of its own. A new
attempt of the task takes its id over, reads its last marker, and must get exactly the three
committed sub-batches, in order, with the ranges and clocks they recorded: what it replays
(docs/architecture.md, "Continuous mode").
"""

from __future__ import annotations

import uuid

from daemon.broker import EmbeddedBroker
from daemon.kafka.admin import create_topics
from daemon.kafka.clients import produce
from daemon.kafka.names import markers_topic
from daemon.model.constants import DEFAULT_ID_PREFIX
from daemon.sink import markers
from daemon.sink.markers import Marker, Share, sub_batches
from daemon.sink.spec import OutputSpec
from daemon.sink.sub_batches import SubBatchProducer
from daemon.sink.task_producer import forget_kept_clients
from tests.kafka_helpers import client_conf, read_topic

LONG_BATCH = 5


def _share(start: int, end: int, time_ms: int) -> Share:
    ranges = {f"orders/0:{start}-{end}", f"users/0:{start // 2}-{end // 2}"}
    return Share(frozenset(ranges), time_ms)


def test_a_new_attempt_reads_the_sub_batches_its_task_committed_in_order(
    broker: EmbeddedBroker,
) -> None:
    conf = client_conf(broker.bootstrap_servers)
    pipeline = f"subs-{uuid.uuid4().hex[:8]}"
    create_topics(conf, {f"{pipeline}-out": 1, markers_topic(DEFAULT_ID_PREFIX, pipeline): 1})
    spec = OutputSpec(pipeline, conf, "exactly_once", f"{pipeline}-out")
    shares = [_share(0, 10, 1000), _share(10, 30, 1100), _share(30, 31, 1200)]

    task = SubBatchProducer(spec, 0, LONG_BATCH, "q")
    assert task.take_over() is None
    other = SubBatchProducer(spec, 1, LONG_BATCH, "q")
    assert other.take_over() is None
    for sub, share in enumerate(shares):
        if sub == 1:
            other.open_transaction()
            other.commit(_share(0, 99, 1050))
        if sub == 2:  # a try that dies after its marker went out
            task.open_transaction()
            task.producer.produce(
                spec.markers_topic,
                value=task.marker_of(_share(30, 77, 1150)).encode(),
                key=markers.record_key("q", 0),
                partition=0,
            )
            task.producer.flush()
            task.abort()
        task.open_transaction()
        task.producer.produce(spec.output_topic, value=f"sub {sub}".encode())
        task.commit(share)

    attempt = SubBatchProducer(spec, 0, LONG_BATCH, "q")
    last = attempt.take_over()
    assert last is not None and (last.batch, last.sub) == (LONG_BATCH, 2)
    found = sub_batches(conf, DEFAULT_ID_PREFIX, pipeline, "q", 0, last)
    assert [(m.batch, m.sub, m.share) for _, m in found] == [
        (LONG_BATCH, sub, share) for sub, share in enumerate(shares)
    ]
    # The attempt goes on where the dead one stopped: its next marker follows the chain.
    attempt.resume(found)
    assert attempt.marker_of(Share()) == Marker(LONG_BATCH, Share(), 3, found[0][0], found[-1][0])
    forget_kept_clients()


def test_a_task_whose_records_fill_its_clients_queue_still_commits_with_its_marker(
    broker: EmbeddedBroker,
) -> None:
    """A backlog's sub-batch (or a large micro-batch's task) can leave the client's local
    queue full when its marker goes out: the marker waits for room, as the records do."""
    conf = {**client_conf(broker.bootstrap_servers), "queue.buffering.max.messages": "5"}
    pipeline = f"full-{uuid.uuid4().hex[:8]}"
    create_topics(conf, {f"{pipeline}-out": 1, markers_topic(DEFAULT_ID_PREFIX, pipeline): 1})
    spec = OutputSpec(pipeline, conf, "exactly_once", f"{pipeline}-out")
    task = SubBatchProducer(spec, 0, LONG_BATCH, "q")
    try:
        task.take_over()
        task.open_transaction()
        for record in range(5):
            produce(task.producer, spec.output_topic, f"record {record}".encode())
        task.commit(_share(0, 5, 1000))
    finally:
        forget_kept_clients()
    assert [r.value for r in read_topic(conf, spec.output_topic)] == [
        f"record {record}".encode() for record in range(5)
    ]
