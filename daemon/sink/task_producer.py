"""The producer of one Spark task's output, and its transaction's life: the batch marker, fencing.

What a task's records become, one by one (held back, sent, refused, dead-lettered), is
:mod:`daemon.sink.task_output`'s job; this module owns the producer they go through and the
transaction around them, as Kafka Streams' ``StreamsProducer`` does beside its
``RecordCollector``.

How it stays exactly once: every task (one per Spark partition of the joiner's output) owns
the transactional id ``<prefix>.<pipeline>.<partition>`` (``[kafka] id_prefix``, ``enrichd``
by default: :mod:`daemon.kafka.names`). It writes its share of micro-batch N in one Kafka
transaction, and inside that same transaction commits the "offset" N + 1 for the consumer
group ``<prefix>.<pipeline>.sink.<query id>.<partition>``, where the query id is
the one Spark keeps in the checkpoint (a new checkpoint, a new id: its batches start again at
0 and must not be taken for the old ones). The records and that marker become visible
together or not at all. When Spark runs micro-batch N again after a crash, the task first
initialises its transactional id, which aborts any transaction a dead predecessor left open
and fences it off, then reads the marker: if N was already committed it writes nothing.
Spark replays a micro-batch with the same offsets and the same state, so the skipped write is
the one that had landed, and the state the replay recomputes is the state that went with it.

A reused Python worker keeps its producer, and uses it again for the id's next batch if the
marker says it committed the batch before; if another producer initialised the id meanwhile
all the same, the kept one learns it is fenced when it adds the marker, before it writes
anything. Otherwise the task starts over as above. That happens often: Spark hands a task to
whichever Python worker is idle, so a partition's tasks move between workers. Starting over
takes a spare producer the worker created ahead and initialises it, much quicker than
making a new producer (its connections and the coordinator lookup).

The tasks of a micro-batch finish together; on the embedded broker their commits take turns
on each machine (:mod:`daemon.sink.commit_turn`).

``delivery = "at_least_once"`` uses the idempotent producer instead: no transactions, and a
replayed micro-batch may be written twice.

A task that writes its output again after the broker refused a record
(:meth:`TaskProducer.take_over`) has a new producer take the id over, as at the start of a
task, and open a transaction with the marker; a transaction with a refused record is aborted
without waiting for the new epoch the test broker never grants (:meth:`TaskProducer.abort_refused`).
"""

from __future__ import annotations

from typing import Any

from daemon.kafka import connect, names
from daemon.sink.commit_turn import ending_transaction
from daemon.sink.spec import OutputSpec

_PRODUCERS: dict[str, Any] = {}  # idempotent producers, kept by a reused Python worker
_TRANSACTIONAL: dict[str, tuple[Any, str, int]] = {}
"""Transactional producers by transactional id, kept by a reused Python worker between the
batches it writes, each with its marker group and the last batch committed in that group when
it was kept (see :meth:`TaskProducer._begin`)."""
_SPARES: dict[str, Any] = {}
"""A connected, uninitialised producer per transactional id this worker wrote with, for the
next time it must take the id over (see :meth:`TaskProducer._new_producer`)."""
_MARKER_READERS: dict[str, Any] = {}  # consumers that read a task's batch marker
_GROUPS: dict[str, Any] = {}  # consumer-group metadata of the batch markers
_ABORT_WAIT_S = 2.0
"""How long the abort of a transaction with a refused record may wait (see _abort_refused)."""
_DELIVERY_REPORTS = {"delivery.report.only.error": True}
"""An at-least-once task only needs to hear of failed deliveries; a report per record is a
Python callback per record. It hears of them when it flushes, at commit: nothing else polls
the producer, which sends on its own threads (and ``produce`` polls when the local queue is
full). A transactional task passes no callback at all: see
:attr:`daemon.sink.task_output.TaskOutput._deliveries`."""


