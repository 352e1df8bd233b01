"""The source's wake-up clock: an offset that moves with time, and is no partition.

A pipeline whose joiner wakes quiet keys needs micro-batches while no record comes in, since
Spark fires timers only in batches. Its source plans offsets with a :data:`CLOCK` entry that
moves every ``wake_ms``, so Spark sees new offsets and runs a batch; nothing else may read the
entry as a partition. The engine test (``tests/joins/test_engine_time.py``) checks that the timers
fire so, through Spark.
"""

from __future__ import annotations

import time

from pyspark.sql.streaming.datasource import ReadAllAvailable

from daemon.model.wire import CLOCK
from daemon.service.observability import parse_offsets, records_read
from daemon.source.planning import KafkaRange, SourcePlanner
from daemon.source.spec import SourceSpec


def reader(wake_ms: int) -> SourcePlanner:
    spec = SourceSpec(inputs=(), client_conf={}, max_records_per_batch=10, wake_ms=wake_ms)
    planner = SourcePlanner(spec)
    planner._log_ends = lambda start: {"t/0": 7}  # type: ignore[method-assign]  # no broker
    planner._earliest = lambda names: dict.fromkeys(names, 0)  # type: ignore[method-assign]
    planner._partitions = lambda: [("t", 0)]  # type: ignore[method-assign]
    return planner


def test_a_waking_source_plans_the_clock_in_its_periods() -> None:
    before = time.time_ns() // 1_000_000 // 250
    planned = reader(250).latest_offsets({"t/0": 7, CLOCK: 3}, ReadAllAvailable())
    after = time.time_ns() // 1_000_000 // 250
    assert planned["t/0"] == 7
    assert before <= planned[CLOCK] <= after


def test_other_sources_plan_no_clock() -> None:
    assert reader(0).latest_offsets({"t/0": 2}, ReadAllAvailable()) == {"t/0": 7}


def test_a_batch_with_only_the_clock_moved_reads_nothing() -> None:
    planner = reader(1000)
    assert planner.partitions({"t/0": 7, CLOCK: 3}, {"t/0": 7, CLOCK: 4}) == []
    planned = planner.partitions({"t/0": 5, CLOCK: 3}, {"t/0": 7, CLOCK: 4})
    assert [p.ranges for p in planned] == [(KafkaRange("t", 0, 5, 7),)]  # type: ignore[attr-defined]


def test_progress_reports_count_no_records_for_the_clock() -> None:
    start = parse_offsets({"t/0": 5, CLOCK: 3})
    end = parse_offsets(f'{{"t/0": 9, "{CLOCK}": 40}}')
    assert end == {"t/0": 9}
    assert records_read(start, end) == {"t": 4}
