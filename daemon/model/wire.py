"""The wire protocol between a pipeline's stages: row layouts, special routes and markers.

Inside a pipeline's Spark query, records cross from the Kafka source to the joiner operator
and from the operator to the sink as rows whose shapes Spark must be told, and a few values
ride inside those rows with a meaning of their own. This module is the one place that says
what crosses each boundary (docs/architecture.md draws them):

- **Source to operator**: a :class:`SourceRow` per *pack*, the :class:`InputRow` s of one
  state bucket from one Kafka partition as Arrow IPC bytes (:func:`pack`, :func:`unpack`).
  Special values: the join key :data:`DEAD_LETTER_ROUTE` (a record that cannot be joined) and
  the input :data:`CONTROL_INPUT` (a key's end-of-input marker, read from Kafka records that
  carry :data:`CONTROL_HEADER`).
- **Operator to sink**: an :class:`OutputRow` per record to write, and per operator call one
  *counts row*, addressed to :data:`COUNTS_TOPIC`, whose value is :class:`CallCounts` as JSON.
- **Planner to Spark's checkpoint** (and progress reports): a plan's offsets, one entry per
  Kafka partition (:func:`partition_name`), plus the :data:`CLOCK`, :data:`BOOTSTRAP`,
  :data:`RESETS` and :data:`TOPIC_IDS` entries, which name no partition.

Each row layout is declared once, as a named tuple whose fields carry their Arrow types
(``Annotated[int, "int32"]``); its Arrow schema, Spark DDL and column positions are derived
from that declaration by :class:`Layout`. The rows live only in flight, with one exception:
the source's ``bucket`` column is the operator's grouping key, which a checkpoint's state
schema records, so its name and type must not change.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from functools import cached_property, partial
from typing import (
    TYPE_CHECKING,
    Annotated,
    Any,
    Generic,
    NamedTuple,
    TypedDict,
    TypeVar,
    get_type_hints,
)

if TYPE_CHECKING:
    import pyarrow as pa

# -- row layouts -----------------------------------------------------------------------------

Int32 = Annotated[int, "int32"]
Int64 = Annotated[int, "int64"]
Text = Annotated[str, "string"]
Blob = Annotated[bytes, "binary"]
MaybeInt32 = Annotated[int | None, "int32"]
MaybeInt64 = Annotated[int | None, "int64"]
MaybeText = Annotated[str | None, "string"]
MaybeBlob = Annotated[bytes | None, "binary"]
"""Column types: a Python type for the named tuple, and the name of its Arrow type (every
column may hold nulls on the wire; the ``Maybe`` ones do). Names, not ``pyarrow`` types, so
that importing this module loads no pyarrow: the command line's planning and Kafka clients
import it too."""

_SPARK_TYPES = {"string": "string", "binary": "binary", "int32": "int", "int64": "long"}
"""Spark's DDL name of each Arrow type a layout uses."""

RowT = TypeVar("RowT", bound=tuple[Any, ...])