class TaskProducer:
    """The producer of one task of one micro-batch, and its transaction (see the module docstring).

    :meth:`begin` gives the task its producer, in a transaction that holds the batch's marker
    (exactly once), or learns that the batch was committed before; :meth:`commit` or
    :meth:`abort` ends the transaction, and :meth:`keep` leaves the producer to this worker's
    next task of the id.
    """

    def __init__(self, spec: OutputSpec, partition: int, batch_id: int, query_id: str) -> None:
        self.spec = spec
        self.partition = partition
        self.batch_id = batch_id
        self.query_id = query_id
        self.transactional = spec.delivery == "exactly_once"
        self.producer: Any = None
        """The client the task's records go through; None before :meth:`begin`, and after it
        when the batch was committed before."""

    @property
    def txn_id(self) -> str:
        """The task's transactional id."""
        return names.transactional_id(self.spec.id_prefix, self.spec.pipeline, self.partition)

    @property
    def group(self) -> str:
        """The consumer group whose offset marks the task's last committed batch."""
        spec = self.spec
        return names.marker_group(spec.id_prefix, spec.pipeline, self.query_id, self.partition)

    def begin(self) -> bool:
        """Take a producer, in a transaction with the batch's marker; False: committed before.

        At least once, the worker's idempotent producer, and no transaction.
        """
        # Late: confluent_kafka loads with the first client (daemon.model.constants says why).
        from confluent_kafka import TopicPartition

        if not self.transactional:
            self.producer = _idempotent_producer(self.spec)
            return True
        marker = TopicPartition(self.spec.marker_topic, 0)
        self.producer = self._begin(self.group, marker)
        return self.producer is not None

    def _begin(self, group: str, marker: Any) -> Any:
        """A producer in a transaction that holds the batch's marker; None if committed.

        A producer this worker kept is tried only if it committed the last batch: then no
        other producer has taken the id over since, unless a task attempt that failed did. A
        producer that was fenced learns it when it adds the marker, its first call to the
        broker in the transaction, and is dropped. Spark hands a task to whichever Python
        worker is idle, so a partition's tasks move between workers often; trying the kept
        producer every time made it fail again and again in a latency run (and the client
        log an error line each time) before starting over.

        Starting over, a new producer initialises the id, which fences every other producer
        of it and aborts any transaction one left open, and only then is the marker read: a
        task attempt still running elsewhere can no longer commit the batch behind it.
        """
        # Late: confluent_kafka loads with the first client (daemon.model.constants says why).
        from confluent_kafka import KafkaException

        kept = _TRANSACTIONAL.pop(self.txn_id, None)
        if kept is not None:
            producer, kept_group, kept_last = kept
            last = self._last_committed(group, marker)
            if last >= self.batch_id:
                _TRANSACTIONAL[self.txn_id] = kept
                return None
            if (kept_group, kept_last) == (group, last):
                try:
                    return self._open_transaction(producer, group, marker)
                except KafkaException:
                    pass  # fenced after all (it is dropped): start over as a new producer
        producer = self._new_producer()
        last = self._last_committed(group, marker)
        if last >= self.batch_id:
            _TRANSACTIONAL[self.txn_id] = (producer, group, last)
            return None
        return self._open_transaction(producer, group, marker)

    def _new_producer(self) -> Any:
        """A producer that now owns the id: this worker's spare, initialised, if it has one.

        A spare is created (and connects) ahead, but is not initialised, which would fence the
        id's producer in the task that may be running elsewhere. Initialising a producer that
        is already connected is much quicker than making and initialising a new one.
        """
        producer = _SPARES.pop(self.txn_id, None) or _transactional_producer(self.spec, self.txn_id)
        _SPARES[self.txn_id] = _transactional_producer(self.spec, self.txn_id)
        with ending_transaction(self.spec.commit_turn):  # it aborts a predecessor's leftovers
            producer.init_transactions(30)
        return producer

    def _open_transaction(self, producer: Any, group: str, marker: Any) -> Any:
        producer.begin_transaction()
        marker.offset = self.batch_id + 1
        producer.send_offsets_to_transaction([marker], _group_metadata(self.spec, group))
        return producer

    def _last_committed(self, group: str, marker: Any) -> int:
        """The last batch whose transaction committed, by the marker; -1 for none.

        Read uncommitted: a read-committed offset fetch waits for a transaction that holds
        the group's offsets, which for a kept producer may be one a dead task left open.
        """
        reader = _MARKER_READERS.get(group)
        if reader is None:
            reader = _MARKER_READERS[group] = connect.consumer(
                self.spec.client_conf, {"group.id": group, "isolation.level": "read_uncommitted"}
            )
        committed = reader.committed([marker], timeout=30)[0].offset
        return committed - 1 if committed >= 0 else -1

    def take_over(self, extra: dict[str, Any]) -> Any:
        """A new producer of the id (settings ``extra`` added), in a transaction with the marker.

        As at the start of a task, it aborts the transaction the last producer left open and
        fences that one. Not kept: a task takes it only to write its output again.
        """
        # Late: confluent_kafka loads with the first client (daemon.model.constants says why).
        from confluent_kafka import TopicPartition

        producer = self.producer = _transactional_producer(self.spec, self.txn_id, extra)
        with ending_transaction(self.spec.commit_turn):
            producer.init_transactions(30)
        marker = TopicPartition(self.spec.marker_topic, 0)
        return self._open_transaction(producer, self.group, marker)

    def commit(self) -> None:
        """Commit the transaction: its records and the batch's marker become visible."""
        with ending_transaction(self.spec.commit_turn):
            self.producer.commit_transaction()

    def abort(self) -> None:
        """Abort the transaction, if one is open (a failed task's)."""
        # Late: confluent_kafka loads with the first client (daemon.model.constants says why).
        from confluent_kafka import KafkaException

        try:
            with ending_transaction(self.spec.commit_turn):
                self.producer.abort_transaction(10)
        except KafkaException:
            pass  # nothing open, or already fenced: the next init aborts it anyway

    def abort_refused(self) -> None:
        """Abort a transaction whose records the broker refused (see :func:`_abort_refused`)."""
        _abort_refused(self.producer, self.spec.commit_turn)

    def keep(self) -> None:
        """Leave the producer, which committed the batch, to this worker's next task of the id."""
        _TRANSACTIONAL[self.txn_id] = (self.producer, self.group, self.batch_id)


