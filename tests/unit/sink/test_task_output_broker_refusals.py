"""A record the broker refuses: the task aborts, writes its output again with that record as a
dead letter, and commits.

The producers here act as librdkafka's transactional producer does when a broker refuses a
record batch (measured against a refusing proxy, tests/refusing_proxy.py): every record of
the refused batch fails its delivery with the broker's error, the transaction becomes
abortable, ``produce()`` then raises ``_STATE``, and the commit raises the first failed
delivery's error. With ``batch.num.messages = 1`` a batch is one record. A batch marker
(a record on the markers topic) is delivered, and the offset just past it is what the
transaction commits for the marker group. When the broker answers a refusal before the
records after it (the marker among them) have left, the client purges those: each fails with
``_PURGE_QUEUE`` (``Broker.purges``). The real path is tested in
tests/delivery/test_output_rejected.py and tests/service/test_nothing_lost.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from daemon.sink import task_producer
from daemon.sink.markers import Marker
from daemon.sink.refusals import OUTPUT_REJECTED
from daemon.sink.spec import OutputSpec
from daemon.sink.task_output import TaskOutput
from daemon.sink.task_producer import TaskProducer

DEAD_LETTERS = "views.dlq"
LIMIT = 200_000


@dataclass
class Message:
    """What a delivery report carries of a record."""

    topic_: str
    headers_: list[tuple[str, bytes]]
    offset_: int = -1

    def topic(self) -> str:
        return self.topic_

    def headers(self) -> list[tuple[str, bytes]]:
        return self.headers_

    def offset(self) -> int:
        return self.offset_


@dataclass
class Broker:
    """What the producers wrote: the records of each committed and aborted transaction."""

    refuses: dict[str, bytes] = field(default_factory=lambda: {"views": b"refuse"})
    """A topic's records whose value holds these bytes are refused."""
    error: int = KafkaError.MSG_SIZE_TOO_LARGE
    committed: list[list[tuple[str, bytes | None, dict[str, bytes]]]] = field(default_factory=list)
    aborted: int = 0
    markers: list[int] = field(default_factory=list)
    """The offsets the transactions committed for the marker group."""
    marker_records: list[bytes] = field(default_factory=list)
    """The markers topic's records (their offsets: their places)."""
    marker: Marker | None = None
    """What a stable read of the task's marker finds."""
    marker_partitions: list[int | None] = field(default_factory=list)
    """The partition each marker was produced to (None: the partitioner's choice)."""
    offsets_fail: bool = False
    """Whether the coordinator times out adding the marker group's offset, in rounds of
    writing again (producers with one record per batch)."""
    purges: bool = False
    """Whether a refusal comes back while the records after it, and the marker, still wait
    in the client's queue, which purges them (see the module docstring)."""
    producers: list[TransactionalProducer] = field(default_factory=list)


class TransactionalProducer:
    """Refuses batches as a broker answers them, when it is flushed (see the module docstring)."""

    def __init__(self, broker: Broker, config: dict[str, Any]) -> None:
        self.broker = broker
        self.one_per_batch = config.get("batch.num.messages") == 1
        self.records: list[tuple[str, bytes | None, dict[str, bytes], Any]] = []
        self.failure: KafkaError | None = None
        self.sent = 0  # records of the transaction the broker has answered
        self.queued_marker: dict[str, Any] | None = None
        broker.producers.append(self)

    def init_transactions(self, timeout: float) -> None:
        pass

    def begin_transaction(self) -> None:
        self.records, self.failure, self.sent = [], None, 0

    def send_offsets_to_transaction(
        self, offsets: list[Any], metadata: Any, timeout: float
    ) -> None:
        if self.broker.offsets_fail and self.one_per_batch:
            raise KafkaException(KafkaError(KafkaError._TIMED_OUT, "no coordinator answer"))
        self.broker.markers.append(offsets[0].offset)

    def produce(self, topic: str, **record: Any) -> None:
        if self.failure is not None:
            raise KafkaException(KafkaError(KafkaError._STATE))
        if topic.endswith(".markers"):  # kept apart from the output
            self.broker.marker_partitions.append(record.get("partition"))
            if self.broker.purges:
                self.queued_marker = record  # answered at the flush, after the records
            else:
                self._deliver_marker(topic, record)
            return
        headers = dict(record.get("headers") or [])
        self.records.append((topic, record["value"], headers, record["on_delivery"]))

    def poll(self, timeout: float = 0) -> int:
        return 0

    def flush(self, timeout: float | None = None) -> int:
        """The broker answers every record sent since the last flush."""
        pending = self.records[self.sent :]
        self.sent = len(self.records)
        refused = [self._refused(topic, value) for topic, value, _, _ in pending]
        for index, (topic, _, headers, on_delivery) in enumerate(pending):
            # Without one record per batch, a refusal fails its topic's other records too.
            failed = refused[index] or (
                not self.one_per_batch
                and any(r and pending[i][0] == topic for i, r in enumerate(refused))
            )
            if failed:
                error = KafkaError(self.broker.error)
                self.failure = self.failure or KafkaError(
                    self.broker.error, "refused", txn_requires_abort=True
                )
                if on_delivery is not None:
                    on_delivery(error, Message(topic, list(headers.items())))
            elif self.failure is not None and self.broker.purges and on_delivery is not None:
                on_delivery(KafkaError(KafkaError._PURGE_QUEUE), Message(topic, []))
        marker, self.queued_marker = self.queued_marker, None
        if marker is not None and self.failure is not None:
            marker["on_delivery"](KafkaError(KafkaError._PURGE_QUEUE), Message("markers", []))
        elif marker is not None:
            self._deliver_marker("markers", marker)
        return 0

    def _deliver_marker(self, topic: str, record: dict[str, Any]) -> None:
        self.broker.marker_records.append(record["value"])
        offset = len(self.broker.marker_records) - 1
        record["on_delivery"](None, Message(topic, [], offset))

    def _refused(self, topic: str, value: bytes | None) -> bool:
        marker = self.broker.refuses.get(topic)
        return marker is not None and value is not None and marker in value

    def commit_transaction(self, timeout: float | None = None) -> None:
        self.flush()
        if self.failure is not None:
            raise KafkaException(self.failure)
        self.broker.committed.append([(t, v, h) for t, v, h, _ in self.records])

    def abort_transaction(self, timeout: float | None = None) -> None:
        self.broker.aborted += 1
        self.failure = None


