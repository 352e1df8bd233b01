"""What the operator sees of offsets the broker no longer has: a stopped pipeline on /readyz,
and, for one that reads on past them, one WARN line and counters per partition."""

from __future__ import annotations

import logging
import time

import pytest

from daemon.model.reports import MissingOffset
from daemon.model.wire import RESETS
from daemon.service.monitor import Monitor, view_of
from daemon.service.observability import Health, Metrics
from daemon.source.missing_offsets import failure, report, resume
from tests.unit.service.stub_plan import views_plan

REMOVED = MissingOffset("clicks", 2, needed=40, earliest=100, end=150)


def test_readyz_says_a_stopped_pipeline_is_stopped_and_why() -> None:
    message = str(failure("views", REMOVED))
    health = Health()
    health.started("views", 1.0)
    record = health.of("views")
    record.running, record.stopped, record.last_failure = False, True, message
    assert health.not_ready(2.0) == {"views": f"stopped: {message}"}


def test_reading_on_past_missing_offsets_is_one_warning_and_counted_per_partition(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Through the daemon's metrics socket, as the planner in Spark's worker sends it."""
    plan = views_plan()
    labels = {"pipeline": "views", "topic": "clicks", "partition": "2"}
    resumed = resume(REMOVED, "earliest")
    monitor = Monitor({})
    try:
        monitor.views["views"] = view_of(plan)
        with caplog.at_level(logging.WARNING, logger="enrichd.operations"):
            assert report(monitor.report_socket.address, "views", [resumed])
            deadline = time.monotonic() + 10
            while sample(monitor.metrics, "enrichd_input_offset_resets_total", labels) is None:
                assert time.monotonic() < deadline, "the daemon did not hear the report"
                time.sleep(0.05)
    finally:
        monitor.close()
    assert sample(monitor.metrics, "enrichd_input_offsets_skipped_total", labels) == 60
    assert sample(monitor.metrics, "enrichd_input_offset_resets_total", labels) == 1
    heard = [r.getMessage() for r in caplog.records if r.name == "enrichd.operations"]
    assert heard == [resumed.warning("views")]


def sample(metrics: Metrics, name: str, labels: dict[str, str]) -> float | None:
    return metrics.registry.get_sample_value(name, labels)


def test_records_in_count_from_where_the_source_read_on() -> None:
    """Offsets skipped past are not records read (the plan's ``resets`` entry says where)."""
    plan = views_plan()
    metrics = Metrics()
    start = {"clicks/0": 40, "clicks/1": 500}
    end = {"clicks/0": 150, "clicks/1": 30, RESETS: {"clicks/0": 100, "clicks/1": 0}}
    report = {"name": "views", "sources": [{"startOffset": start, "endOffset": end}]}
    metrics.batch_done(view_of(plan), report)
    labels = {"pipeline": "views", "input": "stream"}
    assert sample(metrics, "enrichd_records_in_total", labels) == 50 + 30