class Layout(Generic[RowT]):
    """A row layout, derived from its one declaration: a named tuple with Arrow-typed fields.

    Args:
        row: the named tuple class; each field annotated ``Annotated[python type, arrow type
            name]`` (one of the aliases above).
    """

    def __init__(self, row: type[RowT]) -> None:
        self.row = row
        self.columns: tuple[str, ...] = tuple(row._fields)  # type: ignore[attr-defined]
        """The column names, in order."""
        hints = get_type_hints(row, include_extras=True)
        self.types: tuple[str, ...] = tuple(hints[name].__metadata__[0] for name in self.columns)
        """Each column's Arrow type name, in order."""
        self.ddl = ", ".join(
            f"{name} {_SPARK_TYPES[kind]}"
            for name, kind in zip(self.columns, self.types, strict=True)
        )
        """The layout in Spark's DDL, as a data source's ``schema()`` or an operator's output
        type gives it."""
        self._make = partial(tuple.__new__, row)

    @cached_property
    def arrow(self) -> pa.Schema:
        """The layout as an Arrow schema."""
        # Late: pyarrow loads where rows are built or read, not for this module's names.
        import pyarrow as pa

        return pa.schema(
            [
                (name, getattr(pa, kind)())
                for name, kind in zip(self.columns, self.types, strict=True)
            ]
        )

    def position(self, column: str) -> int:
        """Where ``column`` sits in a row of this layout (for rows that travel as plain tuples)."""
        return self.columns.index(column)

    def column(self, name: str) -> str:
        """``name``, checked to be one of the layout's columns (for Spark's column arguments).

        Raises:
            ValueError: the layout has no such column.
        """
        if name not in self.columns:
            raise ValueError(f"{self.row.__name__} has no column {name!r}: {self.columns}")
        return name

    def rows(self, batch: pa.RecordBatch) -> Iterator[RowT]:
        """The rows of an Arrow batch of this layout, as named tuples.

        Converted a column at a time, and made without a Python frame per row: converting
        row by row cost several times more.
        """
        columns = [batch.column(name).to_pylist() for name in self.columns]
        return map(self._make, zip(*columns, strict=True))

    def tuples(self, batch: pa.RecordBatch) -> Iterator[tuple[Any, ...]]:
        """:meth:`rows` as plain tuples in column order (for a hot path that passes them on)."""
        return zip(*(batch.column(name).to_pylist() for name in self.columns), strict=True)

    def batch(self, **columns: Sequence[Any] | pa.Array) -> pa.RecordBatch:
        """An Arrow batch of this layout from its columns, by name: Python values or arrays.

        Raises:
            ValueError: a column is missing, or not the layout's.
        """
        # Late: pyarrow loads where rows are built or read, not for this module's names.
        import pyarrow as pa

        if set(columns) != set(self.columns):
            raise ValueError(
                f"{self.row.__name__} has columns {self.columns}, not {tuple(columns)}"
            )
        arrays = [
            found if isinstance(found := columns[f.name], pa.Array) else pa.array(found, f.type)
            for f in self.arrow
        ]
        return pa.RecordBatch.from_arrays(arrays, schema=self.arrow)


class InputRow(NamedTuple):
    """One input record inside a pack, as the source routed it.

    ``value`` and ``kafka_key`` keep the original bytes: the operator decodes the value, and
    a dead letter carries them unchanged.
    """

    input: Int32
    """The position of the record's input (role and topic) in the source's spec, or
    :data:`CONTROL_INPUT` for an end-of-input marker."""
    key: Text
    """The join key, or :data:`DEAD_LETTER_ROUTE` when ``error`` says why it has none."""
    event_time: Int64
    partition: Int32
    offset: Int64
    timestamp: Int64
    """The Kafka timestamp."""
    kafka_key: MaybeBlob
    value: MaybeBlob
    """None: a tombstone (or an end-of-input marker)."""
    error: MaybeText
    """Why the record cannot be joined, ``"Kind: message"``; None when it can."""
    headers: MaybeBlob
    """The record's Kafka headers as they came, packed (:func:`daemon.model.headers.pack`);
    None when it has none, or the pipeline's ``headers`` policy is ``"none"`` (then the source
    reads none)."""


INPUT = Layout(InputRow)


class SourceRow(NamedTuple):
    """A row of the source: a pack of :class:`InputRow` s of one state bucket.

    Why packs and not a row per record: PySpark hands a stateful operator its rows converted
    one at a time (as pandas frames, made row by row, or as Rows, a cell at a time), and Spark
    moves each row through its shuffle; per record that cost more than the joining. A pack is
    one row in Spark, and the operator reads its records a column at a time (:func:`unpack`).
    Spark's ``numInputRows`` therefore counts packs: the records a batch read are its offset
    ranges' sizes (:func:`daemon.service.observability.records_read`).
    """

    bucket: Int32
    """The state bucket's label (:func:`daemon.model.record_route.bucket_labels`), by which the
    operator groups: its grouping key in the checkpoint's state schema."""
    records: Blob
    """The records, an Arrow IPC record batch of :data:`INPUT`'s schema, all from one Kafka
    partition, in offset order."""
    read_range: Text
    """The offset range of the micro-batch that the pack's partition was read over
    (:func:`range_name`), whether or not the pack holds its first or last record. The
    operator's task adds up the ranges of its packs: its share of the batch, which its batch
    marker records (:mod:`daemon.sink.markers`)."""


SOURCE = Layout(SourceRow)


