"""Records a topic refuses: which errors say so, what the task hears of them, their dead letters.

A record can be refused three ways: by the task itself, which knows what each topic takes
(:class:`~daemon.sink.spec.WriteLimits`: larger than its ``max.message.bytes``, or without
a key on a compacted topic) and refuses such a record when it is sent; by the Kafka client,
in ``produce()``, before it joins the transaction (larger than ``message.max.bytes``); or by
the broker, which answers the record batch it was sent with an error (failing the broker's
validation). Either way the record goes to the dead-letter topic as an
:data:`OUTPUT_REJECTED` dead letter (:func:`letter`); :mod:`daemon.sink.task_output` says
how.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from daemon.model.headers import dead_letter_headers, pack

OUTPUT_REJECTED = "OutputRejected"
"""The reason (``enrichd.error.class``) of a dead letter its topic refused."""
REFUSALS = frozenset(
    {
        "MSG_SIZE_TOO_LARGE",  # the client's message.max.bytes, or the topic's max.message.bytes
        "RECORD_LIST_TOO_LARGE",  # the batch is larger than the broker's segment
        "INVALID_RECORD",  # the broker's validation (a compacted topic's record without key)
        "INVALID_MSG",  # Java's CORRUPT_MESSAGE: the record failed its check on the broker
        "INVALID_TIMESTAMP",  # outside the topic's message.timestamp.*.max.ms
    }
)
"""librdkafka's names of the errors that are about one record, not about the topic, the broker
or the transaction: the record is dead-lettered and the task goes on. Any other error,
retriable ones and a fenced producer's among them, fails the task as before."""


PURGED = "_PURGE_QUEUE"
"""librdkafka's name of a delivery it gave up because the transaction must abort: a failed
delivery makes the transaction abortable, and the client then purges every record still
queued (``rd_kafka_txn_set_abortable_error0``, 2.16). Such a record was refused nothing;
the failure that came first says why."""


def is_refusal(error: Any) -> bool:
    """Whether ``error`` (a ``KafkaError``) refuses one record (:data:`REFUSALS`)."""
    return bool(error.name() in REFUSALS and not error.retriable() and not error.fatal())


def refusal_of(exc: BaseException) -> Any:
    """The client's error if ``exc`` says it refused one record (:data:`REFUSALS`), else None."""
    error = exc.args[0] if exc.args else None
    name = getattr(error, "name", None)
    if callable(name) and name() in REFUSALS:
        return error
    return None


def provenance(headers: list[tuple[str, bytes | None]] | None) -> str:
    """Where a record came from, by its ``enrichd.source.*`` headers, for an operator's line."""
    found = {
        name: (value or b"").decode("utf-8", "replace")
        for name, value in headers or []
        if name.startswith("enrichd.source.")
    }
    topic = found.get("enrichd.source.topic")
    if topic is None:
        return "no input record"
    partition = found.get("enrichd.source.partition")
    offset = found.get("enrichd.source.offset")
    return f"input topic {topic!r} partition {partition} offset {offset}"


class DeliveryNotes:
    """Per-record delivery reports of a task writing its output again, by the row's index.

    Only failures are reported (``delivery.report.only.error``).
    """

    def __init__(self) -> None:
        self.refused: dict[int, Any] = {}
        """The ``KafkaError`` of each refused row, by its index."""
        self.purged = 0
        """Rows the client purged once a failure made the transaction abortable
        (``_PURGE_QUEUE``): that failure's doing, which is reported on its own."""
        self.failed: list[str] = []
        """Every other failure: the task fails on them."""

    @property
    def complete(self) -> bool:
        """Whether no row failed: the transaction may commit."""
        return not (self.refused or self.purged or self.failed)

    def of(self, index: int) -> Callable[[Any, Any], None]:
        """The ``on_delivery`` callback of row ``index``."""

        def delivered(error: Any, message: Any) -> None:
            if error is None:
                return
            if is_refusal(error):
                self.refused[index] = error
            elif error.name() == PURGED:
                self.purged += 1
            else:
                self.failed.append(f"{message.topic()}: {error.name()}: {error.str()}")

        return delivered


