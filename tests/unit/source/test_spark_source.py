"""Which reader Spark gets of the source, and the driver's reader's batches (planner stubbed)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import pytest
from pyspark.sql.datasource_internal import _SimpleStreamReaderWrapper, _streamReader
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows

from daemon.model.wire import SOURCE, Offsets, range_name
from daemon.source import spark_source
from daemon.source.planning import KafkaPartition, KafkaRange
from daemon.source.spark_source import DriverStreamReader, KafkaSource, KafkaStreamReader
from daemon.source.spec import SourceSpec


def _spec(*, read_on_driver: bool) -> SourceSpec:
    return SourceSpec((), {}, max_records_per_batch=7, read_on_driver=read_on_driver)


def test_spark_gets_the_executors_reader_unless_the_spec_reads_on_the_driver() -> None:
    schema: Any = SOURCE.ddl
    executors = KafkaSource({"spec": _spec(read_on_driver=False).encode()})
    assert isinstance(_streamReader(executors, schema), KafkaStreamReader)
    driver = KafkaSource({"spec": _spec(read_on_driver=True).encode()})
    wrapped = _streamReader(driver, schema)
    assert isinstance(wrapped, _SimpleStreamReaderWrapper)
    assert isinstance(wrapped.simple_reader, DriverStreamReader)


_RANGES = (
    KafkaRange("t", 0, 2, 5),
    KafkaRange("t", 1, 0, 4),
    KafkaRange("u", 0, 7, 9),
)


class _Planner:
    """Plans one batch ``{"t/0": 5, ...}`` after ``{"t/0": 2, ...}``, dealt to two tasks."""

    START: Offsets = {"t/0": 2, "t/1": 0, "u/0": 7}
    END: Offsets = {"t/0": 5, "t/1": 4, "u/0": 9}

    def __init__(self) -> None:
        self.limits: list[ReadLimit] = []
        self.asked: list[tuple[Offsets, Offsets]] = []
        self.stopped = False

    def latest_offsets(self, start: Offsets, limit: ReadLimit) -> Offsets:
        self.limits.append(limit)
        return dict(self.END)

    def partitions(self, start: Offsets, end: Offsets) -> list[KafkaPartition]:
        self.asked.append((start, end))
        return [KafkaPartition(_RANGES[:1]), KafkaPartition(_RANGES[1:])]

    def stop(self) -> None:
        self.stopped = True


def _packs_named_by_range(spec: SourceSpec, ranges: Iterable[KafkaRange]) -> Iterator[Any]:
    """Stands for read_ranges: one "pack" per range, the name its packs would carry."""
    for r in ranges:
        yield range_name(r.topic, r.partition, r.start, r.end)


@pytest.fixture
def planner(monkeypatch: pytest.MonkeyPatch) -> _Planner:
    monkeypatch.setattr(spark_source, "read_ranges", _packs_named_by_range)
    monkeypatch.setattr(spark_source, "freeze_loaded", lambda: None)
    return _Planner()


def _driver(planner: _Planner) -> DriverStreamReader:
    reader = DriverStreamReader(_spec(read_on_driver=True))
    reader.planner = planner  # type: ignore[assignment]
    return reader


def test_the_driver_reads_every_task_s_ranges_of_a_planned_batch_under_the_pipelines_cap(
    planner: _Planner,
) -> None:
    packs, end = _driver(planner).read(dict(planner.START))

    assert end == planner.END
    assert list(packs) == ["t/0:2-5", "t/1:0-4", "u/0:7-9"]
    assert planner.limits == [ReadMaxRows(7)]  # Spark gives a simple reader no limit
    assert planner.asked == [(planner.START, planner.END)]


def test_a_batch_without_records_is_no_batch(planner: _Planner) -> None:
    packs, end = _driver(planner).read(dict(planner.END))
    assert (list(packs), end) == ([], planner.END)
    assert planner.asked == []  # nothing planned, nothing read


def test_the_driver_s_packs_carry_the_ranges_the_executors_tasks_read(
    planner: _Planner,
) -> None:
    """The batch markers' digests are of the packs' ranges: whichever reader read a batch,
    and read it again after a restart, the ranges are the same."""
    executors = KafkaStreamReader(_spec(read_on_driver=False))
    executors.planner = planner  # type: ignore[assignment]
    by_tasks = [
        pack
        for task in executors.partitions(planner.START, planner.END)
        for pack in executors.read(task)
    ]
    driver = _driver(planner)
    packs, _ = driver.read(dict(planner.START))
    again = list(driver.readBetweenOffsets(dict(planner.START), dict(planner.END)))

    assert sorted(by_tasks) == sorted(packs) == sorted(again)
    assert planner.stopped  # the task's reader closes its clients once it has read


def test_spark_s_wrapper_hands_on_the_packs_read_as_planned_and_none_after_a_restart(
    planner: _Planner,
) -> None:
    """PySpark's wrapper caches what read() returned and copies its iterator to send it: a
    fresh runner (a restart) has no copy, and Spark then runs readBetweenOffsets in a task."""
    wrapped = _SimpleStreamReaderWrapper(_driver(planner))
    start = dict(planner.START)
    end = wrapped.latestOffset(start, ReadAllAvailable())
    wrapped.partitions(start, end)
    cached = wrapped.getCache(start, end)
    assert cached is not None
    assert list(cached) == ["t/0:2-5", "t/1:0-4", "u/0:7-9"]
    restarted = _SimpleStreamReaderWrapper(_driver(_Planner()))
    assert restarted.getCache(start, end) is None
