"""The planner checks each batch's start against what the broker still has, and does what
``on_missing_offsets`` says: the plan, the ranges read, and a batch Spark runs again."""

from __future__ import annotations

from typing import Any

import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable

from daemon.errors import MissingOffsetsError
from daemon.model.wire import RESETS
from daemon.source import planning
from daemon.source.planning import KafkaRange, SourcePlanner
from daemon.source.spec import SourceSpec

EARLIEST = {"clicks/0": 100, "users/0": 0}
"""clicks/0 lost its records before 100; users/0 was created again and has 30."""
ENDS = {"clicks/0": 150, "users/0": 30}
START = {"clicks/0": 40, "users/0": 500}


def planner(policy: str, earliest: dict[str, int] | None = None) -> SourcePlanner:
    """A planner whose broker has :data:`EARLIEST` to :data:`ENDS` (no broker)."""
    spec = SourceSpec(
        inputs=(),
        client_conf={},
        max_records_per_batch=10_000,
        pipeline="p",
        on_missing_offsets=policy,
    )
    found = SourcePlanner(spec)
    lows = EARLIEST if earliest is None else earliest
    found._log_ends = lambda start: dict(ENDS)  # type: ignore[method-assign]
    found._earliest = lambda names: {n: lows[n] for n in names}  # type: ignore[method-assign]
    found._partitions = lambda: []  # type: ignore[method-assign]
    return found


def ranges(source: SourcePlanner, start: dict[str, int], end: dict[str, object]) -> set[KafkaRange]:
    return {r for task in source.partitions(start, end) for r in task.ranges}


def test_fail_raises_on_the_first_partition_that_lacks_its_offset() -> None:
    with pytest.raises(MissingOffsetsError) as raised:
        planner("fail").latest_offsets(START, ReadAllAvailable())
    assert "input topic 'clicks' partition 0 no longer has offset 40" in str(raised.value)
    assert "the earliest it has is 100" in str(raised.value)


def test_earliest_reads_from_the_earliest_offset_each_partition_has(
    caplog: pytest.LogCaptureFixture,
) -> None:
    source = planner("earliest")
    with caplog.at_level("WARNING", logger="enrichd.source"):
        end = source.latest_offsets(START, ReadAllAvailable())
    assert end == {"clicks/0": 150, "users/0": 30, RESETS: {"clicks/0": 100, "users/0": 0}}
    assert ranges(source, START, end) == {
        KafkaRange("clicks", 0, 100, 150),
        KafkaRange("users", 0, 0, 30),
    }
    assert len(caplog.records) == 2  # one WARN line per partition
    assert "60 offsets skipped" in caplog.records[0].getMessage()


def test_latest_reads_on_from_the_log_end() -> None:
    source = planner("latest")
    end = source.latest_offsets(START, ReadAllAvailable())
    assert end == {"clicks/0": 150, "users/0": 30, RESETS: {"clicks/0": 150, "users/0": 30}}
    assert ranges(source, START, end) == set()


def test_the_next_plan_carries_no_resets() -> None:
    source = planner("earliest")
    end = source.latest_offsets(START, ReadAllAvailable())
    assert RESETS not in source.latest_offsets(end, ReadAllAvailable())


def test_a_start_the_broker_has_plans_as_before() -> None:
    source = planner("fail")
    start = {"clicks/0": 120, "users/0": 10}
    end = source.latest_offsets(start, ReadAllAvailable())
    assert end == {"clicks/0": 150, "users/0": 30}
    assert ranges(source, start, end) == {
        KafkaRange("clicks", 0, 120, 150),
        KafkaRange("users", 0, 10, 30),
    }


def test_a_batch_planned_before_a_restart_is_checked_again() -> None:
    """Records removed after Spark logged the batch's plan: its ranges move by the policy."""
    start, end = {"clicks/0": 40, "users/0": 10}, {"clicks/0": 120, "users/0": 20}
    assert ranges(planner("earliest"), start, end) == {
        KafkaRange("clicks", 0, 100, 120),
        KafkaRange("users", 0, 10, 20),
    }
    assert ranges(planner("latest"), start, end) == {KafkaRange("users", 0, 10, 20)}
    with pytest.raises(MissingOffsetsError):
        planner("fail").partitions(start, end)


def test_a_batch_just_planned_is_not_checked_again() -> None:
    source = planner("earliest")
    end = source.latest_offsets(START, ReadAllAvailable())
    source._earliest = lambda names: {n: 10**9 for n in names}  # type: ignore[method-assign]
    assert KafkaRange("clicks", 0, 100, 150) in ranges(source, START, end)


def test_the_earliest_offset_is_the_log_start_fetches_report_else_asked_every_10_s(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """ListOffsets only while no Fetch answered: a round trip per partition and batch."""
    asked: list[str] = []

    class Probe:
        fetched = {"t/0": 7}  # the log start of a Fetch response; t/1 has none yet

        def get_watermark_offsets(
            self, tp: Any, timeout: float = 0, cached: bool = False
        ) -> tuple[int, int]:
            name = f"{tp.topic}/{tp.partition}"
            if cached:
                return self.fetched.get(name, -1), -1
            asked.append(name)
            return 5, -1

    clock = [100.0]
    monkeypatch.setattr(planning.time, "monotonic", lambda: clock[0])
    source = SourcePlanner(SourceSpec(inputs=(), client_conf={}, max_records_per_batch=1))
    source._probe = Probe()
    assert source._earliest(["t/0", "t/1"]) == {"t/0": 7, "t/1": 5}
    clock[0] = 109.9
    source._earliest(["t/0", "t/1"])
    assert asked == ["t/1"]
    clock[0] = 110.0
    source._earliest(["t/1"])
    assert asked == ["t/1", "t/1"]
