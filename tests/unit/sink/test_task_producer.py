"""Which producer a task takes: a kept one while it committed the id's last batch, else a new
one that takes the id over; and a batch committed before begins nothing.

The producers here stand in for librdkafka's transactional producer, and the markers for the
offsets the transactions commit; the real path, with fencing by another producer, is
``tests/delivery/test_kafka_sink.py``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from daemon.sink import task_producer
from daemon.sink.markers import Marker, Share
from daemon.sink.spec import OutputSpec
from daemon.sink.task_producer import TaskProducer, abortable

SPEC = OutputSpec("views", {}, "exactly_once", "views", commit_turn=False)
SPEC_GROUP = TaskProducer(SPEC, 0, 0, "query").group
"""The marker group of task 0 of ``SPEC``'s query."""


@dataclass
class Markers:
    """The batch markers each group has committed, and every producer made."""

    committed: dict[str, int] = field(default_factory=dict)
    producers: list[Producer] = field(default_factory=list)


class Producer:
    """Counts its initialisations and transactions; a commit commits its marker."""

    def __init__(self, markers: Markers) -> None:
        self.markers = markers
        self.inits = 0
        self.begun = 0
        self.pending: tuple[str, int] | None = None
        self.records: list[bytes] = []
        """The marker records it produced (their offsets: their places)."""
        markers.producers.append(self)

    def produce(
        self,
        topic: str,
        value: bytes,
        key: bytes,
        on_delivery: Any,
        partition: int = -1,
        headers: Any = None,
        timestamp: int = 0,
    ) -> None:
        assert partition == 0  # where the group's offset points and every read looks
        self.records.append(value)
        offset = len(self.records) - 1
        on_delivery(None, type("Delivered", (), {"offset": lambda self: offset})())

    def flush(self, timeout: float = -1) -> int:
        return 0

    def init_transactions(self, timeout: float) -> None:
        self.inits += 1

    def begin_transaction(self) -> None:
        self.begun += 1

    def send_offsets_to_transaction(self, offsets: list[Any], group: str, timeout: float) -> None:
        self.pending = (group, offsets[0].offset)

    def commit_transaction(self, timeout: float) -> None:
        assert self.pending is not None
        group, offset = self.pending
        # The group's offset points past the marker record: the batch it names, + 1 here.
        self.markers.committed[group] = Marker.decode(self.records[offset - 1]).batch + 1


@pytest.fixture
def markers(monkeypatch: pytest.MonkeyPatch) -> Iterator[Markers]:
    found = Markers()

    def marker(self: TaskProducer, *, stable: bool) -> Marker | None:
        after = found.committed.get(self.group, 0)
        return Marker(after - 1, Share()) if after > 0 else None

    monkeypatch.setattr(task_producer, "_transactional_producer", lambda *a: Producer(found))
    monkeypatch.setattr(task_producer, "_group_metadata", lambda spec, group: group)
    monkeypatch.setattr(TaskProducer, "marker", marker)
    yield found
    task_producer.forget_kept_clients()


def committed_batch(batch: int) -> TaskProducer:
    """Task 0 of ``batch`` begins, commits and keeps its producer, as a task that wrote does."""
    task = TaskProducer(SPEC, 0, batch, "query")
    marker = task.begin()
    assert marker is None or marker.batch < batch
    task.open_transaction()
    task.commit(Share())
    task.keep()
    return task


def test_a_worker_uses_the_producer_it_kept_for_the_ids_next_batch(markers: Markers) -> None:
    first = committed_batch(0).producer
    assert committed_batch(1).producer is first
    # A new producer took the id over once (and left a spare for the next time); none since.
    assert [p.inits for p in markers.producers] == [1, 0]
    assert first.begun == 2 and markers.committed == {SPEC_GROUP: 2}


def test_a_batch_committed_before_begins_nothing(markers: Markers) -> None:
    first = committed_batch(0).producer
    replay = TaskProducer(SPEC, 0, 0, "query")
    marker = replay.begin()
    assert marker is not None and marker.batch == 0
    assert replay.producer is None and first.begun == 1
    assert committed_batch(1).producer is first  # still kept for the next batch


def test_a_kept_producer_behind_the_marker_is_not_tried(markers: Markers) -> None:
    first = committed_batch(0).producer
    markers.committed[SPEC_GROUP] = 2  # batch 1 committed in another worker meanwhile
    taken = committed_batch(2).producer
    assert taken is not first and first.begun == 1 and taken.inits == 1


def test_at_least_once_a_pipeline_shares_one_idempotent_producer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    made: list[object] = []

    def producer(*settings: Any) -> object:
        made.append(object())
        return made[-1]

    monkeypatch.setattr(task_producer.connect, "producer", producer)
    spec = OutputSpec("views", {}, "at_least_once", "views")
    try:
        tasks = [TaskProducer(spec, partition, 0, "query") for partition in (0, 1)]
        assert all(task.begin() is None for task in tasks)
        assert tasks[0].producer is tasks[1].producer and len(made) == 1
    finally:
        task_producer.forget_kept_clients()


def test_abortable_errors_say_so_or_are_the_state_error() -> None:
    from confluent_kafka import KafkaError, KafkaException

    assert abortable(KafkaException(KafkaError(KafkaError._STATE)))
    assert abortable(
        KafkaException(KafkaError(KafkaError.MSG_SIZE_TOO_LARGE, "x", txn_requires_abort=True))
    )
    assert not abortable(KafkaException(KafkaError(KafkaError._FENCED)))
    assert not abortable(RuntimeError("not Kafka's"))


def test_a_producer_waits_a_minute_for_a_request_not_the_transaction_timeout() -> None:
    """librdkafka stretches the request and delivery timeouts to the transaction timeout
    when they are not set: a broker that stops answering would hold a task that long."""
    spec = OutputSpec("views", {}, "exactly_once", "views", transaction_timeout_ms=900_000)
    assert task_producer._timeouts(spec) == {
        "socket.timeout.ms": 60_000,
        "message.timeout.ms": 300_000,
    }
    short = OutputSpec("views", {}, "exactly_once", "views", transaction_timeout_ms=10_000)
    assert task_producer._timeouts(short) == {  # librdkafka wants them within it
        "socket.timeout.ms": 10_000,
        "message.timeout.ms": 10_000,
    }
    chosen = OutputSpec("views", {"socket.timeout.ms": "5000"}, "exactly_once", "views")
    assert task_producer._timeouts(chosen) == {"message.timeout.ms": 300_000}
