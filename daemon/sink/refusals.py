"""Records a topic refuses: which errors say so, and what the task hears of them.

A record can be refused twice over: by the Kafka client, in ``produce()``, before it joins
the transaction (larger than ``message.max.bytes``), or by the broker, which answers the
record batch it was sent with an error (larger than the topic's ``max.message.bytes``, or
failing the broker's validation). Either way the record goes to the dead-letter topic as an
:data:`OUTPUT_REJECTED` dead letter; :mod:`daemon.sink.task_output` says how.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

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
        self.failed: list[str] = []
        """Every other failure: the task fails on them."""

    def of(self, index: int) -> Callable[[Any, Any], None]:
        """The ``on_delivery`` callback of row ``index``."""

        def delivered(error: Any, message: Any) -> None:
            if error is None:
                return
            if is_refusal(error):
                self.refused[index] = error
            else:
                self.failed.append(f"{message.topic()}: {error.name()}: {error.str()}")

        return delivered


class FirstRefusal:
    """An ``on_delivery`` callback that keeps the refused records' topic, count and first source.

    A task whose output went out as it came (more records than it holds back) cannot write
    it again; this names what was refused in the line it fails with. The broker refuses a
    record batch whole, so the first refused record named may be one that came with the
    culprit.
    """

    def __init__(self) -> None:
        self.refused = 0
        self._first: tuple[str, str, Any] | None = None

    def __call__(self, error: Any, message: Any) -> None:
        """Take one delivery report (failures only)."""
        if error is None or not is_refusal(error):
            return
        self.refused += 1
        if self._first is None:
            self._first = (message.topic(), provenance(message.headers()), error)

    @property
    def line(self) -> str | None:
        """What was refused, for the operator; None: nothing yet."""
        if self._first is None:
            return None
        topic, source, error = self._first
        return (
            f"topic {topic!r} refused {self.refused} records ({error.name()}: {error.str()}; "
            f"it refuses a record batch whole), the first made from {source}"
        )
