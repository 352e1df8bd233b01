"""One Spark task's share of a micro-batch: what becomes of each record it writes.

Who writes: the joiner operator (:mod:`daemon.operator.processor`) hands each output record to
its task's :class:`TaskOutput` as the joiner yields it, and commits when Spark closes the
operator at the end of the task, before Spark commits the task's state. (The Kafka sink,
:mod:`daemon.sink.spark_sink`, uses the same class for rows it is given to write.) The records
go through the task's producer in one Kafka transaction with the batch's marker, which is
:mod:`daemon.sink.task_producer`'s job: how that stays exactly once, and which producer a
task takes. This module is a record's fate, as Kafka Streams' ``RecordCollector`` beside its
``StreamsProducer``: held back, sent, counted, refused, dead-lettered, written again.

Records are held back in the task until it commits (or until it holds :data:`HELD_RECORDS`,
which bounds its memory), and only then produced. The transaction is open from the task's
first record, but until its first record is produced it holds only the marker: the output
partitions join it at the end. So an open transaction holds back ``read_committed`` readers of
the output (at its last stable offset) only for the time the commit takes, and a task killed
before it commits has written nothing, which also keeps crash tests checkable on a broker that
shows aborted records to ``read_committed`` readers (Tansu, the test broker; see
``tests/delivery/test_crash_recovery.py``).

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

from daemon.kafka.clients import Deliveries, produce
from daemon.model.headers import dead_letter_headers, unpack
from daemon.model.reports import BatchCounts
from daemon.model.wire import OUTPUT, OutputRow
from daemon.report_socket import send
from daemon.sink.refusals import (
    OUTPUT_REJECTED,
    DeliveryNotes,
    FirstRefusal,
    is_refusal,
    provenance,
    refusal_of,
)
from daemon.sink.spec import OutputSpec
from daemon.sink.task_producer import TaskProducer, abortable

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
_FLUSH_STEP_S = 0.2
"""How often a task writing its output again looks for a refusal while it flushes."""


class TaskOutput:
    """The output of one task of one micro-batch (see the module docstring).

    The transaction opens at :meth:`open` or the first :meth:`send`, or at :meth:`commit` for
    a task that wrote nothing, so that its marker still says the batch is done.
    """

    def __init__(self, spec: OutputSpec, partition: int, batch_id: int, query_id: str) -> None:
        self.spec = spec
        self.partition = partition
        self.batch_id = batch_id
        self.records: dict[str, int] = {}
        """Records sent, by topic."""
        self.dead_letters: dict[str, int] = {}
        """Dead letters sent, by reason (their ``enrichd.error.class`` header)."""
        self.skipped = False
        """The batch was committed before: this replay writes nothing."""
        self._transaction = TaskProducer(spec, partition, batch_id, query_id)
        self._producer: Any = None
        """The client the records go through: :attr:`TaskProducer.producer`, held here too,
        since it is called once per record (a lookup through the transaction would cost one
        more attribute lookup each time)."""
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
        """Failed deliveries (see ``daemon.sink.task_producer._DELIVERY_REPORTS``). None in a
        transaction: its commit fails if any of its records was not delivered (librdkafka's
        ``commit_transaction``), and a callback passed with each record costs the task's
        thread a call per record."""
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

    def open(self) -> None:
        """Open the transaction now, or learn that the batch was committed before."""
        if self._opened:
            return
        self._opened = True
        self.skipped = not self._transaction.begin()
        self._producer = self._transaction.producer

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
        headers: bytes | None = None,
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
                headers,
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
                if self._deliveries is not None or not abortable(exc):
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
                if written is None or self._deliveries is not None or not abortable(exc):
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
        # A whole row in OutputRow's column order, unpacked in one step (cheaper than ten
        # lookups by position, per record).
        topic, key, value, timestamp, source_topic, partition, offset, error, message, carried = row
        headers = headers_of(source_topic, partition, offset, error, message, carried)
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

        It is the record as it was, with the source record's provenance and the headers it
        carried, in the dead-letter topic; its reason starts with the error's name (``error``,
        a ``KafkaError``).
        """
        topic, key, value, timestamp, source_topic, partition, offset, _, _, carried = row
        size = len(key or b"") + len(value or b"")
        why = (
            f"the broker answered: {error.str()}"
            if by_broker
            else f"the client's message.max.bytes is {self._limit}"
        )
        reason = (
            f"{error.name()}: topic {topic!r} refused the record ({size} bytes of key and "
            f"value; {why})"
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
            reason,
            dead_letter_headers(carried, OUTPUT_REJECTED, reason),
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
        topic, key, value, timestamp, source_topic, partition, offset, kind, message, carried = row
        headers = headers_of(source_topic, partition, offset, kind, message, carried)
        if cut and value is not None:
            headers.append((CUT_HEADER, str(len(value)).encode("utf-8")))
            used = len(key or b"") + sum(len(name) + len(data or b"") for name, data in headers)
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
        producer, transaction = self._producer, self._transaction
        transactional = transaction.transactional
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
                    transaction.commit()
                except KafkaException as exc:
                    if not self._refused_by_broker(exc):
                        raise
                    refused = exc
                    transaction.abort_refused()
        except BaseException:
            if transactional:
                transaction.abort()
            raise
        if refused is not None:
            self._write_again(refused)  # with a producer of its own: this one is not kept
        elif transactional:
            transaction.keep()

    def _refused_by_broker(self, exc: BaseException) -> bool:
        """Whether the transaction failed because the broker refused one of its records.

        ``exc`` made the transaction abortable: the commit's error, which is the first
        failed delivery's, or the error a record produced as it came met once a failed
        delivery had made the transaction abortable; for that one the producer's callback
        (:class:`FirstRefusal`) says what the failed delivery was.
        """
        if self.spec.dead_letter_topic is None or not abortable(exc):
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
        rows = self._written
        if rows is None:
            raise RuntimeError(self._cannot_write_again(first))
        transaction = self._transaction
        letters: dict[int, tuple[Any, ...]] = {}
        while True:
            # A new producer each round (see TaskProducer.abort_refused), which fences the
            # last one.
            producer = self._producer = transaction.take_over({"batch.num.messages": 1})
            notes = DeliveryNotes()
            for index, row in enumerate(rows):
                try:
                    self._produce(letters.get(index, row), notes.of(index))
                except Exception as exc:
                    if not abortable(exc):
                        raise
                    break  # a refusal came back already: the rest go in the next round
            # Until every record is answered, or one is refused: records queued behind a
            # refused one wait for the abort (a new epoch), or else the transaction's timeout.
            while producer.flush(_FLUSH_STEP_S) and not notes.refused:
                pass
            if not notes.refused and not notes.failed:
                transaction.commit()
                break
            transaction.abort_refused()
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
        topic, *_, source_topic, partition, offset, kind, _, _ = row
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


def message_max_bytes(client_conf: dict[str, str]) -> int:
    """The largest record the client produces: ``message.max.bytes`` of ``client_conf``."""
    return int(client_conf.get("message.max.bytes", DEFAULT_MESSAGE_MAX_BYTES))


def headers_of(
    source_topic: str | None,
    source_partition: int | None,
    source_offset: int | None,
    error_class: str | None,
    error_message: str | None,
    carried: bytes | None = None,
) -> list[tuple[str, bytes | None]]:
    """The Kafka headers of an output record: where it came from and, for a dead letter, why.

    ``carried``: the row's packed headers (:attr:`~daemon.model.wire.OutputRow.headers`), the
    input headers it carries (and a dead letter's KIP-1034 headers), which come first.
    """
    headers = [] if carried is None else unpack(carried)
    if source_topic is not None:
        topic = _TOPIC_BYTES.get(source_topic)
        if topic is None:
            topic = _TOPIC_BYTES[source_topic] = source_topic.encode("utf-8")
        headers += [
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