@pytest.fixture
def broker(monkeypatch: pytest.MonkeyPatch) -> Iterator[Broker]:
    """Every producer a task output makes writes to one :class:`Broker`."""
    found = Broker()

    def producer(spec: OutputSpec, txn_id: str, extra: dict[str, Any] | None = None) -> Any:
        return TransactionalProducer(found, extra or {})

    monkeypatch.setattr(task_producer, "_transactional_producer", producer)
    monkeypatch.setattr(task_producer, "_group_metadata", lambda spec, group: None)
    monkeypatch.setattr(TaskProducer, "marker", lambda self, stable: found.marker)
    yield found
    task_producer.forget_kept_clients()


def output(dead_letter_topic: str | None = DEAD_LETTERS, held_bytes: int = 1 << 20) -> TaskOutput:
    """An exactly-once task output of batch 4 of pipeline ``views``, holding ``held_bytes``
    of rows in memory."""
    spec = OutputSpec(
        "views",
        {"message.max.bytes": str(LIMIT)},
        "exactly_once",
        "views",
        dead_letter_topic=dead_letter_topic,
        commit_turn=False,
        held_bytes=held_bytes,
    )
    task = TaskOutput(spec, 0, 4, "query")
    task.covered.add("tweets/1:0-10")
    return task


def view(value: bytes, offset: int, topic: str = "views") -> tuple[Any, ...]:
    """An output row made from offset ``offset`` of tweets/1."""
    return (topic, b"k%d" % offset, value, 1000 + offset, "tweets", 1, offset, None, None, None)


def test_a_refused_record_is_written_again_as_a_dead_letter_with_the_others_once(
    broker: Broker,
) -> None:
    task = output()
    for row in (view(b"first", 1), view(b"refuse me", 2), view(b"third", 3)):
        task.send_row(row)
    task.commit()

    # The first try, then a round that finds which record of the refused batch it was.
    assert broker.aborted == 2
    # The marker went into every transaction that tried to commit (the first try's and the
    # last round's, not the round that only found the refused record), the group's offset
    # just past it.
    assert broker.markers == [1, 2]
    marker = Marker.decode(broker.marker_records[-1])
    assert marker.batch == 4 and marker.share is not None
    assert marker.share.by_partition() == {"tweets/1": (0, 10)}
    (written,) = broker.committed
    assert [(topic, value) for topic, value, _ in written] == [
        ("views", b"first"),
        (DEAD_LETTERS, b"refuse me"),
        ("views", b"third"),
    ]
    headers = written[1][2]
    assert headers["enrichd.error.class"] == OUTPUT_REJECTED.encode()
    assert (
        headers["enrichd.error.message"]
        .decode()
        .startswith(
            "MSG_SIZE_TOO_LARGE: topic 'views' refused the record (11 bytes of key and value; "
            "the broker answered: "
        )
    )
    assert (headers["enrichd.source.topic"], headers["enrichd.source.offset"]) == (
        b"tweets",
        b"2",
    )
    # Written again by producers that send one record per batch, a new one each round.
    assert sum(p.one_per_batch for p in broker.producers) == 2
    # Every marker to partition 0, where the group's offset points and readers look,
    # whatever partitions the markers topic has.
    assert broker.marker_partitions == [0, 0]
    assert task.records == {"views": 2, DEAD_LETTERS: 1}
    assert task.dead_letters == {OUTPUT_REJECTED: 1}


