"""A bootstrapping source plans the table to its start ends first, then every input.

The planner's reads of the broker (log starts and ends, the timestamps of capped plans'
records) are replaced by fixed answers here; tests/joins/test_lookup_versioned.py runs the same
plans through the real broker and Spark, restarts included.
"""

from __future__ import annotations

import json
from typing import Any

from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

from daemon.formats.avro.codec import AvroCodec, load_schema_file
from daemon.model.wire import BOOTSTRAP, CLOCK
from daemon.source.admission import Heads
from daemon.source.planning import KafkaPartition, SourcePlanner
from daemon.source.spec import SourceInput, SourceSpec
from tests.kafka_helpers import SCHEMAS

CODEC = AvroCodec(load_schema_file(SCHEMAS / "user_region.avsc"))
ENDS = {"clicks/0": 10, "clicks/1": 10, "regions/0": 8, "regions/1": 3}
"""The log ends the planner finds: the regions grew past their start ends since."""
TARGETS = {"regions/0": 5, "regions/1": 3}
"""The regions' ends when the query started."""


def planner(*, bootstrap: bool = True, wake_ms: int = 0) -> SourcePlanner:
    inputs = (
        SourceInput("stream", "clicks", "user", None, CODEC),
        SourceInput("table", "regions", "user", None, CODEC, bootstrap=bootstrap),
    )
    spec = SourceSpec(inputs=inputs, client_conf={}, max_records_per_batch=4, wake_ms=wake_ms)
    reader = SourcePlanner(spec)
    reader._log_ends = lambda start: dict(ENDS)  # type: ignore[method-assign]  # no broker
    reader._earliest = lambda names: dict.fromkeys(names, 0)  # type: ignore[method-assign]
    # A capped plan reads the timestamps of the records it may admit: each record's is
    # 100 + its offset, in every partition, so that clicks and regions interleave.
    reader._heads = lambda name, first, stop: Heads(  # type: ignore[method-assign]
        first,
        stop,
        [100 + offset for offset in range(first, stop)],
        list(range(first, stop)),
        [False] * (stop - first),
    )
    return reader


def plan(reader: SourcePlanner, start: dict[str, Any], limit: Any) -> dict[str, Any]:
    """A plan as Spark keeps it: through JSON, the way it comes back after a restart."""
    planned = reader.latest_offsets(start, limit)
    reader._await_read_ahead()
    return json.loads(json.dumps(planned))  # type: ignore[no-any-return]


def test_a_new_query_notes_the_bootstrapped_inputs_ends_at_start() -> None:
    reader = planner()
    # Every partition starts at 0; the ends come from _log_ends.
    reader._log_starts = lambda partitions: dict.fromkeys(ENDS, 0)  # type: ignore[method-assign]
    reader._partitions = lambda: [  # type: ignore[method-assign]
        (name.partition("/")[0], int(name.partition("/")[2])) for name in ENDS
    ]
    start = reader.initial_offsets()
    assert start == {
        "clicks/0": 0,
        "clicks/1": 0,
        "regions/0": 0,
        "regions/1": 0,
        BOOTSTRAP: {"regions/0": 8, "regions/1": 3},
    }
    without = planner(bootstrap=False)
    without._log_starts, without._partitions = reader._log_starts, reader._partitions  # type: ignore[method-assign]
    assert BOOTSTRAP not in without.initial_offsets()


def test_an_uncapped_bootstrap_reads_the_table_to_its_start_ends_and_nothing_else() -> None:
    start = {"clicks/0": 0, "clicks/1": 0, "regions/0": 0, "regions/1": 0, BOOTSTRAP: TARGETS}
    first = plan(planner(), start, ReadAllAvailable())
    # Not to the regions' log end (8): to where it was at start (5). The ends reached, the
    # entry is left out, and the next plan admits every input.
    assert first == {"clicks/0": 0, "clicks/1": 0, "regions/0": 5, "regions/1": 3}
    assert plan(planner(), first, ReadAllAvailable()) == ENDS


def test_a_capped_bootstrap_carries_its_entry_until_the_ends_are_reached() -> None:
    reader = planner()
    start: dict[str, Any] = {"clicks/0": 0, "clicks/1": 0, "regions/0": 0, "regions/1": 0}
    start[BOOTSTRAP] = TARGETS
    plans = []
    while BOOTSTRAP in start:
        start = plan(reader, start, ReadMaxRows(4))
        plans.append(start)
    # Eight records of the table, four a batch, oldest first across its partitions; the
    # clicks, older than most of them, wait.
    assert [{n: p[n] for n in ("regions/0", "regions/1")} for p in plans] == [
        {"regions/0": 2, "regions/1": 2},
        {"regions/0": 5, "regions/1": 3},
    ]
    assert all(p["clicks/0"] == p["clicks/1"] == 0 for p in plans)
    assert plans[0][BOOTSTRAP] == TARGETS
    # Then the merge by timestamp of every input again, from where the bootstrap ended.
    after = plan(reader, start, ReadMaxRows(4))
    assert BOOTSTRAP not in after
    assert after["clicks/0"] + after["clicks/1"] == 4 - (after["regions/0"] - 5)


def test_a_restart_goes_on_with_a_bootstrap_under_way_and_never_starts_one() -> None:
    # Restarted from the checkpoint after the first capped batch: the entry came back with
    # the offsets, so the next plan still admits only the table.
    midway = {"clicks/0": 0, "clicks/1": 0, "regions/0": 2, "regions/1": 2, BOOTSTRAP: TARGETS}
    assert plan(planner(), midway, ReadAllAvailable()) == {
        "clicks/0": 0,
        "clicks/1": 0,
        "regions/0": 5,
        "regions/1": 3,
    }
    # A checkpoint past its bootstrap (no entry) plans every input, as any restart does.
    done = {"clicks/0": 3, "clicks/1": 3, "regions/0": 5, "regions/1": 3}
    assert plan(planner(), done, ReadAllAvailable()) == ENDS


def test_the_entry_is_no_partition_to_read() -> None:
    reader = planner(wake_ms=1000)
    start = {"clicks/0": 0, "clicks/1": 0, "regions/0": 0, "regions/1": 0, BOOTSTRAP: TARGETS}
    end = plan(reader, start, ReadMaxRows(4))
    assert list(end)[-2:] == [BOOTSTRAP, CLOCK]  # after the partitions, in a fixed order
    read = reader.partitions(start, end)
    ranges = [r for part in read for r in part.ranges if isinstance(part, KafkaPartition)]
    assert {(r.topic, r.partition) for r in ranges} == {("regions", 0), ("regions", 1)}