class OutputRow(NamedTuple):
    """One record for Kafka: an output record, a dead letter, or a counts row.

    ``timestamp`` is that of the input record that caused it, as Kafka Streams does, so
    downstream consumers see event order, not enrichd's write time (None: the write time). The
    ``source_*`` and ``error_*`` columns become headers when written
    (:func:`daemon.sink.task_output.headers_of`): the input record it came from
    (``enrichd.source.*``; None when none) and, for a dead letter, why (``enrichd.error.*``).
    They are flat columns, not a list of header structs, because converting nested values
    between Arrow and Python costs several times more per record; for the same reason the
    input headers a record carries (:mod:`daemon.model.headers`) are one packed column.

    The operator's hot path builds rows as plain tuples in this order (a named tuple's
    constructor is a Python call per record); readers of those use :meth:`Layout.position`.
    """

    topic: Text
    """The output or dead-letter topic, or :data:`COUNTS_TOPIC`."""
    key: MaybeBlob
    value: MaybeBlob
    """None: a tombstone."""
    timestamp: MaybeInt64
    source_topic: MaybeText = None
    source_partition: MaybeInt32 = None
    source_offset: MaybeInt64 = None
    error_class: MaybeText = None
    error_message: MaybeText = None
    headers: MaybeBlob = None
    """The input headers it carries, and for a dead letter KIP-1034's error headers, packed
    (:func:`daemon.model.headers.pack`), written before enrichd's own; None: none."""


OUTPUT = Layout(OutputRow)


def pack(records: pa.RecordBatch, buckets: list[int], read_range: str = "") -> pa.RecordBatch:
    """Rows of :data:`SOURCE`: ``records`` packed by bucket (``buckets[i]`` is record i's).

    Each bucket's records keep their order in ``records``; every pack carries ``read_range``
    (:attr:`SourceRow.read_range`).
    """
    # Late: pyarrow loads where rows are built or read, not for this module's names.
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    if not buckets:
        return pa.RecordBatch.from_pylist([], schema=SOURCE.arrow)
    labels = pa.array(buckets, pa.int32())
    order = pc.sort_indices(labels)  # a stable sort: each bucket keeps its records' order
    by_bucket = records.take(order)
    sorted_labels = labels.take(order).to_numpy()
    starts = [0, *(np.flatnonzero(np.diff(sorted_labels)) + 1).tolist()]
    bounds = zip(starts, [*starts[1:], len(sorted_labels)], strict=True)
    packs = [by_bucket.slice(start, end - start).serialize().to_pybytes() for start, end in bounds]
    ranges = pa.repeat(pa.scalar(read_range, pa.string()), len(packs))
    return SOURCE.batch(bucket=sorted_labels[starts], records=packs, read_range=ranges)


def range_name(topic: str, partition: int, start: int, end: int) -> str:
    """A partition's offset range ``[start, end)`` as a pack carries it: ``"topic/0:10-25"``.

    Example:
        >>> range_name("tweets", 0, 10, 25)
        'tweets/0:10-25'
        >>> split_range_name("tweets/0:10-25")
        ('tweets/0', 10, 25)
    """
    return f"{partition_name(topic, partition)}:{start}-{end}"


def split_range_name(name: str) -> tuple[str, int, int]:
    """The partition's name, start and end of a :func:`range_name`."""
    partition, _, offsets = name.rpartition(":")
    start, _, end = offsets.partition("-")
    return partition, int(start), int(end)


def unpack(blob: bytes) -> pa.RecordBatch:
    """The records of one pack (:attr:`SourceRow.records`), as an Arrow batch of :data:`INPUT`."""
    # Late: pyarrow loads where rows are built or read, not for this module's names.
    import pyarrow as pa

    return pa.ipc.read_record_batch(pa.py_buffer(blob), INPUT.arrow)


# -- special routes and markers --------------------------------------------------------------

DEAD_LETTER_ROUTE = "\x00dead-letter"
"""The join key of a record that failed before joining (its :attr:`InputRow.error` says why):
the operator sends it to the dead-letter topic instead of to the joiner. It starts with a NUL,
which no real join key is expected to hold."""

CONTROL_INPUT = -1
"""The :attr:`InputRow.input` of an end-of-input marker: the key's event time jumps to the
end of time, after the records of its micro-batch, and for good.

A producer marks the end of a key's input with a tombstone whose header
:data:`CONTROL_HEADER` is :data:`END_OF_INPUT` and whose Kafka key is the join key (``daemon
replay`` sends one per key once its inputs are written); it is never joined itself."""

