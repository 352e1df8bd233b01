"""A proxy in front of the session's broker that refuses chosen records, as a Kafka broker would.

A Kafka broker refuses a record batch it was sent when the batch is larger than the topic's
``max.message.bytes`` (``MESSAGE_TOO_LARGE``, error 10), or when its validation fails
(``INVALID_RECORD``, 87; ``CORRUPT_MESSAGE``, 2). Tansu, the test broker, enforces none of
these, so this proxy does it for the topics whose name starts with a prefix: a Produce
request's partition whose record batch holds :attr:`RefusingProxy.marker` (uncompressed, as
enrichd's producers send) is not sent on to the broker, and its answer says
:attr:`RefusingProxy.error`. Everything else passes through.

It stands in front of a broker that advertises its own port (the session's), so it rewrites
that port to its own in Metadata and FindCoordinator answers (tests/kafka_proxy.py): every
client that bootstraps from the proxy then sends everything through it, its coordinator
requests too.
"""

from __future__ import annotations

import struct
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, ClassVar

from daemon.broker import EmbeddedBroker
from daemon.verify.protocol import Reader, bytes_, string
from tests.kafka_proxy import READVERTISED, RewritingProxy, readvertise
from tests.ports import free_port

PRODUCE = 0
MESSAGE_TOO_LARGE = 10


@dataclass
class _Produce:
    """A Produce request as read: its header fields and its record batches by topic."""

    transactional_id: str | None
    acks: int
    timeout: int
    topics: list[tuple[str, list[tuple[int, bytes | None]]]] = field(default_factory=list)

    @classmethod
    def read(cls, version: int, body: bytes) -> _Produce:
        reader = Reader(body)
        transactional_id = reader.string() if version >= 3 else None
        acks, timeout = reader.int16(), reader.int32()
        produce = cls(transactional_id, acks, timeout)
        for _ in range(reader.int32()):
            topic = reader.string() or ""
            partitions: list[tuple[int, bytes | None]] = []
            for _ in range(reader.int32()):
                partition = reader.int32()
                partitions.append((partition, reader.bytes_()))
            produce.topics.append((topic, partitions))
        return produce

    def write(self, version: int) -> bytes:
        out = string(self.transactional_id) if version >= 3 else b""
        out += struct.pack(">hi", self.acks, self.timeout) + struct.pack(">i", len(self.topics))
        for topic, partitions in self.topics:
            out += string(topic) + struct.pack(">i", len(partitions))
            for partition, records in partitions:
                out += struct.pack(">i", partition) + bytes_(records)
        return out


def _partition_answer(version: int, partition: int, error: int) -> bytes:
    """One partition's part of a Produce answer (v0-v8): ``error``, and no offsets."""
    out = struct.pack(">ihq", partition, error, -1)
    if version >= 2:
        out += struct.pack(">q", -1)  # log append time
    if version >= 5:
        out += struct.pack(">q", -1)  # log start offset
    if version >= 8:
        out += struct.pack(">i", 0) + string(None)  # record errors; error message
    return out


def _add_refusals(version: int, body: bytes, refused: dict[str, list[int]], error: int) -> bytes:
    """A Produce answer (after the correlation id) with the ``refused`` partitions added."""
    topics: list[tuple[str, list[bytes]]] = []
    reader = Reader(body)
    for _ in range(reader.int32()):
        topic = reader.string() or ""
        parts: list[bytes] = []
        for _ in range(reader.int32()):
            start = reader.at
            reader.take(4 + 2 + 8 + (8 if version >= 2 else 0) + (8 if version >= 5 else 0))
            if version >= 8:
                for _ in range(reader.int32()):  # record errors
                    reader.int32()
                    reader.string()
                reader.string()  # error message
            parts.append(body[start : reader.at])
        topics.append((topic, parts))
    rest = body[reader.at :]  # the throttle time
    for topic, partitions in refused.items():
        added = [_partition_answer(version, partition, error) for partition in partitions]
        for name, parts in topics:
            if name == topic:
                parts.extend(added)
                break
        else:
            topics.append((topic, added))
    out = struct.pack(">i", len(topics))
    for topic, parts in topics:
        out += string(topic) + struct.pack(">i", len(parts)) + b"".join(parts)
    return out + rest


class RefusingProxy(RewritingProxy):
    """Refuses the batches of topics named :attr:`prefix`... that hold :attr:`marker`.

    :attr:`refused` counts the partitions' batches refused so far.
    """

    # The last versions without flexible fields.
    caps: ClassVar[dict[int, int]] = {PRODUCE: 8, **READVERTISED}

    def __init__(self, port: int, upstream_port: int, prefix: str, marker: bytes) -> None:
        super().__init__(port, upstream_port)
        self.prefix = prefix
        self.marker = marker
        self.error = MESSAGE_TOO_LARGE
        self.refused = 0
        self._lock = threading.Lock()

    def asked(self, api_key: int, version: int, body: bytes) -> tuple[bytes | None, Any]:
        if api_key != PRODUCE:
            return None, True  # an answer that names brokers: rewritten in answer()
        produce = _Produce.read(version, body)
        refused: dict[str, list[int]] = {}
        for index, (topic, partitions) in enumerate(produce.topics):
            if not topic.startswith(self.prefix):
                continue
            kept = []
            for partition, records in partitions:
                if records is not None and self.marker in records:
                    refused.setdefault(topic, []).append(partition)
                else:
                    kept.append((partition, records))
            produce.topics[index] = (topic, kept)
        if not refused:
            return None, None
        with self._lock:
            self.refused += sum(len(partitions) for partitions in refused.values())
        produce.topics = [(topic, parts) for topic, parts in produce.topics if parts]
        return produce.write(version), refused

    def answer(self, api_key: int, version: int, body: bytearray, asked: Any) -> bytes:
        if api_key == PRODUCE:
            return _add_refusals(version, bytes(body), asked, self.error)
        readvertise(api_key, version, body, self.upstream_port, self.port)
        return bytes(body)


@contextmanager
def refusing(broker: EmbeddedBroker, prefix: str, marker: bytes) -> Iterator[RefusingProxy]:
    """A :class:`RefusingProxy` in front of ``broker`` while the block runs."""
    proxy = RefusingProxy(free_port(), broker.port, prefix, marker)
    try:
        yield proxy
    finally:
        proxy.close()
