"""Record batches as a partition's log holds them, and what each transaction came to.

A transactional producer's records sit in batches marked transactional, under its producer
id; the transaction ends with a control batch of the same producer id on every partition it
wrote, a COMMIT or an ABORT marker. Reading a partition's batches in offset order therefore
tells, for every record, whether its transaction committed, aborted or is still open: which
is what a ``read_committed`` reader is meant to be shown, whatever it was shown.

Example:
    A transaction of producer 7 that aborted, then one that committed::

        >>> log = PartitionLog.of([
        ...     Batch(0, 1, producer_id=7, transactional=True),
        ...     Batch(2, 2, producer_id=7, transactional=True, control=ABORT),
        ...     Batch(3, 4, producer_id=7, transactional=True),
        ...     Batch(5, 5, producer_id=7, transactional=True, control=COMMIT),
        ... ])
        >>> [log.status(offset) for offset in (0, 1, 3, 4)]
        ['aborted', 'aborted', 'committed', 'committed']
        >>> log.markers
        {'commit': 1, 'abort': 1}
"""

from __future__ import annotations

import bisect
import struct
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal

from daemon.verify.protocol import ProtocolError, Reader

ABORT = 0
COMMIT = 1
_HEADER = struct.Struct(">qiibIhiqqqhii")
"""A v2 record batch's header: base offset, length, leader epoch, magic, CRC, attributes,
last offset delta, first and max timestamp, producer id and epoch, base sequence, count."""
_TRANSACTIONAL = 0x10
_CONTROL = 0x20

Status = Literal["committed", "aborted", "open", "plain"]
"""What became of a record: its transaction ``committed``, ``aborted``, or is still ``open``;
or it was written without a transaction (``plain``)."""


@dataclass(frozen=True)
class Batch:
    """The header of one record batch (and, for a control batch, its marker)."""

    base_offset: int
    last_offset: int
    producer_id: int = -1
    transactional: bool = False
    control: int | None = None
    """``ABORT`` or ``COMMIT`` for a control batch; None for data."""


def parse_batches(data: bytes) -> list[Batch]:
    """The complete v2 record batches in a Fetch response's records (a cut-off last one left).

    Raises:
        ProtocolError: a batch is not of the v2 format (magic 2), which every broker writes
            since Kafka 0.11.
    """
    batches = []
    at = 0
    while at + _HEADER.size <= len(data):
        fields = _HEADER.unpack_from(data, at)
        base, length, magic, attributes, delta = (
            fields[0],
            fields[1],
            fields[3],
            fields[5],
            fields[6],
        )
        end = at + 12 + length
        if end > len(data):
            break  # cut off by the fetch's size limit: the next fetch starts here
        if magic != 2:
            raise ProtocolError(f"a record batch of format {magic} at offset {base}")
        control = None
        if attributes & _CONTROL:
            control = _marker_type(data[at + _HEADER.size : end])
        batches.append(
            Batch(
                base_offset=base,
                last_offset=base + delta,
                producer_id=fields[9],
                transactional=bool(attributes & _TRANSACTIONAL),
                control=control,
            )
        )
        at = end
    return batches


def _marker_type(records: bytes) -> int:
    """The type of a control batch's marker (its one record's key: version, type)."""
    reader = Reader(records)
    reader.varint()  # record length
    reader.int8()  # attributes
    reader.varint()  # timestamp delta
    reader.varint()  # offset delta
    size = reader.varint()
    key = Reader(reader.take(size))
    key.int16()  # version
    return key.int16()


@dataclass
class PartitionLog:
    """What became of each offset of one partition, from its batches in offset order."""

    ranges: list[tuple[int, int, Status, int]] = field(default_factory=list)
    """``(first, last, status, producer id)`` per data batch, in offset order."""
    markers: dict[str, int] = field(default_factory=lambda: {"commit": 0, "abort": 0})
    """Control markers seen, by type."""

    @classmethod
    def of(cls, batches: Iterable[Batch]) -> PartitionLog:
        """Resolve each transactional batch by the next marker of its producer id."""
        log = cls()
        pending: dict[int, list[int]] = {}  # producer id -> indexes into ranges
        for batch in batches:
            if batch.control is not None:
                status: Status = "committed" if batch.control == COMMIT else "aborted"
                log.markers["commit" if batch.control == COMMIT else "abort"] += 1
                for index in pending.pop(batch.producer_id, []):
                    first, last, _, producer = log.ranges[index]
                    log.ranges[index] = (first, last, status, producer)
            elif batch.transactional:
                pending.setdefault(batch.producer_id, []).append(len(log.ranges))
                log.ranges.append((batch.base_offset, batch.last_offset, "open", batch.producer_id))
            else:
                log.ranges.append(
                    (batch.base_offset, batch.last_offset, "plain", batch.producer_id)
                )
        return log

    def status(self, offset: int) -> Status | None:
        """What became of the record at ``offset``; None when no data batch holds it."""
        index = bisect.bisect_right(self.ranges, (offset, float("inf"))) - 1
        if index >= 0:
            first, last, status, _ = self.ranges[index]
            if first <= offset <= last:
                return status
        return None

    def counts(self) -> dict[str, int]:
        """Offsets per status (a batch's offsets count as its records)."""
        found: dict[str, int] = {}
        for first, last, status, _ in self.ranges:
            found[status] = found.get(status, 0) + last - first + 1
        return found
