"""What the Kafka source reads, and how: its inputs and settings, made on the driver.

A :class:`SourceSpec` is pickled into the data source's options; the planner
(:mod:`daemon.source.planning`) and the readers on executors (:mod:`daemon.source.reading`) both
work from it.
"""

from __future__ import annotations

import base64
import pickle  # noqa: S403 - only our own driver-made spec travels through it
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from daemon.formats.avro.codec import AvroCodec
from daemon.formats.kafka_keys import KafkaKeyCodec
from daemon.kafka.clients import RANGE_FETCH
from daemon.kafka.names import reader_group
from daemon.model.constants import DEFAULT_ID_PREFIX, DEFAULT_STATE_BUCKETS
from daemon.model.envelope import Envelope
from daemon.model.keys import key_parts
from daemon.model.record_route import Routing, route
from daemon.source.key_router import KeyRouter


@dataclass(frozen=True)
class SourceInput:
    """One input topic and how to read its records."""

    role: str
    topic: str
    key_field: str | tuple[str, ...]
    """The join key: a value field, or several, or parts of the Kafka key (daemon.model.keys)."""
    time_field: str | None
    codec: AvroCodec
    keyed_tombstones: bool = True
    """Whether the Kafka key of a tombstone is its join key (see Joiner.keyed_tombstones)."""
    kafka_keys: KafkaKeyCodec = field(default_factory=KafkaKeyCodec)
    """How the topic's Kafka keys are read (``key_format``)."""
    envelope: Envelope | None = None
    """The values' envelope (``debezium``), or None when a value is the row."""
    bootstrap: bool = False
    """Whether a new query reads this input to the end it had at start before any other
    input's record (see :data:`BOOTSTRAP` and Joiner.bootstrap_roles)."""

    @cached_property
    def routed_fields(self) -> tuple[str, ...]:
        """The fields the source reads of every record: the join key, then the event time.

        Only for an input without a :attr:`router`, whose key is one value field.
        """
        assert isinstance(self.key_field, str)  # noqa: S101 - see router
        return (self.key_field,) if self.time_field is None else (self.key_field, self.time_field)

    @cached_property
    def millis_fields(self) -> tuple[str, ...]:
        """The routed field that may be a ``timestamp-millis``: the event time."""
        return () if self.time_field is None else (self.time_field,)

    def route_decoded(
        self, value: dict[str, Any] | None, kafka_key: bytes | None, timestamp: int
    ) -> Routing:
        """Route a decoded value as the source routes its bytes (for replay's markers)."""
        if self.router is not None:
            return self.router.route(value, kafka_key, timestamp)
        assert isinstance(self.key_field, str)  # noqa: S101 - see router
        return route(
            value,
            kafka_key,
            timestamp,
            role=self.role,
            key_field=self.key_field,
            time_field=self.time_field,
            keyed_tombstones=self.keyed_tombstones,
        )

    @cached_property
    def router(self) -> KeyRouter | None:
        """How the records are routed, unless by one field of the value (None).

        The common case, a join key from one field of a value that is the row, with the
        Kafka key as text for tombstones, keeps its own path
        (:func:`daemon.source.reading._route`), which costs no more per record than it did
        before keys could be composite or come from the Kafka key; everything else goes
        through a :class:`~daemon.source.key_router.KeyRouter`.
        """
        parts = key_parts(self.key_field)
        if (
            len(parts) == 1
            and not parts[0].from_kafka_key
            and self.kafka_keys.key_format == "string"
            and self.envelope is None
        ):
            return None
        return KeyRouter(
            self.role,
            parts,
            self.time_field,
            self.keyed_tombstones,
            self.kafka_keys,
            self.envelope,
        )


@dataclass(frozen=True)
class SourceSpec:
    """Everything the source needs; pickled into the data source's options."""

    inputs: tuple[SourceInput, ...]
    client_conf: dict[str, str]
    max_records_per_batch: int
    state_buckets: int = DEFAULT_STATE_BUCKETS
    """How many state buckets the join keys are hashed into (the ``bucket`` column)."""
    read_tasks: int = 0
    """How many Spark tasks read a micro-batch at most (the cluster's cores); 0: one task
    per Kafka partition."""
    read_on_driver: bool = False
    """Read each micro-batch on the driver, in the process that plans it, and hand its packs
    to Spark there (:class:`daemon.source.spark_source.DriverStreamReader`): no Python task
    reads; for small batches. The packs and their ranges are the executors' reader's."""
    wake_ms: int = 0
    """How often the plan's :data:`CLOCK` may move, for a joiner that wakes quiet keys; 0: no
    clock."""
    trigger_ms: int = 0
    """The query's processing-time trigger (0: none). With one, Spark asks for a plan once per
    trigger, so a plan that reads nothing returns at once instead of waiting for a record
    (:data:`~daemon.source.long_poll.IDLE_WAIT_S`)."""
    checkpoint: str | None = None
    """The query's checkpoint folder, whose due-time map tells the planner when a bucket's
    timer is due (:mod:`daemon.checkpoint.due_times`); None: the clock moves every ``wake_ms``."""
    start: dict[str, Any] | None = None
    """Where a new checkpoint starts reading (``"topic/partition"`` -> offset, and the topics'
    ids as :data:`~daemon.model.wire.TOPIC_IDS`), from its seed (:mod:`daemon.state.seed`);
    None, and for partitions it leaves out: the earliest."""
    pipeline: str = ""
    """The pipeline's name, for the lines about offsets the broker no longer has."""
    on_missing_offsets: str = "fail"
    """What to do when a partition no longer has the offset to read next: ``fail``,
    ``earliest`` or ``latest`` (:mod:`daemon.source.missing_offsets`)."""
    metrics_address: str | None = None
    """The daemon's report socket (:mod:`daemon.report_socket`), told where the source went on
    past missing offsets; None: only logged."""
    id_prefix: str = DEFAULT_ID_PREFIX
    """``[kafka] id_prefix``: the readers name the group :func:`reader_group` of it."""
    headers: bool = False
    """Whether the readers read each record's headers (:attr:`~daemon.model.wire.InputRow.headers`):
    unless the pipeline's ``headers`` policy is ``"none"``."""

    def consumer_conf(self) -> dict[str, Any]:
        """The settings of every consumer the source makes: assigned, never in a group."""
        return {
            **self.client_conf,
            "group.id": reader_group(self.id_prefix),  # required; never joined or committed
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "enable.partition.eof": False,
            "isolation.level": "read_committed",
        }

    def reader_conf(self) -> dict[str, Any]:
        """The settings of the consumers that read planned ranges.

        ``auto.offset.reset = error``: an offset the broker no longer has is an error to
        handle (:mod:`daemon.source.missing_offsets`), not a jump elsewhere without a word.
        ``check.crcs = true``: a record batch corrupted on the broker or on the way is an error
        that ends the read (librdkafka does not check by default; Kafka's Java consumer does).
        """
        return {
            **self.consumer_conf(),
            **RANGE_FETCH,
            "auto.offset.reset": "error",
            "check.crcs": True,
        }

    def encode(self) -> str:
        """The spec as an option string."""
        return base64.b64encode(pickle.dumps(self)).decode("ascii")

    @staticmethod
    def decode(text: str) -> SourceSpec:
        """The spec back from :meth:`encode`."""
        return pickle.loads(base64.b64decode(text))  # type: ignore[no-any-return]  # noqa: S301
