"""What the joiner operator runs, and with what: its joiner, codecs and outputs, made on the driver.

An :class:`OperatorPlan` is pickled with the ``transformWithState`` processor
(:mod:`daemon.operator.processor`), which works from it on executors.
"""

from __future__ import annotations

from dataclasses import dataclass

from daemon.formats.avro.codec import AvroCodec
from daemon.formats.kafka_keys import KafkaKeyCodec
from daemon.model.envelope import Envelope
from daemon.model.headers import HeaderPolicy
from daemon.model.selection import SelectFunction
from daemon.plugin.joiner import Joiner


@dataclass(frozen=True)
class OperatorPlan:
    """What the processor needs on executors; pickled with it."""

    joiner: Joiner
    codecs: dict[str, AvroCodec]
    output_codec: AvroCodec
    output_topic: str
    dead_letter_topic: str
    plugin: str
    outputs: dict[str, tuple[str, AvroCodec]] | None = None
    """Secondary outputs by name: topic and codec."""
    inputs: tuple[tuple[str, str], ...] = ()
    """Role and topic of each input, in the source's order (a row's ``input``)."""
    envelopes: dict[str, Envelope] | None = None
    """The value envelope of each role that has one (``debezium``)."""
    output_keys: dict[str | None, KafkaKeyCodec] | None = None
    """How keys are written, by output (None: the main one), where not as UTF-8 text."""
    state_cache: bool = True
    """Whether buckets stay decoded in the Python worker between micro-batches
    (:mod:`daemon.operator.bucket_cache`; ``[state] cache``)."""
    state_cache_bytes: int | None = None
    """The worker cache's byte budget; None: sized from the worker's memory."""
    state_deltas: bool = True
    """Whether a call that changed a few keys of a bucket appends them as a delta instead of
    writing the bucket whole (:mod:`daemon.operator.bucket_delta`; ``[state] deltas``)."""
    selects: dict[str | None, SelectFunction] | None = None
    """The pipeline's select, by each output it shapes (None: the main one; and the
    retractions of its answers, which are in the main output's schema)."""
    headers: HeaderPolicy = "none"
    """Which input headers the outputs carry (the pipeline's ``headers``,
    :mod:`daemon.model.headers`); the source reads them unless ``"none"``."""
