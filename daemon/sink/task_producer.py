"""The producer of one Spark task's output, and its transaction's life: the batch marker, fencing.

What a task's records become, one by one (held back, sent, refused, dead-lettered), is
:mod:`daemon.sink.task_output`'s job; this module owns the producer they go through and the
transaction around them, as Kafka Streams' ``StreamsProducer`` does beside its
``RecordCollector``.

How it stays exactly once: every task (one per Spark partition of the joiner's output) owns
the transactional id ``<prefix>.<pipeline>.<partition>`` (``[kafka] id_prefix``, ``enrichd``
by default: :mod:`daemon.kafka.names`). It writes its share of micro-batch N in one Kafka
transaction, which also holds the task's batch marker: a record on the pipeline's markers
topic saying "batch N, over these input ranges", and the offset just past it committed for
the task's marker group (:mod:`daemon.sink.markers`; the group is per query, the one Spark
keeps in the checkpoint: a new checkpoint, a new id, whose batches start again at 0). The
records and the marker become visible together or not at all. When Spark runs micro-batch
N again after a crash, the task first initialises its transactional id, which aborts any
transaction a dead predecessor left open and fences it off, then reads the marker, stable:
if N was already committed it writes nothing, and checks at its end that it read what the
marker says N covered (:class:`~daemon.sink.task_output.TaskOutput`).

The transaction opens only when the task's records are ready, at its commit: a task that
takes long to compute (a backlog, a slow joiner) holds no transaction the coordinator would
abort after ``[kafka] transaction_timeout``, and holds back no ``read_committed`` reader
meanwhile. Fencing stays at the task's start.

A reused Python worker keeps its producer, and uses it again for the id's next batch if the
marker says it committed the batch before; if another producer initialised the id meanwhile
all the same, the kept one learns it is fenced when its transaction meets the broker, at the
commit, and the task starts over there with a new producer, which reads the marker again.
Spark hands a task to whichever Python worker is idle, so a partition's tasks move between
workers often. Starting over takes a spare producer the worker created ahead and
initialises it, much quicker than making a new producer (its connections and the
coordinator lookup).

The tasks of a micro-batch finish together; on the embedded broker their commits take turns
on each machine (:mod:`daemon.sink.commit_turn`).

``delivery = "at_least_once"`` uses the idempotent producer instead: no transactions, no
markers, and a replayed micro-batch may be written twice.

A task that writes its output again after the broker refused a record
(:meth:`TaskProducer.take_over`) has a new producer take the id over, as at the start of a
task, and reads the marker again, so that two live attempts of one task never both commit
a batch; a transaction with a refused record is aborted without waiting for the new epoch
the test broker never grants (:meth:`TaskProducer.abort_refused`).
"""

from __future__ import annotations

from typing import Any

from daemon.kafka import connect, names
from daemon.kafka.clients import produce
from daemon.sink import markers
from daemon.sink.commit_turn import ending_transaction
from daemon.sink.markers import Marker, Share
from daemon.sink.refusals import PURGED
from daemon.sink.spec import OutputSpec

_PRODUCERS: dict[str, Any] = {}  # idempotent producers, kept by a reused Python worker
_TRANSACTIONAL: dict[str, tuple[Any, str, int]] = {}
"""Transactional producers by transactional id, kept by a reused Python worker between the
batches it writes, each with its marker group and the last batch committed in that group when
it was kept (see :meth:`TaskProducer.begin`)."""
_SPARES: dict[str, Any] = {}
"""A connected, uninitialised producer per transactional id this worker wrote with, for the
next time it must take the id over (see :meth:`TaskProducer._new_producer`)."""
_GROUPS: dict[str, Any] = {}  # consumer-group metadata of the batch markers
_ABORT_WAIT_S = 2.0
"""How long the abort of a transaction with a refused record may wait (see _abort_refused)."""
_WAIT_S = 30.0
"""How long a call to the transaction's coordinator may wait."""
_SOCKET_TIMEOUT_MS = 60_000
_MESSAGE_TIMEOUT_MS = 300_000
"""How long a request, and a record's delivery, may take in a transactional producer.

librdkafka stretches both to the transaction timeout (15 minutes by default here) when they
are not set, so that a broker that stops answering would hold a task's flush that long:
these are librdkafka's own request default and Kafka's ``delivery.timeout.ms`` default,
each at most the transaction timeout (which librdkafka requires). ``[kafka] client_conf``
may set either."""
_DELIVERY_REPORTS = {"delivery.report.only.error": True}
"""An at-least-once task only needs to hear of failed deliveries; a report per record is a
Python callback per record. It hears of them when it flushes, at commit: nothing else polls
the producer, which sends on its own threads (and ``produce`` polls when the local queue is
full). A transactional producer reports every delivery, but a record produced without a
callback costs no Python call: only the marker has one, whose offset the marker group must
point at (see :attr:`daemon.sink.task_output.TaskOutput._deliveries`)."""


