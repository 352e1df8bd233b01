"""A continuous pipeline's task reports, as the daemon takes them inside a long batch: what
its sub-batches read and wrote counts, each report is progress, the pipeline's lag group
gets where its slowest lease read to, and a long batch that ended early is logged."""

from __future__ import annotations

import logging
import time

import pytest

from daemon.model.reports import BatchCounts, least_read
from daemon.report_socket import send
from daemon.service.monitor import Monitor, view_of
from tests.unit.service.stub_plan import views_plan


class Commits:
    """Stands in for the lag groups' admin client: the commits asked for, in order."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, dict[str, int]]] = []

    def commit(self, pipeline: str, ends: dict[str, int]) -> None:
        self.asked.append((pipeline, dict(ends)))

    def flush(self) -> None:
        """Nothing is in flight."""


def test_a_tasks_reports_count_what_it_read_and_wrote_and_are_progress(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monitor = Monitor({})
    commits = Commits()
    monkeypatch.setattr(monitor, "_lag_groups", commits)
    metrics = monitor.metrics.registry
    read_in = {"pipeline": "views", "input": "stream"}
    try:
        monitor.views["views"] = view_of(views_plan())
        before = time.time()
        for lease, records in ((3, 4), (7, 6)):
            report = BatchCounts(
                "views",
                0,
                records={"views": records},
                read={"clicks": records},
                positions={"clicks/0": 10 * lease},
                sub_batches=1,
                lease=lease,
            )
            send(monitor.report_socket.address, report)
        deadline = time.monotonic() + 10
        while metrics.get_sample_value("enrichd_records_in_total", read_in) != 10:
            assert time.monotonic() < deadline, "the daemon did not hear the reports"
            time.sleep(0.05)
        written = {"pipeline": "views", "output": "output"}
        assert metrics.get_sample_value("enrichd_records_out_total", written) == 10
        heard = metrics.get_sample_value(
            "enrichd_last_progress_timestamp_seconds", {"pipeline": "views"}
        )
        assert heard is not None and heard >= before
    finally:
        monitor.close()


def test_a_pipeline_has_read_what_its_slowest_lease_has() -> None:
    assert least_read({}) == {}
    assert least_read({0: {"t/0": 9, "t/1": 4}, 7: {"t/0": 5}}) == {"t/0": 5, "t/1": 0}


def test_a_long_batch_that_ended_early_is_one_line_of_the_daemons_log(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monitor = Monitor({})
    monkeypatch.setattr(monitor, "_lag_groups", Commits())
    line = "long batch 7 ended early: held state 260.0 MiB passed the budget 256.0 MiB"
    try:
        monitor.views["views"] = view_of(views_plan())
        with caplog.at_level(logging.INFO, logger="enrichd.operations"):
            report = BatchCounts("views", 7, positions={"clicks/0": 9}, ended_early=line)
            send(monitor.report_socket.address, report)
            deadline = time.monotonic() + 10
            while not any(line in record.getMessage() for record in caplog.records):
                assert time.monotonic() < deadline, "the daemon did not log the early end"
                time.sleep(0.05)
    finally:
        monitor.close()
    (logged,) = [r.getMessage() for r in caplog.records if "ended early" in r.getMessage()]
    assert logged == f"pipeline views: {line}"
