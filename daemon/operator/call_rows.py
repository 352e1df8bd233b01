"""A joiner call's input rows: read from the batch's packs, and found again by origin.

The operator (:mod:`daemon.operator.processor`) hands a key's rows to the joiner as records;
when a dead letter needs a record's original bytes and headers, :class:`Originals` finds the
row it came from.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import cached_property

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import Row as SparkRow

from daemon.model.wire import INPUT, InputRow, unpack
from daemon.plugin.joiner import InputRecord


class Originals:
    """The input rows of one key's call, found by origin when a dead letter needs their bytes.

    Indexed on first use: most calls never need it, and an index entry per record cost more
    than the rest of a record's bookkeeping.
    """

    def __init__(self, rows: list[InputRow], inputs: tuple[tuple[str, str], ...]) -> None:
        self._rows = rows
        self._inputs = inputs
        self._index: dict[tuple[str, int, int], InputRow] | None = None

    @cached_property
    def newest_timestamp(self) -> int | None:
        """The newest Kafka timestamp of the key's rows in the call, its marker's too.

        None without rows (a wake-up) or without timestamps. Found once per key: an end of
        input can revise every event the key keeps.
        """
        return max((row.timestamp for row in self._rows if row.timestamp), default=None)

    def get(self, origin: tuple[str, int, int]) -> InputRow | None:
        """The row a record of this call came from; None for a record from state."""
        if self._index is None:
            self._index = {
                (self._inputs[row.input][1], row.partition, row.offset): row
                for row in self._rows
                if row.input >= 0  # not a marker, nor a record a chain's stage passed on
            }
        return self._index.get(origin)

    def __getitem__(self, origin: tuple[str, int, int]) -> InputRow:
        row = self.get(origin)
        if row is None:
            raise KeyError(origin)
        return row


def rows_of(
    packs: Iterator[SparkRow], newest: dict[int, int], covered: set[str]
) -> Iterator[InputRow]:
    """The records of the call's packs (:func:`~daemon.model.wire.unpack`), by columns.

    Notes in ``newest`` each input's newest event time, a pack at a time (a pack's records
    come from one Kafka partition), leaving out end-of-input markers and unroutable records,
    and in ``covered`` the range each pack was read over.
    """
    for pack in packs:
        covered.add(pack.read_range)
        records = unpack(pack.records)
        note_newest(records, newest)
        yield from INPUT.rows(records)


def note_newest(records: pa.RecordBatch, newest: dict[int, int]) -> None:
    """Note in ``newest`` the newest event time of the routed records of one pack."""
    inputs = records.column("input")
    routed = pc.and_(pc.greater_equal(inputs, 0), pc.is_null(records.column("error")))
    times = pc.filter(records.column("event_time"), routed)
    if len(times):
        index = pc.filter(inputs, routed)[0].as_py()
        latest = pc.max(times).as_py()
        if latest > newest.get(index, latest - 1):
            newest[index] = latest


def origin(record: InputRecord) -> tuple[str, int, int]:
    """Where a record was read: its topic, partition and offset."""
    return (record.topic, record.partition, record.offset)
