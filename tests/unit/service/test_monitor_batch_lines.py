"""What a committed micro-batch's report tells the operator beyond its counts: one WARN line
when joiner calls failed, naming the first, and a counter of them; one INFO line when its
tasks replayed it and found it committed, and a counter of those tasks."""

from __future__ import annotations

import logging
import time

import pytest

from daemon.model.reports import BatchCounts
from daemon.report_socket import send
from daemon.service.monitor import Monitor, view_of
from tests.unit.service.stub_plan import views_plan


def test_the_failed_calls_of_a_batch_are_one_line_and_counted(
    caplog: pytest.LogCaptureFixture,
) -> None:
    plan = views_plan()
    first = "joiner 'mine' of plugin 'p' raised RuntimeError('boom') in process of key '1'"
    report = BatchCounts(
        "views",
        7,
        dead_letters={"JoinerFailed": 5},
        failed_calls=4,
        failures=[first, "another"],
    )
    replay = BatchCounts("views", 6, replayed=2)  # after a crash: its tasks found markers
    quiet = BatchCounts("views", 8, records={"views": 3})  # no failure: no line
    monitor = Monitor({})
    metrics = monitor.metrics.registry
    labels = {"pipeline": "views"}
    try:
        monitor.views["views"] = view_of(plan)
        with caplog.at_level(logging.INFO, logger="enrichd.operations"):
            send(monitor.report_socket.address, replay)
            send(monitor.report_socket.address, report)
            send(monitor.report_socket.address, quiet)
            deadline = time.monotonic() + 10
            # The reports are handled in order: the second one's count says both were heard.
            written = {"pipeline": "views", "output": "output"}
            while metrics.get_sample_value("enrichd_records_out_total", written) != 3:
                assert time.monotonic() < deadline, "the daemon did not hear the reports"
                time.sleep(0.05)
    finally:
        monitor.close()
    assert metrics.get_sample_value("enrichd_joiner_failures_total", labels) == 4
    assert metrics.get_sample_value("enrichd_replayed_tasks_total", labels) == 2
    dead = {"pipeline": "views", "reason": "JoinerFailed"}
    assert metrics.get_sample_value("enrichd_dead_letters_total", dead) == 5
    heard = [
        (r.levelname, r.getMessage()) for r in caplog.records if r.name == "enrichd.operations"
    ]
    assert heard == [
        (
            "INFO",
            "pipeline views: micro-batch 6: 2 replayed task(s) found their batch committed "
            "(by its marker) and wrote nothing again",
        ),
        (
            "WARNING",
            "pipeline views: micro-batch 7: 4 joiner call(s) failed; their records went to the "
            f"dead-letter topic as JoinerFailed; the first: {first}",
        ),
    ]