class TaskProducer:
    """The producer of one task of one micro-batch, and its transaction (see the module docstring).

    :meth:`begin` gives the task its producer and its last marker (exactly once);
    :meth:`open_transaction` opens the transaction once the records are ready, and
    :meth:`commit` adds the marker and commits it, or :meth:`abort` ends it; :meth:`keep`
    leaves the producer to this worker's next task of the id.
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
        self.kept = False
        """Whether :attr:`producer` was kept from an earlier batch: it fenced nothing now, and
        a refusal as fenced at the commit sends the task to start over
        (:meth:`take_over`)."""

    @property
    def txn_id(self) -> str:
        """The task's transactional id."""
        return names.transactional_id(self.spec.id_prefix, self.spec.pipeline, self.partition)

    @property
    def group(self) -> str:
        """The consumer group whose offset points at the task's last batch marker."""
        spec = self.spec
        return names.marker_group(spec.id_prefix, spec.pipeline, self.query_id, self.partition)

    def begin(self) -> Marker | None:
        """Take a producer and read the task's last marker (None: no batch committed yet).

        A marker of this batch or a later one says the batch was committed before: then
        :attr:`producer` is None, and the one taken is kept for the id's next batch. At
        least once, the worker's idempotent producer, and no marker.

        A producer this worker kept is taken only if it committed the last batch: then no
        other producer has taken the id over since, unless a task attempt that failed did,
        and then the kept one learns so at the commit. Spark hands a task to whichever
        Python worker is idle; trying the kept producer every time made it fail again and
        again in a latency run (and the client log an error line each time). Its marker is
        read uncommitted: it may be a batch behind, never ahead, and a kept producer that
        commits fences every other attempt. Otherwise a new producer takes the id over
        (:meth:`take_over`).
        """
        if not self.transactional:
            self.producer = _idempotent_producer(self.spec)
            return None
        kept = _TRANSACTIONAL.pop(self.txn_id, None)
        if kept is not None:
            producer, kept_group, kept_last = kept
            marker = self.marker(stable=False)
            last = -1 if marker is None else marker.batch
            if last >= self.batch_id:
                _TRANSACTIONAL[self.txn_id] = kept
                return marker
            if (kept_group, kept_last) == (self.group, last):
                self.producer, self.kept = producer, True
                return marker
        marker = self.take_over()
        if marker is not None and marker.batch >= self.batch_id:
            _TRANSACTIONAL[self.txn_id] = (self.producer, self.group, marker.batch)
            self.producer = None
        return marker

    def take_over(self, extra: dict[str, Any] | None = None) -> Marker | None:
        """A new producer of the id (settings ``extra`` added), and the task's marker, stable.

        Initialising the id fences every other producer of it and aborts any transaction one
        left open; only then is the marker read (stable), so that a task attempt still
        running elsewhere can no longer commit the batch behind it. With ``extra`` (writing
        the output again) the producer is not kept for later batches.
        """
        self.producer = self._new_producer(extra)
        self.kept = False
        return self.marker(stable=True)

    def marker(self, *, stable: bool) -> Marker | None:
        """The task's last marker (:func:`daemon.sink.markers.task_marker`)."""
        spec = self.spec
        return markers.task_marker(
            spec.client_conf,
            spec.id_prefix,
            spec.pipeline,
            self.query_id,
            self.partition,
            spec.output_topic,
            stable=stable,
        )

    def _new_producer(self, extra: dict[str, Any] | None = None) -> Any:
        """A producer that now owns the id: this worker's spare, initialised, if it has one.

        A spare is created (and connects) ahead, but is not initialised, which would fence the
        id's producer in the task that may be running elsewhere. Initialising a producer that
        is already connected is much quicker than making and initialising a new one.
        """
        if extra is not None:
            producer = _transactional_producer(self.spec, self.txn_id, extra)
        else:
            producer = _SPARES.pop(self.txn_id, None) or _transactional_producer(
                self.spec, self.txn_id
            )
            _SPARES[self.txn_id] = _transactional_producer(self.spec, self.txn_id)
        with ending_transaction(self.spec.commit_turn):  # it aborts a predecessor's leftovers
            producer.init_transactions(_WAIT_S)
        return producer

    def open_transaction(self) -> None:
        """Open the transaction: the task's records are ready to go out."""
        self.producer.begin_transaction()

    def commit(self, share: Share) -> int:
        """Add the batch's marker (the task read ``share`` of it) and commit; the marker's offset.

        The marker record goes out last; once every record is delivered, the marker group's
        offset is set just past it, in the transaction, and the transaction commits: its
        records, the marker and the group's offset become visible together.

        Raises:
            KafkaException: a record or the marker was not delivered (then the error is the
                first failed delivery's, which made the transaction abortable, not the
                marker's purge that followed), or the coordinator refused;
                the transaction is then to be aborted.
        """
        # Late: confluent_kafka loads with the first client (daemon.model.constants says why).
        from confluent_kafka import KafkaError, KafkaException, TopicPartition

        producer, topic = self.producer, self.spec.markers_topic
        delivered: list[tuple[Any, Any]] = []
        try:
            # The task's records may fill the client's queue: the marker waits for room.
            produce(
                producer,
                topic,
                self.marker_of(share).encode(),
                markers.record_key(self.query_id, self.partition),
                partition=0,  # the group's offset and every read are of partition 0
                on_delivery=lambda error, message: delivered.append((error, message)),
            )
            producer.flush()
            if not delivered:
                raise KafkaException(KafkaError(KafkaError._TIMED_OUT, "the marker is unsent"))
            error, message = delivered[0]
            if error is not None:
                raise KafkaException(error)
            after = TopicPartition(topic, 0, int(message.offset()) + 1)
            metadata = _group_metadata(self.spec, self.group)
            producer.send_offsets_to_transaction([after], metadata, _WAIT_S)
        except (KafkaException, SystemError) as raised:
            exc = _kafka_error(raised)
            if exc is None:
                raise
            if not abortable(exc) and not purged(exc):
                raise exc from None
            raise self._cause(exc) from None
        with ending_transaction(self.spec.commit_turn):
            producer.commit_transaction(_WAIT_S)
        return after.offset - 1

    def marker_of(self, share: Share) -> Marker:
        """The marker a commit of ``share`` writes."""
        return Marker(self.batch_id, share)

    def _cause(self, exc: Exception) -> Exception:
        """What made the transaction abortable (``exc`` says only that it is).

        A commit fails with the first failed delivery's error, where ``produce()`` only
        says ``_STATE`` and a purged marker ``_PURGE_QUEUE`` (librdkafka 2.16; only an
        abortable transaction purges, so that commit fails too).
        """
        # Late: confluent_kafka loads with the first client (daemon.model.constants says why).
        from confluent_kafka import KafkaException

        try:
            with ending_transaction(self.spec.commit_turn):
                self.producer.commit_transaction(_WAIT_S)
        except KafkaException as cause:
            return cause
        return exc

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
            "transaction.timeout.ms": spec.transaction_timeout_ms,
            **_timeouts(spec),
            "enable.idempotence": True,
            "linger.ms": 5,
            "partitioner": "murmur2_random",  # the Java client's, so keys land alike
            **spec.limits.producer,
            **(extra or {}),
        },
    )


