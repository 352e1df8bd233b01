"""A proxy in front of the session's broker that makes partitions look as if records were removed.

Retention and DeleteRecords remove a partition's records below some offset L: the broker then
says the partition's log starts at L. Tansu 0.6, the test broker, removes nothing (it answers
DeleteRecords by closing the connection, and its partitions always start at 0), so this proxy
answers as a Kafka broker would for the partitions a test names in
:attr:`RemovingProxy.removed` (``(topic, partition) -> L``):

- a Fetch at an offset below L is answered ``OFFSET_OUT_OF_RANGE`` (error 1), with no records
  and the log start offset L;
- a Fetch at L or past it is answered as the broker answered it, with the log start offset L;
- ListOffsets(EARLIEST) is answered L (tests/list_offsets_proxy.py).

Everything else passes through (tests/kafka_proxy.py), and the answers that name brokers name
the proxy, so every client that bootstraps from it sends everything through it. The proxy caps
the Fetch versions clients may use at 11 and the ListOffsets versions at 5 in the ApiVersions
answers (their last versions without flexible fields), so that it can read and rewrite them.
ListOffsets(LATEST) passes as Tansu answers it: the base offset of the partition's last record
batch + 1 (docs/contributing.md), which a test keeps at L or past it by writing the records
from L on in one batch of their own. A consumer that resets to the latest offset (the Kafka
client's default) after an ``OFFSET_OUT_OF_RANGE`` then fetches at or past L.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, ClassVar

from daemon.broker import EmbeddedBroker
from daemon.verify.protocol import API_FETCH, Reader
from tests.kafka_proxy import READVERTISED, RewritingProxy, readvertise
from tests.list_offsets_proxy import earliest_asked, rewrite_answer
from tests.ports import free_port

LIST_OFFSETS = 2
OFFSET_OUT_OF_RANGE = 1


def fetch_offsets(version: int, body: bytes) -> dict[tuple[str, int], int]:
    """The offset a Fetch request (v5-v11, after its header) asks of each partition."""
    reader = Reader(body)
    reader.take(4 + 4 + 4 + 4 + 1)  # replica id, max wait, min bytes, max bytes, isolation level
    if version >= 7:
        reader.take(8)  # session id and epoch
    asked: dict[tuple[str, int], int] = {}
    for _ in range(reader.int32()):
        topic = reader.string() or ""
        for _ in range(reader.int32()):
            partition = reader.int32()
            if version >= 9:
                reader.int32()  # current leader epoch
            asked[(topic, partition)] = reader.int64()  # fetch offset
            reader.take(8 + 4)  # log start offset, partition max bytes
    return asked


@dataclass(frozen=True)
class FetchedPartition:
    """One partition's entry of a Fetch answer (v5-v11): its fields, and its bytes whole."""

    topic: str
    partition: int
    error: int
    high: int
    stable: int
    records: bytes
    """Its record batches as the broker sent them."""
    entry: bytes
    """The entry's bytes, from its partition number to the end of its records."""


def rewrite_fetch_partitions(
    version: int, body: bytes, rewrite: Callable[[FetchedPartition], bytes | None]
) -> bytes:
    """A Fetch answer (v5-v11, after its correlation id) with partition entries rewritten.

    ``rewrite`` is given each partition's entry and returns the bytes to send instead, or
    None to send it as it came.
    """
    reader = Reader(body)
    reader.take(4 + (6 if version >= 7 else 0))  # throttle time; error code, session id
    out = bytearray(body[: reader.at])
    topics = reader.int32()
    out += struct.pack(">i", topics)
    for _ in range(topics):
        start = reader.at
        topic = reader.string() or ""
        partitions = reader.int32()
        out += body[start : reader.at]
        for _ in range(partitions):
            start = reader.at
            partition = reader.int32()
            error = reader.int16()
            high, stable = reader.int64(), reader.int64()
            reader.int64()  # log start offset
            reader.take(16 * max(reader.int32(), 0))  # aborted transactions
            if version >= 11:
                reader.int32()  # preferred read replica
            records = reader.bytes_() or b""
            entry = body[start : reader.at]
            fetched = FetchedPartition(topic, partition, error, high, stable, records, entry)
            rewritten = rewrite(fetched)
            out += entry if rewritten is None else rewritten
    return bytes(out + body[reader.at :])


def empty_entry(version: int, fetched: FetchedPartition, error: int, log_start: int) -> bytes:
    """A partition's entry answered with ``error``, no records, and ``log_start``."""
    entry = struct.pack(
        ">ihqqqi", fetched.partition, error, fetched.high, fetched.stable, log_start, 0
    )
    entry += struct.pack(">i", -1) if version >= 11 else b""
    return entry + struct.pack(">i", 0)  # no records


def rewrite_fetch(
    version: int,
    body: bytes,
    asked: dict[tuple[str, int], int],
    removed: dict[tuple[str, int], int],
) -> bytes:
    """A Fetch answer (v5-v11, after its correlation id) as if ``removed`` records were gone.

    ``asked``: the offset the request asked of each partition; ``removed``: each partition's
    log start offset L, below which it has no records.
    """

    def rewrite(fetched: FetchedPartition) -> bytes | None:
        key = (fetched.topic, fetched.partition)
        low = removed.get(key)
        if low is None or key not in asked:
            return None
        if asked[key] < low:  # removed: out of range, no records
            return empty_entry(version, fetched, OFFSET_OUT_OF_RANGE, low)
        entry = bytearray(fetched.entry)
        struct.pack_into(">q", entry, 4 + 2 + 8 + 8, low)  # the log start offset
        return bytes(entry)

    return rewrite_fetch_partitions(version, body, rewrite)


class RemovingProxy(RewritingProxy):
    """Listens on ``port`` and passes every connection through to the broker on ``upstream_port``.

    The partitions in :attr:`removed` look as if their records below the offset given there
    were removed (see the module docstring).
    """

    caps: ClassVar[dict[int, int]] = {API_FETCH: 11, LIST_OFFSETS: 5, **READVERTISED}

    def __init__(self, port: int, upstream_port: int) -> None:
        super().__init__(port, upstream_port)
        self.removed: dict[tuple[str, int], int] = {}

    def asked(self, api_key: int, version: int, body: bytes) -> tuple[bytes | None, Any]:
        if api_key == API_FETCH:
            if version < 5:  # no log start offset in the answer
                return None, None
            asked = fetch_offsets(version, body)
            return None, {key: asked[key] for key in asked if key in self.removed} or None
        if api_key == LIST_OFFSETS:
            if version < 1:
                return None, None
            return None, earliest_asked(version, body) or None
        return None, True  # an answer that names brokers: rewritten in answer()

    def answer(self, api_key: int, version: int, body: bytearray, asked: Any) -> bytes:
        if api_key == API_FETCH:
            return rewrite_fetch(version, bytes(body), asked, dict(self.removed))
        if api_key == LIST_OFFSETS:
            rewrite_answer(version, body, asked, dict(self.removed))
            return bytes(body)
        readvertise(api_key, version, body, self.upstream_port, self.port)
        return bytes(body)


@contextmanager
def removing(broker: EmbeddedBroker) -> Iterator[RemovingProxy]:
    """A :class:`RemovingProxy` in front of ``broker`` while the block runs."""
    proxy = RemovingProxy(free_port(), broker.port)
    try:
        yield proxy
    finally:
        proxy.close()
