"""The wire protocol between the stages: each row layout derived from its one declaration.

The Arrow schema, the Spark DDL and the column positions of every layout come from its named
tuple, so they cannot disagree; and the layouts are the ones earlier builds put on the wire
and in checkpoints (the source's grouping key is part of a checkpoint's state schema).
"""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pyarrow as pa
import pytest

from daemon.model.wire import (
    BOOTSTRAP,
    CLOCK,
    CONTROL_HEADER,
    CONTROL_INPUT,
    COUNTS_TOPIC,
    DEAD_LETTER_ROUTE,
    END_OF_INPUT,
    END_OF_INPUT_HEADERS,
    INPUT,
    OUTPUT,
    RESETS,
    SOURCE,
    CallCounts,
    InputRow,
    Layout,
    OutputRow,
    SourceRow,
    counts_of,
    counts_row,
    is_end_of_input,
    is_partition_name,
    pack,
    parse_offsets,
    partition_name,
    split_partition_name,
    unpack,
)

LAYOUTS: list[Layout[Any]] = [INPUT, SOURCE, OUTPUT]
SPARK_OF_ARROW = {
    pa.int32(): "int",
    pa.int64(): "long",
    pa.string(): "string",
    pa.binary(): "binary",
}


@pytest.mark.parametrize("layout", LAYOUTS, ids=lambda layout: layout.row.__name__)
def test_schema_ddl_and_positions_come_from_the_named_tuple(layout: Layout[Any]) -> None:
    fields = layout.row._fields
    assert layout.columns == fields
    assert layout.arrow.names == list(fields)
    assert [layout.position(name) for name in fields] == list(range(len(fields)))
    ddl = [column.split(" ") for column in layout.ddl.split(", ")]
    assert [name for name, _ in ddl] == list(fields)
    assert [kind for _, kind in ddl] == [SPARK_OF_ARROW[f.type] for f in layout.arrow]


def test_the_layouts_are_the_ones_checkpoints_and_earlier_builds_have() -> None:
    """Their declarations as they were before this module, with the packed headers and the
    pack's ``read_range`` since.

    A checkpoint records only the source's ``bucket`` column (the operator's grouping key);
    the other layouts live in flight, so a column can be added, not renamed.
    """
    assert SOURCE.ddl == "bucket int, records binary, read_range string"
    assert INPUT.arrow == pa.schema(
        [
            ("input", pa.int32()),
            ("key", pa.string()),
            ("event_time", pa.int64()),
            ("partition", pa.int32()),
            ("offset", pa.int64()),
            ("timestamp", pa.int64()),
            ("kafka_key", pa.binary()),
            ("value", pa.binary()),
            ("error", pa.string()),
            ("headers", pa.binary()),
        ]
    )
    assert OUTPUT.ddl == (
        "topic string, key binary, value binary, timestamp long, source_topic string, "
        "source_partition int, source_offset long, error_class string, error_message string, "
        "headers binary"
    )


def records() -> pa.RecordBatch:
    return INPUT.batch(
        input=[0, CONTROL_INPUT, 1],
        key=["ada", "bob", DEAD_LETTER_ROUTE],
        event_time=[5, 2**62, 7],
        partition=pa.array([3, 3, 3], pa.int32()),
        offset=[10, 11, 12],
        timestamp=[5, 6, 7],
        kafka_key=[b"a", b"bob", None],
        value=[b"v", None, b"\xff"],
        error=[None, None, "MissingKey: no join key field 'id'"],
        headers=[b"h", None, None],
    )


def test_rows_read_back_by_name_and_as_plain_tuples() -> None:
    batch = records()
    rows = list(INPUT.rows(batch))
    assert all(isinstance(row, InputRow) for row in rows)
    assert [(row.input, row.key, row.offset) for row in rows] == [
        (0, "ada", 10),
        (CONTROL_INPUT, "bob", 11),
        (1, DEAD_LETTER_ROUTE, 12),
    ]
    assert list(INPUT.tuples(batch)) == [tuple(row) for row in rows]
    assert type(next(INPUT.tuples(batch))) is tuple