def _timeouts(spec: OutputSpec) -> dict[str, int]:
    """The request and delivery timeouts of a transactional producer (see _SOCKET_TIMEOUT_MS)."""
    wanted = {
        "socket.timeout.ms": min(_SOCKET_TIMEOUT_MS, spec.transaction_timeout_ms),
        "message.timeout.ms": min(_MESSAGE_TIMEOUT_MS, spec.transaction_timeout_ms),
    }
    return {name: value for name, value in wanted.items() if name not in spec.client_conf}


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


def purged(exc: BaseException) -> bool:
    """Whether ``exc`` is a delivery the client purged because the transaction must abort.

    The marker, produced after the task's records, fails so when a refusal of one of them
    comes back before it left (:data:`~daemon.sink.refusals.PURGED`).
    """
    error = exc.args[0] if exc.args else None
    name = getattr(error, "name", None)
    return callable(name) and name() == PURGED


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
                **spec.limits.producer,
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
    markers.forget_readers()
    _TRANSACTIONAL.clear()
    _SPARES.clear()
    _PRODUCERS.clear()
    _GROUPS.clear()


def _kafka_error(exc: BaseException) -> Any:
    """The client's error behind ``exc``, or None.

    A fenced producer's ``flush()`` sets the fatal error as a Python exception and then calls
    a delivery callback, which Python reports as ``SystemError`` ("returned a result with an
    exception set") with the ``KafkaException`` as its context (confluent-kafka 2.x, measured).
    """
    # Late: confluent_kafka loads with the first client (daemon.model.constants says why).
    from confluent_kafka import KafkaException

    if isinstance(exc, KafkaException):
        return exc
    behind = exc.__cause__ or exc.__context__
    return behind if isinstance(exc, SystemError) and isinstance(behind, KafkaException) else None