PASSED_INPUT = -2
"""The :attr:`InputRow.input` of a record one stage of a chain (:class:`daemon.plugin.Chain`)
passed on to the next: its ``value`` is the emit's value and headers, pickled; its ``key``
the next stage's join key, or :data:`NO_KEY_ROUTE`. Rows live only inside one query."""

WITHDRAWN_INPUT = -3
"""The :attr:`InputRow.input` of a chain stage's withdrawal, on its way to the chain's last
operator (keyed by the stream record's identity); laid out as :data:`PASSED_INPUT`."""

DEAD_INPUT = -4
"""The :attr:`InputRow.input` of a dead letter a chain stage made, on its way to the operator
that writes: its ``value`` is the :class:`OutputRow`, pickled. Only the last operator of a
chain writes to Kafka, so that a task has one transactional producer."""

METRICS_INPUT = -5
"""The :attr:`InputRow.input` of a chain stage's joiner counts (``ctx.count``) on their way to
the operator that writes, which reports them as its own: JSON in ``value``, each named
``TABLE.NAME`` as the stage's table says."""

NO_KEY_ROUTE = "\x00no-key"
"""The join key of a passed record whose key at the next stage is null: that stage answers it
without state (:meth:`daemon.plugin.Chain.without_key`)."""

CONTROL_HEADER = "enrichd.control"
"""The Kafka header that makes a tombstone a control record (see :data:`CONTROL_INPUT`)."""

END_OF_INPUT = b"end-of-input"
"""The :data:`CONTROL_HEADER` value of an end-of-input marker."""

END_OF_INPUT_HEADERS = [(CONTROL_HEADER, END_OF_INPUT)]
"""The headers a producer gives an end-of-input marker."""


def is_end_of_input(headers: Sequence[tuple[str, bytes]] | None) -> bool:
    """Whether a tombstone with these Kafka headers is an end-of-input marker."""
    return any(name == CONTROL_HEADER and raw == END_OF_INPUT for name, raw in headers or ())


COUNTS_TOPIC = "\x00enrichd.counts"
"""The topic of an operator's counts row: not a record to write, but what one operator call
wrote and what its joiner counted (:class:`CallCounts`, as JSON in the row's value). The sink
adds them up per task and relays the totals to the daemon's metrics. No Kafka topic name can
start with a NUL."""


class CallCounts(TypedDict, total=False):
    """What one operator call reports to the sink in its counts row (each part when not empty).

    ``{"joiner": {"matched": 3}, "records": {"views": 3}, "dead_letters": {}}``
    """

    joiner: dict[str, int]
    """What the joiner counted with ``ctx.count`` (matched, unmatched, revisions, ...)."""
    records: dict[str, int]
    """Records written, by topic."""
    dead_letters: dict[str, int]
    """Dead letters written, by reason (their ``enrichd.error.class`` header)."""
    stamps: dict[str, list[list[int]]]
    """Source timestamps of the records written, by output topic
    (:func:`daemon.model.latency.compact` pairs)."""
    event_time: dict[str, int]
    """The newest event time of the records read, by input role."""
    timers: dict[int, int | None]
    """The timer each bucket the call stored holds after it, by bucket label (None: none;
    as JSON the labels are text). Sent by a replay that counts nothing too: the sink's
    commit keeps them for the planner's clock (:mod:`daemon.checkpoint.due_times`)."""
    cache: dict[str, int]
    """Loads of stored buckets with the worker cache on, by outcome: ``hit`` (the worker's
    copy was current) or ``miss`` (loaded from the store) (:mod:`daemon.operator.bucket_cache`)."""
    failed_calls: int
    """Joiner calls that failed (their records dead-lettered as ``JoinerFailed``)."""
    failures: list[str]
    """The lines of the first few of them (:meth:`daemon.operator.core.JoinerFailure.reason`)."""
    replayed: int
    """1 from the first call of a task that replays a batch its marker says committed: it
    writes nothing again (:attr:`daemon.sink.task_output.TaskOutput.skipped`)."""