def test_a_refusal_that_purges_the_marker_and_later_records_is_written_again_alike(
    broker: Broker,
) -> None:
    """The marker and the records after a refused one fail as purged, not refused: the
    refusal is what the task acts on (once, a replay failed on the marker's purge)."""
    broker.purges = True
    task = output()
    for row in (view(b"first", 1), view(b"refuse me", 2), view(b"third", 3)):
        task.send_row(row)
    task.commit()

    assert broker.aborted == 2
    assert broker.markers == [1]  # only the last round's marker was delivered
    (written,) = broker.committed
    assert [(topic, value) for topic, value, _ in written] == [
        ("views", b"first"),
        (DEAD_LETTERS, b"refuse me"),
        ("views", b"third"),
    ]
    assert task.records == {"views": 2, DEAD_LETTERS: 1}
    assert task.dead_letters == {OUTPUT_REJECTED: 1}


def test_a_round_of_writing_again_finds_the_batch_committed_by_another_attempt(
    broker: Broker,
) -> None:
    """Each round reads the marker again once its producer fenced the others: an attempt of
    the task that committed the batch meanwhile wins, and this one writes nothing."""
    task = output()
    task.send_row(view(b"refuse me", 1))
    task.open()
    broker.marker = Marker(4, task.share)  # committed elsewhere, after this task began
    task.commit()
    assert broker.committed == [] and task.skipped
    assert broker.aborted == 1  # the first try only


def test_a_dead_letter_the_dead_letter_topic_refuses_too_fails_the_task_with_one_line(
    broker: Broker,
) -> None:
    broker.refuses[DEAD_LETTERS] = b"refuse"
    task = output()
    task.send_row(view(b"refuse me", 7))
    with pytest.raises(RuntimeError) as failed:
        task.commit()
    assert str(failed.value) == (
        f"pipeline 'views': the dead-letter topic '{DEAD_LETTERS}' refused the "
        f"{OUTPUT_REJECTED} dead letter made from input topic 'tweets' partition 1 offset 7 "
        "(MSG_SIZE_TOO_LARGE: Broker: Message size too large); raise its max.message.bytes, "
        "or lower the client's message.max.bytes to it"
    )
    assert broker.committed == []


@pytest.mark.parametrize(
    "error", [KafkaError.REQUEST_TIMED_OUT, KafkaError.TOPIC_AUTHORIZATION_FAILED]
)
def test_an_error_that_is_no_refusal_fails_the_task_as_before(broker: Broker, error: int) -> None:
    broker.error = error
    task = output()
    task.send_row(view(b"refuse me", 1))
    with pytest.raises(KafkaException):
        task.commit()
    assert broker.committed == []
    assert not any(p.one_per_batch for p in broker.producers)  # nothing was written again


def test_a_round_of_writing_again_that_fails_aborts_its_transaction_first(
    broker: Broker,
) -> None:
    """An error in a round is no refusal (the coordinator timed out): the task fails, and
    leaves no transaction open to hold read_committed readers until its timeout."""
    broker.offsets_fail = True
    task = output()
    task.send_row(view(b"refuse me", 1))
    task.send_row(view(b"second", 2))
    with pytest.raises(KafkaException, match="no coordinator answer"):
        task.commit()
    # The first try's, the round that found the refused record, and the one that failed.
    assert broker.aborted == 3
    assert broker.committed == []


def test_without_a_dead_letter_topic_a_refusal_fails_the_task(broker: Broker) -> None:
    task = output(dead_letter_topic=None)
    task.send_row(view(b"refuse me", 1))
    with pytest.raises(KafkaException):
        task.commit()
    assert broker.committed == []


def test_rows_held_past_the_memory_budget_are_written_again_from_disk(broker: Broker) -> None:
    """What a task holds is bounded by bytes: past them its rows wait in a file, and a
    refusal writes them all again from there (no cap after which the batch fails)."""
    task = output(held_bytes=1_000)
    for offset in range(50):
        task.send_row(view(b"refuse me" if offset == 30 else b"x" * 100, offset))
    assert task._rows.spilled > 0
    task.commit()
    (written,) = broker.committed
    assert [topic for topic, _, _ in written] == ["views"] * 30 + [DEAD_LETTERS] + ["views"] * 19
    assert task.dead_letters == {OUTPUT_REJECTED: 1}