def _transactional_producer(
    spec: OutputSpec, txn_id: str, extra: dict[str, Any] | None = None
) -> Any:
    """A producer of the id, not yet initialised (creating it fences nothing)."""
    return connect.producer(
        spec.client_conf,
        {
            "transactional.id": txn_id,
            "enable.idempotence": True,
            "linger.ms": 5,
            "partitioner": "murmur2_random",  # the Java client's, so keys land alike
            **_DELIVERY_REPORTS,
            **(extra or {}),
        },
    )


def _abort_refused(producer: Any, commit_turn: bool) -> None:
    """Abort a transaction whose records the broker refused; the producer is dropped after.

    The abort ends the transaction at once, then asks the coordinator for a new epoch of
    the producer (KIP-360: the refused batch left a gap in its sequence numbers). The test
    broker never grants that, so the abort is given :data:`_ABORT_WAIT_S` and the producer
    dropped either way: the next producer of the id starts afresh, as at a task's start,
    and that would abort the transaction too (a broker may wait for the transaction's
    timeout before it lets a new producer in while one is still open, hence the abort).
    """
    # Late: confluent_kafka loads with the first client (daemon.model.constants says why).
    from confluent_kafka import KafkaException

    try:
        with ending_transaction(commit_turn):
            producer.abort_transaction(_ABORT_WAIT_S)
    except KafkaException:
        pass  # timed out waiting for the new epoch: the transaction itself has ended


def abortable(exc: BaseException) -> bool:
    """Whether ``exc`` is a Kafka error that leaves the transaction to be aborted.

    ``produce()`` in a transaction a failed delivery made abortable raises ``_STATE``
    without saying so (librdkafka 2.16, measured); the commit then raises the cause.
    """
    error = exc.args[0] if exc.args else None
    requires_abort = getattr(error, "txn_requires_abort", None)
    if callable(requires_abort) and requires_abort():
        return True
    name = getattr(error, "name", None)
    return callable(name) and name() == "_STATE"


def _idempotent_producer(spec: OutputSpec) -> Any:
    key = f"idempotent.{spec.id_prefix}.{spec.pipeline}"
    producer = _PRODUCERS.get(key)
    if producer is None:
        producer = _PRODUCERS[key] = connect.producer(
            spec.client_conf,
            {
                "enable.idempotence": True,
                "linger.ms": 5,
                "partitioner": "murmur2_random",
                **_DELIVERY_REPORTS,
            },
        )
    return producer


def _group_metadata(spec: OutputSpec, group: str) -> Any:
    metadata = _GROUPS.get(group)
    if metadata is None:
        consumer = connect.consumer(spec.client_conf, {"group.id": group})
        try:
            metadata = _GROUPS[group] = consumer.consumer_group_metadata()
        finally:
            consumer.close()
    return metadata


def forget_kept_clients() -> None:
    """Close and drop what this process keeps between batches (before its broker stops)."""
    for reader in _MARKER_READERS.values():
        reader.close()
    _MARKER_READERS.clear()
    _TRANSACTIONAL.clear()
    _SPARES.clear()
    _PRODUCERS.clear()
    _GROUPS.clear()