def test_a_batch_needs_every_column_by_name() -> None:
    with pytest.raises(ValueError, match="has columns"):
        SOURCE.batch(bucket=[1])
    with pytest.raises(ValueError, match="has columns"):
        SOURCE.batch(bucket=[1], records=[b""], read_range=[""], extra=[0])
    assert SOURCE.column("bucket") == "bucket"
    with pytest.raises(ValueError, match="no column 'buckets'"):
        SOURCE.column("buckets")


def test_packs_are_source_rows_of_input_rows() -> None:
    packed = pack(records(), [4, 9, 4], "tweets/0:10-13")
    assert packed.schema == SOURCE.arrow
    (first, second) = SOURCE.rows(packed)
    assert isinstance(first, SourceRow)
    assert (first.bucket, second.bucket) == (4, 9)
    assert first.read_range == second.read_range == "tweets/0:10-13"
    assert [row.key for row in INPUT.rows(unpack(first.records))] == ["ada", DEAD_LETTER_ROUTE]
    assert [row.key for row in INPUT.rows(unpack(second.records))] == ["bob"]


def test_an_output_row_sits_in_a_plain_tuple_at_its_positions() -> None:
    row = OutputRow("views", b"k", b"v", 5, error_class="LateRecord")
    plain = tuple(row)
    assert plain[OUTPUT.position("topic")] == "views"
    assert plain[OUTPUT.position("error_class")] == "LateRecord"
    assert OutputRow._make(plain) == row
    assert OUTPUT.batch(**{name: [value] for name, value in row._asdict().items()}).to_pylist() == [
        row._asdict()
    ]


def test_a_counts_row_carries_its_counts_and_no_record() -> None:
    counts: CallCounts = {
        "joiner": {"matched": 2},
        "records": {"views": 2},
        "dead_letters": {},
        "stamps": {"views": [[1000], [2]]},
        "event_time": {"many": 1000},
    }
    row = counts_row(counts)
    assert (row.topic, row.key, row.timestamp) == (COUNTS_TOPIC, None, None)
    assert row.value is not None
    assert counts_of(row.value) == counts
    assert row.value == b'{"joiner": {"matched": 2}, "records": {"views": 2}, ' + (
        b'"dead_letters": {}, "stamps": {"views": [[1000], [2]]}, "event_time": {"many": 1000}}'
    )


def test_the_special_values_cannot_be_real_ones() -> None:
    """No Kafka topic and no join key starts with a NUL; no input sits at a negative place."""
    assert COUNTS_TOPIC.startswith("\x00") and DEAD_LETTER_ROUTE.startswith("\x00")
    assert CONTROL_INPUT < 0
    assert END_OF_INPUT_HEADERS == [(CONTROL_HEADER, END_OF_INPUT)]


def test_end_of_input_markers_are_known_by_their_header() -> None:
    assert is_end_of_input(END_OF_INPUT_HEADERS)
    assert is_end_of_input([("trace", b"1"), (CONTROL_HEADER, END_OF_INPUT)])
    assert not is_end_of_input(None)
    assert not is_end_of_input([(CONTROL_HEADER, b"something-else")])
    assert not is_end_of_input([("other", END_OF_INPUT)])


def test_offsets_name_partitions_apart_from_the_clock_and_bootstrap() -> None:
    name = partition_name("tweets.v2", 11)
    assert name == "tweets.v2/11"
    assert split_partition_name(name) == ("tweets.v2", 11)
    assert is_partition_name(name)
    assert not is_partition_name(CLOCK) and not is_partition_name(BOOTSTRAP)


def test_a_progress_reports_offsets_are_read_by_partition() -> None:
    assert parse_offsets(None) == {}
    assert parse_offsets('{"users/0": 4}') == {"users/0": 4}
    assert parse_offsets({"users/0": 4, CLOCK: 9, RESETS: {"users/0": 2}}) == {"users/0": 4}


def test_importing_the_protocol_loads_no_pyarrow() -> None:
    """The command line's planning and Kafka clients import it, and start faster without."""
    probe = "import sys, daemon.model.wire; print('pyarrow' in sys.modules)"
    loaded = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert loaded == "False"
