"""The source's wake-up clock: an offset that moves with time, and is no partition.

A pipeline whose joiner wakes quiet keys needs a micro-batch when a key is due while no record
comes in, since Spark fires timers only in batches. Its source plans offsets with a
:data:`CLOCK` entry that moves to the current ``wake_ms`` period when the checkpoint's due-time
map has a timer due (or is not known), so Spark sees new offsets and runs a batch, and stays
put otherwise, so an idle query runs none; nothing else may read the entry as a partition. The
engine test (``tests/joins/test_engine_time.py``) checks that the timers fire so, through Spark,
and that an idle query runs no batch.
"""

from __future__ import annotations

import time
from pathlib import Path

from pyspark.sql.streaming.datasource import ReadAllAvailable

from daemon.checkpoint import due_times
from daemon.checkpoint.due_times import NO_BATCH, DueTimes
from daemon.checkpoint.layout import COMMIT_LOG, log_folder
from daemon.model.wire import CLOCK, parse_offsets
from daemon.service.observability import records_read
from daemon.source.planning import KafkaRange, SourcePlanner
from daemon.source.spec import SourceSpec


def reader(wake_ms: int, checkpoint: Path | None = None) -> SourcePlanner:
    spec = SourceSpec(
        inputs=(),
        client_conf={},
        max_records_per_batch=10,
        wake_ms=wake_ms,
        checkpoint=None if checkpoint is None else str(checkpoint),
    )
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


def now_period(wake_ms: int) -> int:
    return time.time_ns() // 1_000_000 // wake_ms


def test_an_idle_plan_with_no_timer_due_equals_its_start(tmp_path: Path) -> None:
    """So Spark runs no batch: the plan is the start, clock and all."""
    later = time.time_ns() // 1_000_000 + 3_600_000
    due_times.write(tmp_path, DueTimes(NO_BATCH, {4: later}))
    start = {"t/0": 7, CLOCK: 3}
    assert reader(250, tmp_path).latest_offsets(start, ReadAllAvailable()) == start


def test_a_new_checkpoint_without_a_clock_plans_none_until_a_timer_is_due(tmp_path: Path) -> None:
    due_times.start_known(tmp_path)
    assert reader(250, tmp_path).latest_offsets({"t/0": 7}, ReadAllAvailable()) == {"t/0": 7}


def test_a_due_timer_moves_the_clock_to_the_current_period(tmp_path: Path) -> None:
    log_folder(tmp_path, COMMIT_LOG).mkdir()
    (log_folder(tmp_path, COMMIT_LOG) / "5").write_text("v1", encoding="utf-8")
    due_times.write(tmp_path, DueTimes(5, {1: 10**15, 2: 1_000}))  # bucket 2 is long due
    before = now_period(250)
    planned = reader(250, tmp_path).latest_offsets({"t/0": 7, CLOCK: 3}, ReadAllAvailable())
    assert before <= planned[CLOCK] <= now_period(250)


def test_without_a_known_map_the_clock_moves_every_period(tmp_path: Path) -> None:
    """A checkpoint that committed batches without the map (an older enrichd's), or whose map
    is behind its commit log, cannot tell when its buckets are due: it wakes every period."""
    log_folder(tmp_path, COMMIT_LOG).mkdir()
    (log_folder(tmp_path, COMMIT_LOG) / "5").write_text("v1", encoding="utf-8")
    planner = reader(250, tmp_path)
    before = now_period(250)
    assert planner.latest_offsets({"t/0": 7, CLOCK: 3}, ReadAllAvailable())[CLOCK] >= before
    due_times.write(tmp_path, DueTimes(4, {}))  # batch 5 committed, its timers not written
    assert planner.latest_offsets({"t/0": 7, CLOCK: 3}, ReadAllAvailable())[CLOCK] >= before
