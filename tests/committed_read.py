"""The records of a topic whose transaction committed, by the raw record batches.

The test broker hands the records of aborted transactions to ``read_committed`` readers
(docs/contributing.md), so a test whose pipeline aborts a transaction and writes it again
(a task that meets a refused record does) checks "exactly once" on the records this returns:
each record ``read_committed`` gives, kept only if the raw log says its transaction committed.
"""

from __future__ import annotations

from daemon.formats.avro.codec import AvroCodec
from daemon.verify.check import Received
from daemon.verify.readback import RawLogs, read_committed, with_status


def committed(conf: dict[str, str], topic: str, codec: AvroCodec | None = None) -> list[Received]:
    """Every committed record of ``topic``, values decoded by ``codec`` (None: bytes)."""
    read = read_committed(conf, topic, codec)
    assert not read.held, read.held
    raw = RawLogs(conf)
    try:
        read.logs = raw.read(topic)
    finally:
        raw.close()
    return [record for record in with_status(read) if record.status == "committed"]


def aborted(conf: dict[str, str], topic: str) -> int:
    """How many records of ``topic`` belong to aborted transactions, by the raw log."""
    raw = RawLogs(conf)
    try:
        logs = raw.read(topic)
    finally:
        raw.close()
    return sum(log.counts().get("aborted", 0) for log in logs.values())
