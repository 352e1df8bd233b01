"""How long a plan that would read nothing waits for a record (a long poll).

The wait itself, ended by a record the probe fetches, runs through the real broker in
tests/delivery/test_kafka_source.py; here, its bound: never past the moment the plan's clock
may move, so timers fire as they would without it, and none with a processing-time trigger.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from daemon.checkpoint import due_times
from daemon.checkpoint.due_times import NO_BATCH, DueTimes
from daemon.source.long_poll import IDLE_WAIT_S, idle_wait_s, long_poll
from daemon.source.spec import SourceSpec

NOW_MS = 10_000_950
"""50 ms before a 1 s period's start."""


def spec(checkpoint: Path | None = None, wake_ms: int = 0, trigger_ms: int = 0) -> SourceSpec:
    return SourceSpec(
        inputs=(),
        client_conf={},
        max_records_per_batch=10,
        wake_ms=wake_ms,
        trigger_ms=trigger_ms,
        checkpoint=None if checkpoint is None else str(checkpoint),
    )


def test_a_source_without_a_clock_waits_the_whole_bound() -> None:
    assert idle_wait_s(spec(), NOW_MS) == IDLE_WAIT_S


def test_the_wait_ends_by_the_next_period_or_a_timer_due_sooner(tmp_path: Path) -> None:
    waking = spec(tmp_path, wake_ms=1000)
    due_times.write(tmp_path, DueTimes(NO_BATCH, {}))
    assert idle_wait_s(waking, NOW_MS) == pytest.approx(0.05)
    assert idle_wait_s(waking, NOW_MS - 900) == IDLE_WAIT_S  # at the period's start
    due_times.write(tmp_path, DueTimes(NO_BATCH, {4: NOW_MS + 20, 5: NOW_MS + 30}))
    assert idle_wait_s(waking, NOW_MS) == pytest.approx(0.02)
    # One already due moved the clock to this period: the next move is the next period's.
    due_times.write(tmp_path, DueTimes(NO_BATCH, {4: NOW_MS + 20, 5: NOW_MS - 500}))
    assert idle_wait_s(waking, NOW_MS) == pytest.approx(0.05)
    # A map not known (none here) moves the clock every period.
    assert idle_wait_s(spec(tmp_path / "none", wake_ms=1000), NOW_MS) == pytest.approx(0.05)


def test_a_processing_time_trigger_does_not_wait() -> None:
    """Spark asks once per trigger; a wait past a short one would log that it falls behind."""
    assert idle_wait_s(spec(trigger_ms=500), NOW_MS) == 0


def test_a_stopped_planner_does_not_wait() -> None:
    """No probe (the planner stopped): nothing could end a wait."""
    assert long_poll(None, spec()) is False
