"""Where and how a pipeline writes: the output's settings, made on the driver.

An :class:`OutputSpec` is pickled into the joiner operator, which writes the records
(:mod:`daemon.sink.task_output`), and into the Spark sink's options
(:mod:`daemon.sink.spark_sink`), which counts them; both work from it.
"""

from __future__ import annotations

import base64
import pickle  # noqa: S403 - only our own driver-made spec travels through it
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from daemon.kafka.names import markers_topic
from daemon.model.constants import DEFAULT_ID_PREFIX, DEFAULT_TRANSACTION_TIMEOUT_MS

if TYPE_CHECKING:
    from daemon.kafka.topic_settings import ClusterSettings
    from daemon.model.config import (
        Delivery,  # pydantic's module: Spark's workers need not load it
    )

DEFAULT_MESSAGE_MAX_BYTES = 1_000_000
"""librdkafka's ``message.max.bytes`` when ``[kafka] client_conf`` does not set it."""
RECORD_FRAMING = 100
"""Bytes a record batch of one record takes beside the record's key, value and headers (61
of the batch's header, the rest the record's lengths and deltas): a topic whose
``max.message.bytes`` is M takes a record of up to M - 100 bytes of those."""
DEFAULT_HELD_BYTES = 64 << 20
"""Bytes of output a task holds in memory until it commits (keys, values and a row's
bookkeeping); the rest waits in a private file (:mod:`daemon.sink.row_log`)."""


@dataclass(frozen=True)
class WriteLimits:
    """What each topic takes: the largest record, whether it needs keys.

    And the producer's settings sized from them, as the cluster answered at start
    (:mod:`daemon.kafka.topic_settings`).

    A record over its topic's limit, or without a key on a compacted topic, is made an
    ``OutputRejected`` dead letter when the task gets it, never sent: the broker would
    refuse it, and that would abort the task's transaction.
    """

    record_bytes: dict[str, tuple[int, str]] = field(default_factory=dict)
    """Per topic, the most bytes of key, value and headers a record may have, and whose
    limit that is, for the dead letter's reason."""
    compacted: frozenset[str] = frozenset()
    """The topics whose ``cleanup.policy`` compacts: a record without a key is refused."""
    producer: dict[str, int] = field(default_factory=dict)
    """The producer's settings sized from the limits (``message.max.bytes``, ``batch.size``)."""
    client_bytes: int = DEFAULT_MESSAGE_MAX_BYTES
    """The client's ``message.max.bytes``, for a topic whose limit is unknown."""

    def of_topic(self, topic: str) -> tuple[int, str]:
        """The most bytes of key, value and headers a record of ``topic`` may have, and why."""
        found = self.record_bytes.get(topic)
        if found is not None:
            return found
        return self.client_bytes, f"the client's message.max.bytes is {self.client_bytes}"

    @property
    def smallest(self) -> int:
        """The smallest limit of any topic (the client's, for topics it does not know)."""
        return min([self.client_bytes, *(limit for limit, _ in self.record_bytes.values())])

    @staticmethod
    def sized(
        client_conf: dict[str, str], settings: ClusterSettings | None, topics: list[str]
    ) -> WriteLimits:
        """The limits of ``topics`` by the cluster's ``settings`` (None: not asked).

        A topic's limit is its ``max.message.bytes`` (or the brokers' ``message.max.bytes``)
        less :data:`RECORD_FRAMING`, and the client's ``message.max.bytes`` where the file
        sets it and it is lower. Unless the file sets it, the producer's
        ``message.max.bytes`` becomes the largest topic limit, so that the client lets
        through what a topic takes; its ``batch.size`` (unless set) the smallest, so that a
        batch of small records is never more than a topic takes.
        """
        user_bytes = client_conf.get("message.max.bytes")
        client_bytes = int(user_bytes) if user_bytes is not None else DEFAULT_MESSAGE_MAX_BYTES
        known: dict[str, tuple[int, str]] = {}
        compacted = set()
        for topic in topics:
            described = settings.topics.get(topic) if settings is not None else None
            if described is not None and described.compacted:
                compacted.add(topic)
            broker = settings.message_max_bytes if settings is not None else None
            largest = (described.max_message_bytes if described else None) or broker
            if largest is None:
                continue
            limit = (largest - RECORD_FRAMING, f"the topic's max.message.bytes is {largest}")
            if user_bytes is not None and client_bytes < limit[0]:
                limit = (client_bytes, f"the client's message.max.bytes is {client_bytes}")
            known[topic] = limit
        producer: dict[str, int] = {}
        if known and user_bytes is None:
            producer["message.max.bytes"] = max(
                client_bytes, *(limit + RECORD_FRAMING for limit, _ in known.values())
            )
        if known and "batch.size" not in client_conf:
            smallest = min(limit for limit, _ in known.values())
            producer["batch.size"] = max(min(DEFAULT_MESSAGE_MAX_BYTES, smallest), 1)
        return WriteLimits(known, frozenset(compacted), producer, client_bytes)


@dataclass(frozen=True)
class OutputSpec:
    """Where and how a pipeline writes; pickled into the operator and the sink's options."""

    pipeline: str
    client_conf: dict[str, str]
    delivery: Delivery
    output_topic: str
    """The main output topic. An older enrichd kept its batch markers as offsets on its
    partition 0; a task reads them there once, to migrate (:mod:`daemon.sink.markers`)."""
    metrics_address: str | None = None
    """The daemon's report socket (:mod:`daemon.report_socket`), or None: counts go
    nowhere."""
    dead_letter_topic: str | None = None
    """Where a record the client refuses goes
    (:data:`~daemon.sink.refusals.OUTPUT_REJECTED`); None: the refusal fails the task."""
    id_prefix: str = DEFAULT_ID_PREFIX
    """What the transactional ids, the markers topic and the marker groups start with
    (``[kafka] id_prefix``)."""
    commit_turn: bool = True
    """Whether transactions on one machine end one at a time (:mod:`daemon.sink.commit_turn`;
    the pipeline's plan decides, by its cluster). Taking turns is never wrong, only slower."""
    checkpoint: str | None = None
    """The query's checkpoint folder, where the sink's commit keeps the buckets' due times
    for the planner's clock (:mod:`daemon.checkpoint.due_times`); None: a query without one."""
    transaction_timeout_ms: int = DEFAULT_TRANSACTION_TIMEOUT_MS
    """The producers' ``transaction.timeout.ms`` (``[kafka] transaction_timeout``)."""
    limits: WriteLimits = field(default_factory=WriteLimits)
    """What the topics take (:class:`WriteLimits`)."""
    held_bytes: int = DEFAULT_HELD_BYTES
    """Bytes of output a task holds in memory before it keeps the rest in a file."""

    @property
    def markers_topic(self) -> str:
        """The topic of the pipeline's batch markers (:mod:`daemon.sink.markers`)."""
        return markers_topic(self.id_prefix, self.pipeline)

    def encode(self) -> str:
        """The spec as an option string."""
        return base64.b64encode(pickle.dumps(self)).decode("ascii")

    @staticmethod
    def decode(text: str) -> OutputSpec:
        """The spec back from :meth:`encode`."""
        return pickle.loads(base64.b64decode(text))  # type: ignore[no-any-return]  # noqa: S301
