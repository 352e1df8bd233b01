"""One Spark task's share of a micro-batch: what becomes of each record it writes.

Who writes: the joiner operator (:mod:`daemon.operator.processor`) hands each output record to
its task's :class:`TaskOutput` as the joiner yields it, and commits when Spark closes the
operator at the end of the task, before Spark commits the task's state. (The Kafka sink,
:mod:`daemon.sink.spark_sink`, uses the same class for rows it is given to write.) The records
go through the task's producer in one Kafka transaction with the batch's marker, which is
:mod:`daemon.sink.task_producer`'s job: how that stays exactly once, and which producer a
task takes. This module is a record's fate, as Kafka Streams' ``RecordCollector`` beside its
``StreamsProducer``: held back, sent, counted, refused, dead-lettered, written again.

Records are held back in the task until it commits (:class:`~daemon.sink.row_log.RowLog`: in
memory up to ``held_bytes``, the rest in a private file), and only then produced, in a
transaction opened then. So an open transaction holds back ``read_committed`` readers of
the output only for the time the commit takes, the coordinator's ``transaction.timeout.ms``
bounds the commit rather than the task, and a task killed before it commits has written
nothing, which also keeps crash tests checkable on a broker that shows aborted records to
``read_committed`` readers (Tansu, the test broker; see
``tests/delivery/test_crash_recovery.py``).

A record its topic would refuse is known when it is sent, where it is counted: one larger
than its topic takes (:class:`~daemon.sink.spec.WriteLimits`, from the topics'
``max.message.bytes`` asked at start, else the client's ``message.max.bytes``), or without a
key on a compacted topic, goes to the dead-letter topic instead, as an
:data:`OUTPUT_REJECTED` dead letter with the reason and the source record's provenance
(:mod:`daemon.sink.refusals`). Only values that may be near a limit
(:data:`NEAR_LIMIT_SLACK`) are measured whole. A dead letter too large for its own topic
keeps its headers and the start of its value, with a :data:`CUT_HEADER` header giving the
value's whole length.

The broker may still refuse a record (failing its validation:
:data:`~daemon.sink.refusals.REFUSALS`). That fails its delivery and makes the transaction
abortable, and the task writes everything again (:meth:`TaskOutput._write_again`): a new
producer takes the id over, as at the start of a task, reads the marker again (another live
attempt of the task may have committed the batch meanwhile), opens a transaction and sends
one record per batch, so that the broker's answer is about that record alone; each refused
record becomes an :data:`OUTPUT_REJECTED` dead letter with the broker's error, in the next
round, until one commits. A dead letter refused in turn fails the task with one line naming
the record's source, as Kafka Streams fails on a record it cannot send by default: the
micro-batch is retried, and reported as stuck if it keeps failing.

A replay of a batch whose marker says it committed writes nothing; at its end it compares
the input ranges it read (:attr:`TaskOutput.covered`) with the marker's, and a difference
fails the task with a :class:`~daemon.errors.CheckpointDivergedError`
(:mod:`daemon.sink.markers` says why).

Why this module is long: a record's fate is one state machine (held, sent, refused,
dead-lettered, written again, counted) over one task's held rows; split, each part would
reach into the others' rows, counts and producer.
"""

from __future__ import annotations

from typing import Any

from pyspark import TaskContext

from daemon.errors import CheckpointDivergedError
from daemon.kafka.clients import produce
from daemon.model.headers import unpack
from daemon.model.reports import BatchCounts
from daemon.model.wire import OUTPUT, OutputRow
from daemon.report_socket import send
from daemon.sink import refusals
from daemon.sink.markers import Marker, Share, describe
from daemon.sink.refusals import (
    OUTPUT_REJECTED,
    DeliveryNotes,
    FailedDeliveries,
    is_refusal,
    provenance,
    refusal_of,
)
from daemon.sink.row_log import ROW_OVERHEAD, RowLog, row_size
from daemon.sink.spec import OutputSpec
from daemon.sink.task_producer import TaskProducer, abortable

