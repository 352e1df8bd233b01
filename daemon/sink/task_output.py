"""One Spark task's share of a micro-batch, written to Kafka exactly once.

Who writes: the joiner operator (:mod:`daemon.operator.processor`) hands each output record to
its task's :class:`TaskOutput` as the joiner yields it, and commits when Spark closes the
operator at the end of the task, before Spark commits the task's state. (The Kafka sink,
:mod:`daemon.sink.spark_sink`, uses the same class for rows it is given to write.)

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

Records are held back in the task until it commits (or until it holds :data:`HELD_RECORDS`,
which bounds its memory), and only then produced. The transaction is open from the task's
first record, but until its first record is produced it holds only the marker: the output
partitions join it at the end. So an open transaction holds back ``read_committed`` readers of
the output (at its last stable offset) only for the time the commit takes, and a task killed
before it commits has written nothing, which also keeps crash tests checkable on a broker that
shows aborted records to ``read_committed`` readers (Tansu, the test broker; see
``tests/delivery/test_crash_recovery.py``).

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

A record the client refuses to produce (one larger than ``message.max.bytes``, librdkafka's
limit, which it checks before the record joins the transaction) goes to the dead-letter topic
instead, as an :data:`OUTPUT_REJECTED` dead letter with the client's error name and the
source record's provenance; the transaction goes on and commits with it. The refusal must be
known when the record is sent, where it is counted: a record that may be near the limit
(:data:`NEAR_LIMIT_SLACK`) ends the holding back, so that it and everything after it are
produced as they come. A dead letter too large for its own topic keeps its headers and the
start of its value, with an :data:`CUT_HEADER` header giving the value's whole length.

A record the broker refuses (larger than the topic's ``max.message.bytes``, failing its
validation: :data:`~daemon.sink.refusals.REFUSALS`) fails its delivery, which makes the
transaction abortable: the commit raises the error, or a record produced as it comes meets
``_STATE`` first. So the task keeps every record it put into the transaction (a refused
one's dead letter in its place), up to :data:`HELD_RECORDS`, and writes them all again
(:meth:`TaskOutput._write_again`): a new producer takes the id over, as at the start of a
task, opens a transaction with the marker and sends one record per batch, so that the
broker's answer is about that record alone; each refused record becomes an
:data:`OUTPUT_REJECTED` dead letter with the broker's error and the source record's
provenance, in the next round, until one commits. The other records are written once, in
the transaction that commits; readers never see the aborted ones (Tansu, the test broker,
shows them all the same: ``tests/committed_read.py``). A task that let go of its records
(more than :data:`HELD_RECORDS`), and a dead letter refused in turn, fail the task with
one line naming the record's source, as Kafka Streams fails on a record it cannot send by
default: the micro-batch is retried, and reported as stuck if it keeps failing.
"""

from __future__ import annotations

from typing import Any

from pyspark import TaskContext

from daemon.kafka import connect, names
from daemon.kafka.clients import Deliveries, produce
from daemon.model.reports import BatchCounts
from daemon.model.wire import OUTPUT, OutputRow
from daemon.report_socket import send
from daemon.sink.commit_turn import ending_transaction
from daemon.sink.refusals import (
    OUTPUT_REJECTED,
    DeliveryNotes,
    FirstRefusal,
    is_refusal,
    provenance,
    refusal_of,
)
from daemon.sink.spec import OutputSpec