class FailedDeliveries:
    """An at-least-once producer's ``on_delivery`` callback: the records that failed, as rows.

    Only failures are reported (``delivery.report.only.error``); each comes back as the
    :class:`~daemon.model.wire.OutputRow` it was produced from (:func:`row_of`), to be sent
    again or dead-lettered.
    """

    def __init__(self) -> None:
        self.failed: list[tuple[Any, tuple[Any, ...]]] = []

    def __call__(self, error: Any, message: Any) -> None:
        """Take one delivery report."""
        if error is not None:
            self.failed.append((error, row_of(message)))

    def take(self) -> list[tuple[Any, tuple[Any, ...]]]:
        """The failures reported since the last call: each one's error and row."""
        failed, self.failed = self.failed, []
        return failed


def row_of(message: Any) -> tuple[Any, ...]:
    """The output row a produced message was made of (its headers read back).

    enrichd's own headers come last (:func:`daemon.sink.task_output.headers_of`); those
    before them are the ones the row carried, packed again.
    """
    headers = list(message.headers() or [])
    found: dict[str, str] = {}
    while headers and headers[-1][0] in _OWN and headers[-1][0] not in found:
        name, value = headers.pop()
        found[name] = (value or b"").decode("utf-8", "replace")
    partition = found.get("enrichd.source.partition")
    offset = found.get("enrichd.source.offset")
    timestamp = message.timestamp()[1]
    return (
        message.topic(),
        message.key(),
        message.value(),
        timestamp if timestamp > 0 else None,
        found.get("enrichd.source.topic"),
        None if partition is None else int(partition),
        None if offset is None else int(offset),
        found.get("enrichd.error.class"),
        found.get("enrichd.error.message"),
        pack(headers),
    )


_OWN = frozenset(
    (
        "enrichd.source.topic",
        "enrichd.source.partition",
        "enrichd.source.offset",
        "enrichd.error.class",
        "enrichd.error.message",
    )
)
"""The headers enrichd adds to a record after those the record carries."""


KEYLESS = "the topic is compacted (cleanup.policy=compact) and the record has no key"
"""Why a compacted topic refuses a record without a key."""
_HEADER_FRAMING = 10
"""Bytes a header takes beside its name and value at most (their two lengths, as varints)."""
_CUT_SLACK = 1_024
"""Bytes a cut dead letter leaves for the record's framing (librdkafka counts tens)."""

Headers = Callable[..., list[tuple[str, bytes | None]]]
"""How a row's ``source_*`` and ``error_*`` columns become headers
(:func:`daemon.sink.task_output.headers_of`)."""


def record_bytes(row: tuple[Any, ...], headers_of: Headers) -> int:
    """The bytes of a row's key, value and headers as a record.

    As librdkafka measures them, at most: each header's lengths counted at their widest.
    """
    key, value = row[1], row[2]
    headers = headers_of(*row[4:10])
    framing = sum(len(name) + len(data or b"") + _HEADER_FRAMING for name, data in headers)
    return len(key or b"") + len(value or b"") + framing + 1


def letter(row: tuple[Any, ...], dead_letter_topic: str, name: str, why: str) -> tuple[Any, ...]:
    """The :data:`OUTPUT_REJECTED` dead letter of an output record its topic refuses.

    It is the record as it was, with the source record's provenance and the headers it
    carried, in the dead-letter topic; its reason starts with the error's ``name``, and says
    ``why``.
    """
    topic, key, value, timestamp, source_topic, partition, offset, _, _, carried = row
    size = len(key or b"") + len(value or b"")
    reason = f"{name}: topic {topic!r} refused the record ({size} bytes of key and value; {why})"
    return (
        dead_letter_topic,
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


def cut(row: tuple[Any, ...], limit: int, headers_of: Headers) -> tuple[tuple[Any, ...], int]:
    """A dead letter with its value cut to fit ``limit`` bytes, and the value's whole length.

    It keeps its key, its headers and the start of its value; the whole length goes in its
    ``enrichd.error.cut`` header when it is produced.
    """
    topic, key, value, *rest = row
    whole = len(value or b"")
    used = record_bytes((topic, key, None, *rest), headers_of) + 64  # and the cut header
    return (topic, key, (value or b"")[: max(limit - used - _CUT_SLACK, 0)], *rest), whole
