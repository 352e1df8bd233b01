"""How far a continuous query has read, by its tasks' reports (one per lease)."""

from __future__ import annotations

import time
from collections.abc import Callable

from daemon.consumed import TaskReports
from daemon.model.reports import BatchCounts
from daemon.report_socket import send


def test_a_replay_waits_for_every_lease_and_takes_the_least_each_read() -> None:
    reports = TaskReports(leases=2)
    try:
        first = BatchCounts("p", 0, positions={"t/0": 9, "t/1": 4}, sub_batches=1, lease=7)
        send(reports.address, first)
        _wait_for(lambda: reports.consumed()[1] == 1)
        assert reports.consumed() == ({}, 1)  # the other lease has said nothing yet
        other = BatchCounts("p", 0, positions={"t/0": 5, "t/1": 6}, sub_batches=2, lease=3)
        send(reports.address, other)
        _wait_for(lambda: reports.consumed()[1] == 3)
        assert reports.consumed() == ({"t/0": 5, "t/1": 4}, 3)
    finally:
        reports.close()


def _wait_for(done: Callable[[], bool]) -> None:
    deadline = time.monotonic() + 10
    while not done():
        assert time.monotonic() < deadline, "no report heard"
        time.sleep(0.01)
