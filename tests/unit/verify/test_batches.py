"""Record batches as a broker's Fetch response holds them, and what each transaction came to."""

from __future__ import annotations

import struct

import pytest

from daemon.verify.batches import ABORT, COMMIT, Batch, PartitionLog, parse_batches
from daemon.verify.protocol import ProtocolError


def zigzag(value: int) -> bytes:
    raw = (value << 1) ^ (value >> 63)
    out = bytearray()
    while True:
        byte = raw & 0x7F
        raw >>= 7
        out.append(byte | (0x80 if raw else 0))
        if not raw:
            return bytes(out)


def batch_bytes(
    base: int,
    count: int,
    *,
    producer: int = -1,
    transactional: bool = False,
    marker: int | None = None,
    magic: int = 2,
) -> bytes:
    """A v2 record batch as brokers write it (records of data batches left as filler)."""
    attributes = (0x10 if transactional else 0) | (0x20 if marker is not None else 0)
    if marker is None:
        records = b"\x00" * (4 * count)  # never parsed: only the header matters for data
    else:
        key = struct.pack(">hh", 0, marker)
        body = b"\x00" + zigzag(0) + zigzag(0) + zigzag(len(key)) + key + zigzag(4)
        body += struct.pack(">hh", 0, 0) + zigzag(0)  # the value (version, epoch), no headers
        records = zigzag(len(body)) + body
    after_length = struct.pack(
        ">ibIhiqqqhii", 0, magic, 0, attributes, count - 1, 1, 1, producer, 0, 0, count
    )
    return struct.pack(">qi", base, len(after_length) + len(records)) + after_length + records


def test_a_log_of_committed_aborted_open_and_plain_writes() -> None:
    data = b"".join(
        [
            batch_bytes(0, 2),  # no transaction
            batch_bytes(2, 3, producer=5, transactional=True),
            batch_bytes(5, 1, producer=6, transactional=True),  # another producer, interleaved
            batch_bytes(6, 1, producer=5, transactional=True, marker=COMMIT),
            batch_bytes(7, 1, producer=6, transactional=True, marker=ABORT),
            batch_bytes(8, 2, producer=5, transactional=True),  # never ended
        ]
    )
    batches = parse_batches(data)
    assert [(b.base_offset, b.last_offset, b.control) for b in batches] == [
        (0, 1, None),
        (2, 4, None),
        (5, 5, None),
        (6, 6, COMMIT),
        (7, 7, ABORT),
        (8, 9, None),
    ]
    log = PartitionLog.of(batches)
    statuses = [log.status(offset) for offset in range(11)]
    assert statuses == [
        "plain",
        "plain",
        "committed",
        "committed",
        "committed",
        "aborted",
        None,  # a marker, no record
        None,
        "open",
        "open",
        None,  # past the end
    ]
    assert log.markers == {"commit": 1, "abort": 1}
    assert log.counts() == {"plain": 2, "committed": 3, "aborted": 1, "open": 2}


def test_a_batch_cut_off_by_the_fetch_size_is_left_for_the_next_fetch() -> None:
    whole = batch_bytes(0, 3) + batch_bytes(3, 2)
    assert [b.base_offset for b in parse_batches(whole[:-5])] == [0]
    assert parse_batches(whole[:20]) == []


def test_an_old_message_format_is_refused_by_name() -> None:
    with pytest.raises(ProtocolError, match="record batch of format 1 at offset 4"):
        parse_batches(batch_bytes(4, 1, magic=1))


def test_a_marker_resolves_only_its_own_producers_batches() -> None:
    log = PartitionLog.of(
        [
            Batch(0, 0, producer_id=1, transactional=True),
            Batch(1, 1, producer_id=2, transactional=True),
            Batch(2, 2, producer_id=1, transactional=True, control=ABORT),
        ]
    )
    assert (log.status(0), log.status(1)) == ("aborted", "open")
