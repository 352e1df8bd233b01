"""A proxy in front of the session's broker whose Fetch answers fail as a test tells them to.

A consumer's read can fail in ways Tansu, the test broker, never shows: a partition the
principal may not read (an authorization error in the Fetch answer), a record batch corrupted
on its way (its CRC does not match). This proxy answers so for the partitions a test names
(:attr:`FetchFaultProxy.errors`, :attr:`FetchFaultProxy.corrupt`); everything else passes
through (tests/kafka_proxy.py), and the answers that name brokers name the proxy. It caps the
Fetch versions clients may use at 11, its last version without flexible fields, to read and
rewrite its answers (tests/removed_records_proxy.py's reader).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, ClassVar

from daemon.broker import EmbeddedBroker
from daemon.verify.protocol import API_FETCH
from tests.kafka_proxy import READVERTISED, RewritingProxy, readvertise
from tests.ports import free_port
from tests.removed_records_proxy import FetchedPartition, empty_entry, rewrite_fetch_partitions

TOPIC_AUTHORIZATION_FAILED = 29


class FetchFaultProxy(RewritingProxy):
    """Listens on ``port`` and passes every connection through to the broker on ``upstream_port``.

    A Fetch answer's entry of a partition in :attr:`errors` carries that error code and no
    records; one of a partition in :attr:`corrupt` has the last byte of its first record batch
    changed.
    """

    caps: ClassVar[dict[int, int]] = {API_FETCH: 11, **READVERTISED}

    def __init__(self, port: int, upstream_port: int) -> None:
        super().__init__(port, upstream_port)
        self.errors: dict[tuple[str, int], int] = {}
        self.corrupt: set[tuple[str, int]] = set()
        self.faults = 0
        """How many entries it answered with a fault."""

    def asked(self, api_key: int, version: int, body: bytes) -> tuple[bytes | None, Any]:
        if api_key == API_FETCH and version < 5:
            return None, None
        return None, True

    def answer(self, api_key: int, version: int, body: bytearray, asked: Any) -> bytes:
        if api_key != API_FETCH:
            readvertise(api_key, version, body, self.upstream_port, self.port)
            return bytes(body)

        def fault(fetched: FetchedPartition) -> bytes | None:
            key = (fetched.topic, fetched.partition)
            if key in self.errors:
                self.faults += 1
                return empty_entry(version, fetched, self.errors[key], -1)
            if key in self.corrupt and fetched.records:
                self.faults += 1
                # The last byte of the first record batch (its base offset, 8 bytes, then its
                # length, 4): the client reads no record past it. The answer's last byte
                # could lie in a later batch, or in a partial one the client drops unread.
                first_end = 12 + int.from_bytes(fetched.records[8:12], "big")
                at = len(fetched.entry) - len(fetched.records) + first_end - 1
                return (
                    fetched.entry[:at] + bytes([fetched.entry[at] ^ 0xFF]) + fetched.entry[at + 1 :]
                )
            return None

        return rewrite_fetch_partitions(version, bytes(body), fault)


@contextmanager
def faulty(broker: EmbeddedBroker) -> Iterator[FetchFaultProxy]:
    """A :class:`FetchFaultProxy` in front of ``broker`` while the block runs."""
    proxy = FetchFaultProxy(free_port(), broker.port)
    try:
        yield proxy
    finally:
        proxy.close()