_PRODUCERS: dict[str, Any] = {}  # idempotent producers, kept by a reused Python worker
_TRANSACTIONAL: dict[str, tuple[Any, str, int]] = {}
"""Transactional producers by transactional id, kept by a reused Python worker between the
batches it writes, each with its marker group and the last batch committed in that group when
it was kept (see :meth:`TaskOutput._begin`)."""
_SPARES: dict[str, Any] = {}
"""A connected, uninitialised producer per transactional id this worker wrote with, for the
next time it must take the id over (see :meth:`TaskOutput._new_producer`)."""
_MARKER_READERS: dict[str, Any] = {}  # consumers that read a task's batch marker
_GROUPS: dict[str, Any] = {}  # consumer-group metadata of the batch markers
_TOPIC = OUTPUT.position("topic")
_VALUE = OUTPUT.position("value")
_ERROR_CLASS = OUTPUT.position("error_class")
CUT_HEADER = "enrichd.error.cut"
"""The header of a dead letter whose value was cut to fit its topic: the value's whole length."""
DEFAULT_MESSAGE_MAX_BYTES = 1_000_000
"""librdkafka's ``message.max.bytes`` when ``[kafka] client_conf`` does not set it."""
NEAR_LIMIT_SLACK = 65_536
"""Bytes below ``message.max.bytes`` from which a value may make its record too large (with
its key, headers and the record's framing)."""
_CUT_SLACK = 1_024
"""Bytes a cut dead letter leaves for the record's framing (librdkafka counts tens)."""
HELD_RECORDS = 100_000
"""Records a task holds back before it starts producing them (see the module docstring)."""
_ABORT_WAIT_S = 2.0
"""How long the abort of a transaction with a refused record may wait (see _abort_refused)."""
_FLUSH_STEP_S = 0.2
"""How often a task writing its output again looks for a refusal while it flushes."""
_DELIVERY_REPORTS = {"delivery.report.only.error": True}
"""An at-least-once task only needs to hear of failed deliveries; a report per record is a
Python callback per record. It hears of them when it flushes, at commit: nothing else polls
the producer, which sends on its own threads (and ``produce`` polls when the local queue is
full). A transactional task passes no callback at all: see :attr:`TaskOutput._deliveries`."""