_TOPIC = OUTPUT.position("topic")
_KEY = OUTPUT.position("key")
_VALUE = OUTPUT.position("value")
_ERROR_CLASS = OUTPUT.position("error_class")
_HEADERS = OUTPUT.position("headers")
CUT_HEADER = "enrichd.error.cut"
"""The header of a dead letter whose value was cut to fit its topic: the value's whole length."""
NEAR_LIMIT_SLACK = 65_536
"""Bytes below the smallest topic limit from which a value may make its record too large
(with its key, headers and the record's framing): such a record is measured whole."""
_FLUSH_STEP_S = 0.2
"""How often a task writing its output again looks for a refusal while it flushes."""
_DELIVERY_ROUNDS = 3
"""How many times an at-least-once task sends the records whose delivery failed, before it
fails: only those, never its whole output again."""


class TaskOutput:
    """The output of one task of one micro-batch (see the module docstring).

    :meth:`open` (or the first :meth:`send`) takes the task's producer, fencing any earlier
    one, and reads its marker; :meth:`commit` writes what was sent, in one transaction with
    the batch's marker, so that a task that wrote nothing still marks the batch done.
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
        self.covered: set[str] = set()
        """The ranges the task's packs were read over (:func:`~daemon.model.wire.range_name`),
        noted by the operator: the task's share of the batch, which its marker records."""
        self.timer_ms: int | None = None
        """The batch's processing time, noted by the operator if a timer fired in the task."""
        self.reports_refusals = True
        """Whether :meth:`commit` sends the dead letters of broker refusals to the daemon's
        metrics itself (the operator's calls have handed their counts on by then); the Spark
        sink, which reads :attr:`dead_letters` after the commit, sets it False."""
        self._transaction = TaskProducer(spec, partition, batch_id, query_id)
        self._producer: Any = None
        """The client the records go through: :attr:`TaskProducer.producer`, held here too,
        since it is called once per record."""
        self._opened = False
        self._marker: Marker | None = None
        """The task's last marker, as :meth:`open` found it."""
        self._rows = RowLog(spec.held_bytes)
        """The records sent, until the commit is through."""
        self._cut = RowLog(spec.held_bytes)
        """Dead letters cut to fit their topic, each with its value's whole length."""
        self._sent_instead: dict[int, tuple[Any, ...]] = {}
        """The dead letter that went instead of a held record the client refused at the commit,
        by the record's place in :attr:`_rows`."""
        self._limits = spec.limits
        self._near_limit = spec.limits.smallest - NEAR_LIMIT_SLACK
        """Values longer than this may be refused: see the module docstring."""
        self._compacted = spec.limits.compacted
        self._deliveries = None if spec.delivery == "exactly_once" else FailedDeliveries()
        """Failed deliveries, at least once (see
        ``daemon.sink.task_producer._DELIVERY_REPORTS``). None in a transaction: its commit
        fails if any of its records was not delivered, and a callback passed with each record
        costs the task's thread a call per record."""

    @classmethod
    def of_task(cls, spec: OutputSpec) -> TaskOutput:
        """The output of the Spark task this Python worker runs."""
        return cls(spec, *running_task())

    @property
    def opened(self) -> bool:
        """Whether the task sent anything yet (or committed)."""
        return self._opened

    @property
    def share(self) -> Share:
        """What the task read of the batch (see :attr:`covered`)."""
        return Share(frozenset(self.covered), self.timer_ms)

    def adopt(self, producer: TaskProducer, committed: Marker | None) -> None:
        """Write through ``producer``, which took the id over already, instead of opening.

        ``committed``: the marker of this batch, found before (it writes nothing then);
        None: it was not committed.
        """
        self._transaction, self._producer = producer, producer.producer
        self._opened, self._marker = True, committed
        self.skipped = committed is not None

    def open(self) -> None:
        """Take the producer, fencing earlier ones, and learn whether the batch was committed."""
        if self._opened:
            return
        self._opened = True
        self._marker = self._transaction.begin()
        self.skipped = self._marker is not None and self._marker.batch >= self.batch_id
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
        in order. It is held until the commit; one its topic would refuse becomes a dead
        letter now (see the module docstring).
        """
        if not self._opened:
            self.open()
        if self.skipped:
            return
        value = row[_VALUE]
        held: tuple[Any, ...] | None = row
        if value is not None and len(value) > self._near_limit:
            held = self._fitted(row)
        elif self._compacted and row[_KEY] is None and row[_TOPIC] in self._compacted:
            held = self._dead_letter(row, "INVALID_RECORD", refusals.KEYLESS)
        if held is None:
            return  # a dead letter kept apart, cut, and counted
        key, value, carried = held[_KEY], held[_VALUE], held[_HEADERS]
        # row_size, inline: this runs once per output record.
        size = ROW_OVERHEAD + (len(key) if key else 0) + (len(value) if value else 0)
        if carried is not None:
            size += len(carried)
        self._rows.append(held, size)
        # Counted here, not by a call: this runs once per output record.
        topic = held[_TOPIC]
        self.records[topic] = self.records.get(topic, 0) + 1
        kind = held[_ERROR_CLASS]
        if kind is not None:
            self.dead_letters[kind] = self.dead_letters.get(kind, 0) + 1

    def _fitted(self, row: tuple[Any, ...]) -> tuple[Any, ...] | None:
        """``row``, or the dead letter that goes instead if its topic would refuse it.

        A dead letter too large for the dead-letter topic is kept apart, cut (:attr:`_cut`),
        and counted: then None.
        """
        limit, why = self._limits.of_topic(row[_TOPIC])
        if refusals.record_bytes(row, headers_of) <= limit:
            return row
        return self._dead_letter(row, "MSG_SIZE_TOO_LARGE", why)

    def _dead_letter(self, row: tuple[Any, ...], name: str, why: str) -> tuple[Any, ...] | None:
        """The dead letter of a record its topic refuses (``name``: the error's, ``why``).

        None: the dead letter was too large for its own topic, and is kept apart, cut, and
        counted (:attr:`_cut`).
        """
        dead_letter_topic = self.spec.dead_letter_topic
        if dead_letter_topic is None:
            topic = row[_TOPIC]
            raise RuntimeError(
                f"pipeline {self.spec.pipeline!r}: topic {topic!r} refuses a record made from "
                f"{provenance(headers_of(*row[4:9]))} ({name}: {why}), and the pipeline has "
                "no dead-letter topic"
            )
        letter = row
        if row[_TOPIC] != dead_letter_topic:
            letter = refusals.letter(row, dead_letter_topic, name, why)
        limit, _ = self._limits.of_topic(dead_letter_topic)
        if refusals.record_bytes(letter, headers_of) <= limit:
            return letter
        cut, whole = refusals.cut(letter, limit, headers_of)
        self._cut.append((*cut, whole), row_size(None, cut[_VALUE]))
        self._count(cut, 1)
        return None

    def _count(self, row: tuple[Any, ...], n: int) -> None:
        """Add ``n`` to the counts of what ``row`` is: a record of its topic, a dead letter."""
        topic = row[_TOPIC]
        self.records[topic] = self.records.get(topic, 0) + n
        kind = row[_ERROR_CLASS]
        if kind is not None:
            self.dead_letters[kind] = self.dead_letters.get(kind, 0) + n

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

    def _refused(self, row: tuple[Any, ...], error: Any, on_delivery: Any) -> tuple[Any, ...]:
        """Dead-letter a record the client refused when it was produced (``error``).

        The limits the task knows make that rare (a record with headers far larger than its
        value): the dead letter goes in its place, cut if the dead-letter topic refuses it
        too; the operator's calls counted it as a record already.
        """
        dead_letter_topic = self.spec.dead_letter_topic
        assert dead_letter_topic is not None  # noqa: S101 - checked by the caller
        client = self._limits.client_bytes
        why = f"the client's message.max.bytes is {client}"
        if row[_TOPIC] != dead_letter_topic:
            letter = refusals.letter(row, dead_letter_topic, error.name(), why)
            try:
                return self._produce_cut(letter, None, on_delivery)
            except Exception as exc:
                if refusal_of(exc) is None:
                    raise
            row = letter
        cut, whole = refusals.cut(row, client, headers_of)
        return self._produce_cut(cut, whole, on_delivery)

    def _produce_cut(self, row: tuple[Any, ...], whole: int | None, on_delivery: Any) -> Any:
        """Produce a dead letter; ``whole``: its value was cut from that many bytes."""
        topic, key, value, timestamp, source_topic, partition, offset, kind, message, carried = row
        headers = headers_of(source_topic, partition, offset, kind, message, carried)
        if whole is not None:
            headers.append((CUT_HEADER, str(whole).encode("utf-8")))
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

        A replay of a batch committed before writes nothing, and checks that it read what
        the marker says the batch covered.

        Raises:
            CheckpointDivergedError: the replay read other input than the batch committed.
            RuntimeError: a record was not delivered (the transaction is aborted).
            KafkaException: the broker refused the commit (aborted likewise).
        """
        if not self._opened:
            self.open()
        try:
            if self.skipped:
                self._check_replay()
            elif self._transaction.transactional:
                self._commit_transaction()
            else:
                self._deliver()
        finally:
            self._rows.close()
            self._cut.close()

    def _commit_transaction(self) -> None:
        """Write the held records in a transaction with the marker, and commit it.

        A kept producer that another producer of the id fenced learns it here: the task
        starts over once, as a new producer that reads the marker again (:meth:`_taken_over`).
        """
        # Late: confluent_kafka loads with the first client (daemon.model.constants says why).
        from confluent_kafka import KafkaException

        transaction = self._transaction
        for last_try in (not transaction.kept, True):
            try:
                self._write()
            except Exception as exc:
                if self._refused_by_broker(exc):
                    transaction.abort_refused()
                    self._write_again()  # with a producer of its own: this one is not kept
                    return
                transaction.abort()
                if last_try or not isinstance(exc, KafkaException):
                    raise
                if self._taken_over():
                    return
                continue
            transaction.keep()
            return

    def _taken_over(self) -> bool:
        """Take the id over with a new producer; whether the batch proved committed meanwhile."""
        self._marker = self._transaction.take_over()
        self._producer = self._transaction.producer
        if self._marker is None or self._marker.batch < self.batch_id:
            return False
        self.skipped = True
        self._transaction.keep()
        self._check_replay()
        return True

    def _write(self) -> None:
        """Open the transaction, produce what the task holds and the marker, and commit.

        What it holds: its records, and the dead letters cut to fit their topic. A record
        the client refuses is dead-lettered in its place.
        """
        transaction = self._transaction
        transaction.open_transaction()
        self._producer = transaction.producer
        sent_instead = self._sent_instead
        try:
            for index, held in enumerate(self._rows):
                row = sent_instead.get(index, held)
                sent = self._produce(row)
                if sent is not row:
                    sent_instead[index] = sent
            for cut in self._cut:
                self._produce_cut(cut[:-1], cut[-1], None)
        except Exception as exc:
            if not abortable(exc):
                raise
            # A delivery failed and the transaction must abort: the commit says why.
        transaction.commit(self.share)
        if sent_instead:  # rare: one pass over the held rows, which may be on disk
            instead = enumerate(self._rows)
            self._recount([(held, sent_instead[i]) for i, held in instead if i in sent_instead])

    def _check_replay(self) -> None:
        """Fail if this replay read other input than the batch the marker says committed.

        Raises:
            CheckpointDivergedError: see :mod:`daemon.sink.markers`.
        """
        marker = self._marker
        if marker is None or marker.share is None:
            return  # an older enrichd's marker records no ranges
        pipeline, task = self.spec.pipeline, self.partition
        if marker.batch > self.batch_id:
            raise CheckpointDivergedError(
                f"pipeline {pipeline!r}: task {task} runs micro-batch {self.batch_id}, but its "
                f"marker says micro-batch {marker.batch} was written to Kafka already: the "
                "checkpoint lost batches whose output is in Kafka (a host crash, a restored "
                'snapshot or a copied checkpoint); see docs/operations.md, "When the '
                'checkpoint and the output disagree"'
            )
        share = self.share
        if marker.share.digest == share.digest:
            return
        raise CheckpointDivergedError(
            f"pipeline {pipeline!r}: micro-batch {self.batch_id} was written to Kafka over "
            f"other input than the checkpoint now plans for it: task {task}'s marker says "
            f"it covered {describe(marker.share, share)}, and this run read "
            f"{describe(share, marker.share)}; the checkpoint lost what the output holds (a "
            "host crash, a restored snapshot or a copied checkpoint), and the pipeline stops "
            'rather than skip or duplicate records: see docs/operations.md, "When the '
            'checkpoint and the output disagree"'
        )

    def _refused_by_broker(self, exc: BaseException) -> bool:
        """Whether the transaction failed because the broker refused one of its records.

        ``exc`` made the transaction abortable: the commit's error, which is the first
        failed delivery's (:meth:`TaskProducer.commit` finds it).
        """
        if self.spec.dead_letter_topic is None or not abortable(exc):
            return False
        error = exc.args[0]
        return bool(error.txn_requires_abort() and is_refusal(error))

    def _write_again(self) -> None:
        """Write the task's output again, each record the broker refuses as a dead letter.

        Each round a new producer takes the transactional id over, as at the start of a
        task, which aborts the transaction the last one left open and fences that one, and
        reads the marker again: another attempt of the task that committed the batch
        meanwhile wins, and this one writes nothing. It sends one record per batch, so that
        the broker's answer is about that record alone (the broker refuses a batch whole, and
        librdkafka fails each of its records). It writes every record, those refused so far
        as their dead letters, and the marker, and commits if nothing more is refused;
        otherwise it goes round again. A round that finds nothing new to dead-letter fails
        the task: a dead letter refused in turn, or an error that is no refusal.

        Raises:
            RuntimeError: one line for the operator, when the output cannot be written so.
        """
        transaction = self._transaction
        dead_letter_topic = self.spec.dead_letter_topic
        assert dead_letter_topic is not None  # noqa: S101 - a refusal needs one
        letters: dict[int, tuple[Any, ...]] = {}
        while True:
            # A new producer each round (see TaskProducer.abort_refused), which fences the
            # last one; the marker is read again, after it.
            marker = transaction.take_over({"batch.num.messages": 1})
            producer = self._producer = transaction.producer
            if marker is not None and marker.batch >= self.batch_id:
                self._marker, self.skipped = marker, True
                self._check_replay()
                return
            transaction.open_transaction()
            try:
                notes = self._write_round(producer, letters)
                if notes.complete:
                    transaction.commit(self.share)
                    break
            except BaseException:
                # Never leave the round's transaction open: it would hold read_committed
                # readers, and the marker group's offsets, until the transaction timeout.
                transaction.abort_refused()
                raise
            transaction.abort_refused()
            if not notes.refused:  # records failed for another reason; with a refusal,
                # they may have failed only because it made the transaction abortable
                raise RuntimeError(
                    f"pipeline {self.spec.pipeline!r}: writing its output again after a "
                    f"refused record, {len(notes.failed) + notes.purged} records were not "
                    f"delivered: {(notes.failed or ['purged by the client'])[0]}"
                )
            refused = self._rows_at(notes.refused, letters)
            for index, error in sorted(notes.refused.items()):
                found = refused.get(index)
                if found is None or found[_TOPIC] == dead_letter_topic:
                    raise RuntimeError(self._dead_letter_refused(found, error))
                why = f"the broker answered: {error.str()}"
                letters[index] = refusals.letter(found, dead_letter_topic, error.name(), why)
        replaced = self._rows_at(letters, {})
        self._recount([(replaced[index], letter) for index, letter in letters.items()])

    def _write_round(self, producer: Any, letters: dict[int, tuple[Any, ...]]) -> DeliveryNotes:
        """Produce a round of :meth:`_write_again`, flushed until all are answered or one refused.

        ``letters``: the dead letters that take refused records' places in this round.
        """
        notes = DeliveryNotes()
        for index, held in enumerate(self._rows):
            row = letters.get(index, self._sent_instead.get(index, held))
            try:
                self._produce(row, notes.of(index))
            except Exception as exc:
                if not abortable(exc):
                    raise
                break  # a refusal came back already: the rest go in the next round
        else:
            for place, cut in enumerate(self._cut):
                self._produce_cut(cut[:-1], cut[-1], notes.of(-place - 1))
        # Until every record is answered, or one is refused: records queued behind a refused
        # one wait for the abort (a new epoch), or else the transaction's timeout.
        while producer.flush(_FLUSH_STEP_S) and not notes.refused:
            pass
        return notes

    def _rows_at(
        self, indexes: dict[int, Any], letters: dict[int, tuple[Any, ...]]
    ) -> dict[int, tuple[Any, ...]]:
        """The rows the task sent at ``indexes``, as they went out last.

        A cut dead letter's index is negative (-1 is the first); a dead letter of
        ``letters`` stands in place of its record. One pass over the held rows, which may
        be on disk.
        """
        found = {}
        for index, held in enumerate(self._rows):
            if index in indexes:
                found[index] = letters.get(index, self._sent_instead.get(index, held))
        for place, cut in enumerate(self._cut):
            if -place - 1 in indexes:
                found[-place - 1] = cut[:-1]
        return found

    def _recount(self, replaced: list[tuple[tuple[Any, ...], tuple[Any, ...]]]) -> None:
        """Count each record of ``replaced`` as the dead letter that went instead of it.

        The client or the broker refused it after the operator's calls had told the daemon's
        metrics of it as a record: they hear of the dead letters here.
        """
        if not replaced:
            return
        for row, letter in replaced:
            self._count(row, -1)
            self._count(letter, 1)
        address = self.spec.metrics_address
        if self.reports_refusals and address is not None:
            refused = {OUTPUT_REJECTED: len(replaced)}
            send(address, BatchCounts(self.spec.pipeline, self.batch_id, dead_letters=refused))

    def _deliver(self) -> None:
        """At least once: produce the held records, then again those whose delivery failed.

        Only those, :data:`_DELIVERY_ROUNDS` times at most, a record the broker refused as
        its dead letter: a failed task would send its whole output again.

        Raises:
            RuntimeError: records were still not delivered, or the dead-letter topic refused
                a dead letter.
        """
        deliveries = self._deliveries
        assert deliveries is not None  # noqa: S101 - at least once
        replaced = []
        for held in self._rows:
            sent = self._produce(held, deliveries)
            if sent is not held:
                replaced.append((held, sent))
        for cut in self._cut:
            self._produce_cut(cut[:-1], cut[-1], deliveries)
        self._producer.flush()
        dead_letter_topic = self.spec.dead_letter_topic
        for _ in range(_DELIVERY_ROUNDS):
            failed = deliveries.take()
            if not failed:
                break
            for error, row in failed:
                if is_refusal(error) and dead_letter_topic is not None:
                    if row[_TOPIC] == dead_letter_topic:
                        raise RuntimeError(self._dead_letter_refused(row, error))
                    why = f"the broker answered: {error.str()}"
                    letter = refusals.letter(row, dead_letter_topic, error.name(), why)
                    replaced.append((row, letter))
                    row = letter
                self._produce(row, deliveries)
            self._producer.flush()
        failed = deliveries.take()
        if failed:
            error, row = failed[0]
            raise RuntimeError(
                f"pipeline {self.spec.pipeline!r}: {len(failed)} records were not delivered "
                f"after {_DELIVERY_ROUNDS} tries, the first to topic {row[_TOPIC]!r} "
                f"({error.name()}: {error.str()})"
            )
        self._recount(replaced)

    def _dead_letter_refused(self, row: tuple[Any, ...] | None, error: Any) -> str:
        """The line a task fails with when the dead-letter topic refuses a record too."""
        topic, source, kind = self.spec.dead_letter_topic, "an unknown record", OUTPUT_REJECTED
        if row is not None:
            topic, *_, source_topic, partition, offset, kind, _, _ = row
            source = provenance(headers_of(source_topic, partition, offset, None, None))
        return (
            f"pipeline {self.spec.pipeline!r}: the dead-letter topic {topic!r} refused the "
            f"{kind} dead letter made from {source} ({error.name()}: {error.str()}); raise its "
            "max.message.bytes, or lower the client's message.max.bytes to it"
        )


def running_task() -> tuple[int, int, str]:
    """The Spark task this Python worker runs: its partition, micro-batch and query id.

    The query id is stable across restarts from one checkpoint; a new checkpoint gets a new
    one. Outside a task: partition 0 of batch 0 of no query.
    """
    context = TaskContext.get()
    if context is None:
        return 0, 0, ""
    batch_id = int(context.getLocalProperty("streaming.sql.batchId") or 0)
    return context.partitionId(), batch_id, context.getLocalProperty("sql.streaming.queryId") or ""


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
