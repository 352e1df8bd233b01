"""A proxy in front of Tansu that answers ListOffsets(EARLIEST) past a partition's first records.

Tansu 0.6 answers ListOffsets(EARLIEST) with the base offset of the record batch it *stored*
first. It gives a batch its offsets before it stores it, so when two producers write a
partition at once, the batch at offset 0 is now and then stored after a later one, and
ListOffsets then says the partition starts at that later batch, while Fetch responses say
(rightly) that the log starts at 0 (docs/contributing.md; issue 49 caught it in the lookup
replay, whose first stage's two tasks write the enriched topic together). That happens in
a few runs in a hundred, so a test cannot wait for it; this proxy gives the same answer
every time, for the partitions a test names, the way tests/scram_proxy.py stands in for
what Tansu cannot do.

Everything else passes through unchanged (tests/kafka_proxy.py): Tansu advertises the
proxy's port, so every client's requests come here. The proxy caps the ListOffsets versions
it lets clients use at 5 in the ApiVersions answers (the last version without flexible
fields), so that it can read and rewrite those requests and answers in place.
"""

from __future__ import annotations

import struct
from typing import Any, ClassVar

from daemon.verify.protocol import Reader
from tests.kafka_proxy import RewritingProxy

_LIST_OFFSETS = 2
_EARLIEST = -2


def earliest_asked(version: int, body: bytes) -> set[tuple[str, int]]:
    """The partitions a ListOffsets request (v1-v5, after its header) asks EARLIEST of."""
    reader = Reader(body)
    reader.int32()  # replica id
    if version >= 2:
        reader.int8()  # isolation level
    asked = set()
    for _ in range(reader.int32()):
        topic = reader.string() or ""
        for _ in range(reader.int32()):
            partition = reader.int32()
            if version >= 4:
                reader.int32()  # current leader epoch
            if reader.int64() == _EARLIEST:
                asked.add((topic, partition))
    return asked


def rewrite_answer(
    version: int, body: bytearray, asked: set[tuple[str, int]], answers: dict[tuple[str, int], int]
) -> None:
    """Put ``answers`` into a ListOffsets answer (v1-v5) for the ``asked`` partitions."""
    reader = Reader(bytes(body))
    if version >= 2:
        reader.int32()  # throttle time
    for _ in range(reader.int32()):
        topic = reader.string() or ""
        for _ in range(reader.int32()):
            partition, error = reader.int32(), reader.int16()
            reader.int64()  # timestamp
            offset_at = reader.at
            reader.int64()  # offset
            if version >= 4:
                reader.int32()  # leader epoch
            wanted = answers.get((topic, partition))
            if error == 0 and (topic, partition) in asked and wanted is not None:
                struct.pack_into(">q", body, offset_at, wanted)


class ListOffsetsProxy(RewritingProxy):
    """Listens on ``port`` and passes every connection through to Tansu on ``upstream_port``.

    A ListOffsets(EARLIEST) request for a partition in :attr:`earliest` is answered with
    the offset given there instead of Tansu's answer.
    """

    caps: ClassVar[dict[int, int]] = {_LIST_OFFSETS: 5}  # the last version without tags

    def __init__(self, port: int, upstream_port: int) -> None:
        super().__init__(port, upstream_port)
        self.earliest: dict[tuple[str, int], int] = {}

    def asked(self, api_key: int, version: int, body: bytes) -> tuple[bytes | None, Any]:
        if version < 1:
            return None, None
        return None, earliest_asked(version, body) or None

    def answer(self, api_key: int, version: int, body: bytearray, asked: Any) -> bytes:
        rewrite_answer(version, body, asked, self.earliest)
        return bytes(body)