class TaskOutput:
    """The output of one task of one micro-batch (see the module docstring).

    The transaction opens at :meth:`open` or the first :meth:`send`, or at :meth:`commit` for
    a task that wrote nothing, so that its marker still says the batch is done.
    """

    def __init__(self, spec: OutputSpec, partition: int, batch_id: int, query_id: str) -> None:
        self.spec = spec
        self.partition = partition
        self.batch_id = batch_id
        self.query_id = query_id
        self.records: dict[str, int] = {}
        """Records sent, by topic."""
        self.dead_letters: dict[str, int] = {}
        """Dead letters sent, by reason (their ``enrichd.error.class`` header)."""
        self.skipped = False
        """The batch was committed before: this replay writes nothing."""
        self._producer: Any = None
        self._opened = False
        self._held: list[tuple[Any, ...]] | None = []
        """Records sent but not yet produced; None once they go out as they come."""
        self._written: list[tuple[Any, ...]] | None = (
            [] if spec.delivery == "exactly_once" else None
        )
        """Records produced (a client-refused one's dead letter in its place), kept to write
        them again if the broker refuses one (:meth:`_write_again`); None past
        :data:`HELD_RECORDS`, and without a transaction to write again."""
        self._doomed: BaseException | None = None
        """What made the transaction abortable while records went out as they came: the rest
        wait in :attr:`_written` for :meth:`_write_again`."""
        self._first_refusal: FirstRefusal | None = None
        self.reports_refusals = True
        """Whether :meth:`commit` sends the dead letters of broker refusals to the daemon's
        metrics itself (the operator's calls have handed their counts on by then); the Spark
        sink, which reads :attr:`dead_letters` after the commit, sets it False."""
        self._limit = message_max_bytes(spec.client_conf)
        self._near_limit = self._limit - NEAR_LIMIT_SLACK
        """Values longer than this may be refused: see the module docstring."""
        self._deliveries = None if spec.delivery == "exactly_once" else Deliveries()
        """Failed deliveries (see _DELIVERY_REPORTS). None in a transaction: its commit fails
        if any of its records was not delivered (librdkafka's ``commit_transaction``), and
        a callback passed with each record costs the task's thread a call per record."""
        self._on_delivery: Any = self._deliveries
        """The callback passed with each record produced as it comes (see :meth:`_release`)."""

    @classmethod
    def of_task(cls, spec: OutputSpec) -> TaskOutput:
        """The output of the Spark task this Python worker runs."""
        context = TaskContext.get()
        partition = context.partitionId() if context else 0
        batch_id = int((context.getLocalProperty("streaming.sql.batchId") if context else 0) or 0)
        # Stable across restarts from one checkpoint; a new checkpoint gets a new one.
        query_id = (context.getLocalProperty("sql.streaming.queryId") if context else None) or ""
        return cls(spec, partition, batch_id, query_id)

    @property
    def opened(self) -> bool:
        """Whether the task sent anything yet (or committed)."""
        return self._opened

    def send(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        timestamp: int | None,
        source_topic: str | None = None,
        source_partition: int | None = None,
        source_offset: int | None = None,
        error_class: str | None = None,
        error_message: str | None = None,
    ) -> None:
        """Write one record: the columns of :class:`~daemon.model.wire.OutputRow`."""
        self.send_row(
            OutputRow(
                topic,
                key,
                value,
                timestamp,
                source_topic,
                source_partition,
                source_offset,
                error_class,
                error_message,
            )
        )

    def send_row(self, row: tuple[Any, ...]) -> None:
        """:meth:`send` of a whole row, kept as it is.

        The row is an :class:`~daemon.model.wire.OutputRow`, or a plain tuple of its columns
        in order. It is held back until the commit, or until :data:`HELD_RECORDS` are held: see the
        module docstring.
        """
        if not self._opened:
            self.open()
        if self.skipped:
            return
        held = self._held
        if held is None:
            row = self._stream(row)
        else:
            value = row[_VALUE]
            if value is not None and len(value) > self._near_limit:
                # It may be refused: the refusal must be known now, while it can be counted,
                # and the records before it must go first.
                self._release()
                row = self._stream(row)
            else:
                held.append(row)
                if len(held) >= HELD_RECORDS:
                    self._release()
        # Counted here, not by a call: this runs once per output record.
        topic = row[_TOPIC]
        self.records[topic] = self.records.get(topic, 0) + 1
        kind = row[_ERROR_CLASS]
        if kind is not None:
            self.dead_letters[kind] = self.dead_letters.get(kind, 0) + 1

    def _count(self, row: tuple[Any, ...], n: int) -> None:
        """Add ``n`` to the counts of what ``row`` is: a record of its topic, a dead letter."""
        topic = row[_TOPIC]
        self.records[topic] = self.records.get(topic, 0) + n
        kind = row[_ERROR_CLASS]
        if kind is not None:
            self.dead_letters[kind] = self.dead_letters.get(kind, 0) + n

    def _release(self, *, at_commit: bool = False) -> None:
        """Send the records held back, and from now on each as it comes.

        A held record the client refuses (its value was short, so a long key or headers did
        it) is counted again as what went instead: for the operator's calls, whose counts
        have gone to the sink by the commit, that correction is lost.

        Released before the commit, a transaction's records are produced with a callback
        that keeps the first the broker refuses (:class:`FirstRefusal`): past
        :data:`HELD_RECORDS` it names the record in the line the task fails with.
        """
        held, self._held = self._held, None
        if not held:
            return
        if not at_commit and self._deliveries is None:
            self._first_refusal = self._on_delivery = FirstRefusal()
        on_delivery = self._on_delivery
        for index, row in enumerate(held):
            try:
                sent = self._produce(row, on_delivery)
            except Exception as exc:
                if self._deliveries is not None or not _abortable(exc):
                    raise
                self._doomed = exc  # a delivery failed: the rest waits (see commit)
                break
            if sent is not row:
                held[index] = sent
                self._count(row, -1)
                self._count(sent, 1)
        written = self._written
        if written is not None:
            if written:
                written.extend(held)
            else:
                written = self._written = held
            if len(written) > HELD_RECORDS:
                self._written = None

    def _stream(self, row: tuple[Any, ...]) -> tuple[Any, ...]:
        """Produce a record as it comes, and keep it for a redo while the task still can.

        Returns:
            The row produced, as :meth:`_produce`.
        """
        written = self._written
        if self._doomed is None:
            try:
                row = self._produce(row, self._on_delivery)
            except Exception as exc:
                if written is None or self._deliveries is not None or not _abortable(exc):
                    raise
                self._doomed = exc
        if written is not None:
            written.append(row)
            if len(written) > HELD_RECORDS:
                self._written = None
        if self._doomed is not None and self._written is None:
            raise RuntimeError(self._cannot_write_again(self._doomed))
        return row

    def _produce(self, row: tuple[Any, ...], on_delivery: Any = None) -> tuple[Any, ...]:
        """Produce one record; while the local queue is full, :func:`produce` waits for room.

        The first try calls the client directly: this runs once per output record, and a
        call through :func:`produce` cost a Python frame each time.

        Returns:
            The row produced: ``row``, or the dead letter that went instead (see
            :meth:`_refused`).
        """
        # A whole row in OutputRow's column order, unpacked in one step (cheaper than nine
        # lookups by position, per record).
        topic, key, value, timestamp, source_topic, partition, offset, error, message = row
        headers = headers_of(source_topic, partition, offset, error, message)
        stamp = timestamp or 0  # librdkafka reads 0 as "now": a missing one is the write time
        try:
            try:
                self._producer.produce(
                    topic,
                    value=value,
                    key=key,
                    headers=headers,
                    on_delivery=on_delivery,
                    timestamp=stamp,
                )
            except BufferError:
                produce(
                    self._producer,
                    topic,
                    value,
                    key,
                    headers=headers,
                    on_delivery=on_delivery,
                    timestamp=stamp,
                )
        except Exception as exc:
            refusal = refusal_of(exc)
            if refusal is None or self.spec.dead_letter_topic is None:
                raise
            return self._refused(row, refusal, on_delivery)
        return row

    def _letter(self, row: tuple[Any, ...], error: Any, *, by_broker: bool) -> tuple[Any, ...]:
        """The :data:`OUTPUT_REJECTED` dead letter of an output record its topic refused.

        It is the record as it was, with the source record's provenance, in the dead-letter
        topic; its reason starts with the error's name (``error``, a ``KafkaError``).
        """
        topic, key, value, timestamp, source_topic, partition, offset, _, _ = row
        size = len(key or b"") + len(value or b"")
        why = (
            f"the broker answered: {error.str()}"
            if by_broker
            else f"the client's message.max.bytes is {self._limit}"
        )
        return (
            self.spec.dead_letter_topic,
            key,
            value,
            timestamp,
            source_topic,
            partition,
            offset,
            OUTPUT_REJECTED,
            f"{error.name()}: topic {topic!r} refused the record ({size} bytes of key and "
            f"value; {why})",
        )

    def _refused(self, row: tuple[Any, ...], error: Any, on_delivery: Any) -> tuple[Any, ...]:
        """Dead-letter a record the client refused (``error``, its ``KafkaError``).

        An output record goes to the dead-letter topic as :meth:`_letter` makes it. A dead
        letter that is refused in turn (too large for the dead-letter topic too) goes there
        cut (:meth:`_produce_cut`).
        """
        if row[_TOPIC] != self.spec.dead_letter_topic:
            letter = self._letter(row, error, by_broker=False)
            try:
                return self._produce_cut(letter, on_delivery, cut=False)
            except Exception as exc:
                if refusal_of(exc) is None:
                    raise
            row = letter
        return self._produce_cut(row, on_delivery, cut=True)

    def _produce_cut(self, row: tuple[Any, ...], on_delivery: Any, *, cut: bool) -> tuple[Any, ...]:
        """Produce a dead letter, its value cut to fit ``message.max.bytes`` if ``cut``.

        A cut letter keeps its headers and the start of its value; :data:`CUT_HEADER` gives
        the value's whole length.
        """
        topic, key, value, timestamp, source_topic, partition, offset, kind, message = row
        headers = headers_of(source_topic, partition, offset, kind, message)
        if cut and value is not None:
            headers.append((CUT_HEADER, str(len(value)).encode("utf-8")))
            used = len(key or b"") + sum(len(name) + len(data) for name, data in headers)
            value = value[: max(self._limit - used - _CUT_SLACK, 0)]
        produce(
            self._producer,
            topic,
            value,
            key,
            headers=headers,
            on_delivery=on_delivery,
            timestamp=timestamp or 0,
        )
        return row

    def commit(self) -> None:
        """Deliver everything sent and commit it with the batch's marker.

        Raises:
            RuntimeError: a record was not delivered (the transaction is aborted).
            KafkaException: the broker refused the commit (aborted likewise).
        """
        # Late: confluent_kafka loads with the first client (daemon.model.constants says why).
        from confluent_kafka import KafkaException

        if not self._opened:
            self.open()
        if self.skipped:
            return
        producer = self._producer
        transactional = self.spec.delivery == "exactly_once"
        refused: BaseException | None = None
        try:
            self._release(at_commit=True)
            producer.flush()
            if self._deliveries is not None and self._deliveries.failures:
                failures = self._deliveries.failures
                raise RuntimeError(f"{len(failures)} records were not delivered: {failures[0]}")
            if transactional:
                # A transaction made abortable while records went out (self._doomed) fails
                # here too, with the failed delivery's error: that says whether it was refused.
                try:
                    with ending_transaction(self.spec.commit_turn):
                        producer.commit_transaction()
                except KafkaException as exc:
                    if not self._refused_by_broker(exc):
                        raise
                    refused = exc
                    _abort_refused(producer, self.spec.commit_turn)
        except BaseException:
            if transactional:
                try:
                    with ending_transaction(self.spec.commit_turn):
                        producer.abort_transaction(10)
                except KafkaException:
                    pass  # nothing open, or already fenced: the next init aborts it anyway
            raise
        if refused is not None:
            self._write_again(refused)  # with a producer of its own: this one is not kept
        elif transactional:
            _TRANSACTIONAL[self._txn_id] = (producer, self._group, self.batch_id)

    def _refused_by_broker(self, exc: BaseException) -> bool:
        """Whether the transaction failed because the broker refused one of its records.

        ``exc`` made the transaction abortable: the commit's error, which is the first
        failed delivery's, or the error a record produced as it came met once a failed
        delivery had made the transaction abortable; for that one the producer's callback
        (:class:`FirstRefusal`) says what the failed delivery was.
        """
        if self.spec.dead_letter_topic is None or not _abortable(exc):
            return False
        error = exc.args[0]
        if error.txn_requires_abort() and is_refusal(error):
            return True
        first = self._first_refusal
        if first is None:
            return False
        self._producer.flush()  # serves the delivery reports still waiting
        return first.line is not None

    def _write_again(self, first: BaseException) -> None:
        """Write the task's output again, each record the broker refuses as a dead letter.

        Each round a new producer takes the transactional id over, as at the start of a
        task, which aborts the transaction the last one left open and fences that one. It
        sends one record per batch, so that the broker's answer is about that record alone
        (the broker refuses a batch whole, and librdkafka fails each of its records). It
        writes the marker and every record, those refused so far as their dead letters
        (:meth:`_letter`), and commits if nothing more is refused; otherwise it goes round
        again. A round that finds nothing new to dead-letter fails the task: a dead letter
        refused in turn, or an error that is no refusal.

        Raises:
            RuntimeError: one line for the operator, when the output cannot be written so.
        """
        # Late: confluent_kafka loads with the first client (daemon.model.constants says why).
        from confluent_kafka import TopicPartition

        rows = self._written
        if rows is None:
            raise RuntimeError(self._cannot_write_again(first))
        letters: dict[int, tuple[Any, ...]] = {}
        while True:
            # A new producer each round (see _abort_refused), which fences the last one.
            producer = self._producer = _transactional_producer(
                self.spec, self._txn_id, {"batch.num.messages": 1}
            )
            with ending_transaction(self.spec.commit_turn):
                producer.init_transactions(30)
            self._open_transaction(producer, self._group, TopicPartition(self.spec.marker_topic, 0))
            notes = DeliveryNotes()
            for index, row in enumerate(rows):
                try:
                    self._produce(letters.get(index, row), notes.of(index))
                except Exception as exc:
                    if not _abortable(exc):
                        raise
                    break  # a refusal came back already: the rest go in the next round
            # Until every record is answered, or one is refused: records queued behind a
            # refused one wait for the abort (a new epoch), or else the transaction's timeout.
            while producer.flush(_FLUSH_STEP_S) and not notes.refused:
                pass
            if not notes.refused and not notes.failed:
                with ending_transaction(self.spec.commit_turn):
                    producer.commit_transaction()
                break
            _abort_refused(producer, self.spec.commit_turn)
            if not notes.refused:  # records failed for another reason; with a refusal,
                # they may have failed only because it made the transaction abortable
                raise RuntimeError(
                    f"pipeline {self.spec.pipeline!r}: writing its output again after a "
                    f"refused record, {len(notes.failed)} records were not delivered: "
                    f"{notes.failed[0]}"
                )
            for index, error in sorted(notes.refused.items()):
                row = letters.get(index, rows[index])
                if row[_TOPIC] == self.spec.dead_letter_topic:
                    raise RuntimeError(self._dead_letter_refused(row, error))
                letters[index] = self._letter(row, error, by_broker=True)
        for index, letter in letters.items():
            self._count(rows[index], -1)
            self._count(letter, 1)
        address = self.spec.metrics_address
        if self.reports_refusals and address is not None:
            # The operator's calls handed their counts on before this commit.
            refusals = {OUTPUT_REJECTED: len(letters)}
            send(address, BatchCounts(self.spec.pipeline, self.batch_id, dead_letters=refusals))

    def _dead_letter_refused(self, row: tuple[Any, ...], error: Any) -> str:
        """The line a task fails with when the dead-letter topic refuses a record too."""
        topic, *_, source_topic, partition, offset, kind, _ = row
        source = provenance(headers_of(source_topic, partition, offset, None, None))
        return (
            f"pipeline {self.spec.pipeline!r}: the dead-letter topic {topic!r} refused the "
            f"{kind} dead letter made from {source} ({error.name()}: {error.str()}); raise its "
            "max.message.bytes, or lower the client's message.max.bytes to it"
        )

    def _cannot_write_again(self, first: BaseException) -> str:
        """The line a task fails with when a record was refused after it let go of its rows."""
        refusal = self._first_refusal
        if refusal is not None and refusal.line is None:
            self._producer.flush()  # serves the delivery reports still waiting
        what = refusal.line if refusal is not None and refusal.line else str(first)
        return (
            f"pipeline {self.spec.pipeline!r}: {what}; the task wrote more than "
            f"{HELD_RECORDS} records, too many to keep for writing them again with it "
            "dead-lettered, so the micro-batch fails: raise the topic's max.message.bytes, or "
            "lower the client's message.max.bytes to it (the client's refusals are "
            "dead-lettered as they come)"
        )

    @property
    def _txn_id(self) -> str:
        return names.transactional_id(self.spec.id_prefix, self.spec.pipeline, self.partition)

    @property
    def _group(self) -> str:
        """The consumer group whose offset marks the task's last committed batch."""
        spec = self.spec
        return names.marker_group(spec.id_prefix, spec.pipeline, self.query_id, self.partition)

    def open(self) -> None:
        """Open the transaction now, or learn that the batch was committed before."""
        # Late: confluent_kafka loads with the first client (daemon.model.constants says why).
        from confluent_kafka import TopicPartition

        if self._opened:
            return
        self._opened = True
        if self.spec.delivery == "at_least_once":
            self._producer = _idempotent_producer(self.spec)
            return
        marker = TopicPartition(self.spec.marker_topic, 0)
        self._producer = self._begin(self._group, marker)
        self.skipped = self._producer is None

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

        kept = _TRANSACTIONAL.pop(self._txn_id, None)
        if kept is not None:
            producer, kept_group, kept_last = kept
            last = self._last_committed(group, marker)
            if last >= self.batch_id:
                _TRANSACTIONAL[self._txn_id] = kept
                return None
            if (kept_group, kept_last) == (group, last):
                try:
                    return self._open_transaction(producer, group, marker)
                except KafkaException:
                    pass  # fenced after all (it is dropped): start over as a new producer
        producer = self._new_producer()
        last = self._last_committed(group, marker)
        if last >= self.batch_id:
            _TRANSACTIONAL[self._txn_id] = (producer, group, last)
            return None
        return self._open_transaction(producer, group, marker)

    def _new_producer(self) -> Any:
        """A producer that now owns the id: this worker's spare, initialised, if it has one.

        A spare is created (and connects) ahead, but is not initialised, which would fence the
        id's producer in the task that may be running elsewhere. Initialising a producer that
        is already connected is much quicker than making and initialising a new one.
        """
        producer = _SPARES.pop(self._txn_id, None) or _transactional_producer(
            self.spec, self._txn_id
        )
        _SPARES[self._txn_id] = _transactional_producer(self.spec, self._txn_id)
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