FAILURES_REPORTED = 3
"""How many failures' lines a counts row, a task and a batch report carry (their count is
of all)."""


def counts_row(counts: CallCounts) -> OutputRow:
    """The counts row that carries ``counts`` to the sink."""
    return OutputRow(COUNTS_TOPIC, None, json.dumps(counts).encode("utf-8"), None)


def counts_of(value: bytes) -> CallCounts:
    """The counts a counts row's value carries (see :func:`counts_row`)."""
    counts: CallCounts = json.loads(value)
    return counts


# -- a plan's offsets ------------------------------------------------------------------------

Offsets = dict[str, Any]
"""A plan's offsets as Spark keeps them in the checkpoint: :func:`partition_name` -> offset,
and the :data:`CLOCK`, :data:`BOOTSTRAP`, :data:`RESETS` and :data:`TOPIC_IDS` entries."""

CLOCK = "clock"
"""The offsets' entry that counts ``wake_ms`` periods of wall-clock time; no partition's.

Spark runs a micro-batch when a source's offset changes, and fires timers only in
micro-batches: the planner moves the clock to the current period when a bucket's timer is
due, which makes a batch that fires it within about ``wake_ms`` of its time, and otherwise
keeps the value it had, so an idle query whose keys are not due runs no batch at all. The
timers come from the checkpoint's due-time map (:mod:`daemon.checkpoint.due_times`); where that
map is not known (a checkpoint that an older enrichd ran), the clock moves every ``wake_ms``.
The query keeps the default trigger, so a record that does come in starts its batch at once.
Spark's other way, a batch per processing-time trigger with no-data batches on, makes every
record wait up to that interval for its batch, and runs a batch per interval."""

BOOTSTRAP = "bootstrap"
"""The offsets' entry of a query that bootstraps: ``{partition name: end}``, the end each
partition of a bootstrapped input had when the query started without a checkpoint.

While any of them is short of its end, a plan admits records of those partitions only, up to
those ends, and carries the entry on; the plan that reaches them all leaves it out, and the
next admits every input again. Living in the offsets, which Spark keeps in the checkpoint,
the entry survives a restart in the middle of a bootstrap, and a restart after one (or of a
query that never bootstrapped) does not bootstrap again. No partition's."""


RESETS = "resets"
"""The offsets' entry of a plan that moved partitions off offsets the broker no longer has:
``{partition name: offset}``, where the plan's range of each starts instead of at the
batch's start (``on_missing_offsets``, :mod:`daemon.source.missing_offsets`). A batch that
Spark runs again reads the same ranges; the next plan leaves the entry out."""

TOPIC_IDS = "topic_ids"
"""The offsets' entry that names each input topic's id, ``{topic: id}``, as the broker gave it
when the plan was made (brokers without topic ids give none, and the entry is left out). A
topic deleted and created again has a new id: the next plan knows its offsets are not the old
topic's, however many records the new one holds (:mod:`daemon.source.missing_offsets`)."""


def partition_name(topic: str, partition: int) -> str:
    """A Kafka partition's name in a plan's offsets: ``"topic/partition"``."""
    return f"{topic}/{partition}"


def split_partition_name(name: str) -> tuple[str, int]:
    """The topic and partition number of a :func:`partition_name`."""
    topic, _, partition = name.rpartition("/")
    return topic, int(partition)


def is_partition_name(name: str) -> bool:
    """Whether an offsets entry is a partition's, not another entry (:data:`CLOCK`, ...).

    The others are :data:`CLOCK`, :data:`BOOTSTRAP`, :data:`RESETS` and :data:`TOPIC_IDS`. A
    Kafka topic name cannot hold a ``/``, and the other entries' names hold none.
    """
    return "/" in name


def parse_offsets(offsets: object) -> dict[str, int]:
    """A plan's offsets, as a progress report carries them (JSON text or already parsed).

    Its partitions' names and their offsets: the entries that name no partition
    (:data:`CLOCK`, :data:`BOOTSTRAP`, :data:`RESETS`) are left out.
    """
    if offsets is None:
        return {}
    if isinstance(offsets, str):
        offsets = json.loads(offsets) if offsets.strip() else {}
    if not isinstance(offsets, dict):
        return {}
    return {
        str(name): int(offset) for name, offset in offsets.items() if is_partition_name(str(name))
    }
