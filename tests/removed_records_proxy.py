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
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, ClassVar

from daemon.broker import EmbeddedBroker, free_port
from tests.kafka_proxy import READVERTISED, RewritingProxy, int32, readvertise, string
from tests.list_offsets_proxy import earliest_asked, rewrite_answer

FETCH, LIST_OFFSETS = 1, 2
OFFSET_OUT_OF_RANGE = 1


def fetch_offsets(version: int, body: bytes) -> dict[tuple[str, int], int]:
    """The offset a Fetch request (v5-v11, after its header) asks of each partition."""
    at = 4 + 4 + 4 + 4 + 1  # replica id, max wait, min bytes, max bytes, isolation level
    at += 8 if version >= 7 else 0  # session id and epoch
    asked: dict[tuple[str, int], int] = {}
    topics, at = int32(body, at)
    for _ in range(topics):
        topic, at = string(body, at)
        partitions, at = int32(body, at)
        for _ in range(partitions):
            partition, at = int32(body, at)
            at += 4 if version >= 9 else 0  # current leader epoch
            (offset,) = struct.unpack_from(">q", body, at)
            at += 8 + 8 + 4  # fetch offset, log start offset, partition max bytes
            asked[(topic or "", partition)] = offset
    return asked


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
    head = 4 + (6 if version >= 7 else 0)  # throttle time; error code, session id
    out = bytearray(body[:head])
    at = head
    topics, at = int32(body, at)
    out += struct.pack(">i", topics)
    for _ in range(topics):
        start = at
        topic, at = string(body, at)
        partitions, at = int32(body, at)
        out += body[start:at]
        for _ in range(partitions):
            start = at
            partition, error, high, stable, _ = struct.unpack_from(">ihqqq", body, at)
            at += 4 + 2 + 8 + 8 + 8
            aborted, at = int32(body, at)
            at += 16 * max(aborted, 0)
            at += 4 if version >= 11 else 0  # preferred read replica
            size, at = int32(body, at)
            at += max(size, 0)
            key = (topic or "", partition)
            low = removed.get(key)
            if low is None or key not in asked:
                out += body[start:at]
            elif asked[key] < low:  # removed: out of range, no records
                out += struct.pack(">ihqqqi", partition, OFFSET_OUT_OF_RANGE, high, stable, low, 0)
                out += struct.pack(">i", -1) if version >= 11 else b""
                out += struct.pack(">i", 0)  # no records
            else:
                entry = bytearray(body[start:at])
                struct.pack_into(">q", entry, 4 + 2 + 8 + 8, low)  # the log start offset
                out += entry
    return bytes(out + body[at:])


class RemovingProxy(RewritingProxy):
    """Listens on ``port`` and passes every connection through to the broker on ``upstream_port``.

    The partitions in :attr:`removed` look as if their records below the offset given there
    were removed (see the module docstring).
    """

    caps: ClassVar[dict[int, int]] = {FETCH: 11, LIST_OFFSETS: 5, **READVERTISED}

    def __init__(self, port: int, upstream_port: int) -> None:
        super().__init__(port, upstream_port)
        self.removed: dict[tuple[str, int], int] = {}

    def asked(self, api_key: int, version: int, body: bytes) -> tuple[bytes | None, Any]:
        if api_key == FETCH:
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
        if api_key == FETCH:
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