def _abortable(exc: BaseException) -> bool:
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


def message_max_bytes(client_conf: dict[str, str]) -> int:
    """The largest record the client produces: ``message.max.bytes`` of ``client_conf``."""
    return int(client_conf.get("message.max.bytes", DEFAULT_MESSAGE_MAX_BYTES))


def headers_of(
    source_topic: str | None,
    source_partition: int | None,
    source_offset: int | None,
    error_class: str | None,
    error_message: str | None,
) -> list[tuple[str, bytes]]:
    """The Kafka headers of an output record: where it came from and, for a dead letter, why."""
    headers = []
    if source_topic is not None:
        topic = _TOPIC_BYTES.get(source_topic)
        if topic is None:
            topic = _TOPIC_BYTES[source_topic] = source_topic.encode("utf-8")
        headers = [
            ("enrichd.source.topic", topic),
            ("enrichd.source.partition", str(source_partition).encode("utf-8")),
            ("enrichd.source.offset", str(source_offset).encode("utf-8")),
        ]
    if error_class is not None:
        headers.append(("enrichd.error.class", error_class.encode("utf-8")))
        if error_message is not None:
            headers.append(("enrichd.error.message", error_message.encode("utf-8")))
    return headers


_TOPIC_BYTES: dict[str, bytes] = {}
"""Source topic names as header values, encoded once (they are few)."""


def forget_kept_clients() -> None:
    """Close and drop what this process keeps between batches (before its broker stops)."""
    for reader in _MARKER_READERS.values():
        reader.close()
    _MARKER_READERS.clear()
    _TRANSACTIONAL.clear()
    _SPARES.clear()
    _PRODUCERS.clear()
    _GROUPS.clear()
