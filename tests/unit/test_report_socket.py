"""The daemon's report socket: what a stage sends reaches the handler of its kind, and a
datagram that is no report is skipped without ending the reading."""

from __future__ import annotations

import logging
import queue
import socket
from pathlib import Path

import pytest

from daemon.model.reports import BatchCounts, MissingOffset, MissingOffsetsResumed, Resumed
from daemon.report_socket import ReportSocket, send

WAIT_S = 10.0
"""A guard against a hang: the reading thread hands a report on at once."""


def test_each_report_reaches_the_handler_of_its_kind(caplog: pytest.LogCaptureFixture) -> None:
    counts: queue.Queue[BatchCounts] = queue.Queue()
    resumed: queue.Queue[MissingOffsetsResumed] = queue.Queue()
    daemon_end = ReportSocket(
        {BatchCounts.kind: counts.put, MissingOffsetsResumed.kind: resumed.put}
    )
    read_on = MissingOffsetsResumed(
        "views", (Resumed(MissingOffset("clicks", 2, 40, 100, 150), "earliest", 100, 60),)
    )
    try:
        with caplog.at_level(logging.WARNING, logger="enrichd.metrics"):
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as stranger:
                stranger.sendto(b'{"pipeline": "views", "records": {}}', daemon_end.address)
            assert send(daemon_end.address, BatchCounts("views", 7, records={"views": 3}))
            assert send(daemon_end.address, read_on)
            assert counts.get(timeout=WAIT_S) == BatchCounts("views", 7, records={"views": 3})
            assert resumed.get(timeout=WAIT_S) == read_on
    finally:
        daemon_end.close()
    assert counts.empty() and resumed.empty()
    skipped = [r.getMessage() for r in caplog.records]
    assert len(skipped) == 1 and skipped[0].startswith("ignoring a malformed metrics message")


def test_a_report_of_a_kind_without_a_handler_is_skipped(
    caplog: pytest.LogCaptureFixture,
) -> None:
    counts: queue.Queue[BatchCounts] = queue.Queue()
    daemon_end = ReportSocket({BatchCounts.kind: counts.put})
    try:
        with caplog.at_level(logging.WARNING, logger="enrichd.metrics"):
            assert send(daemon_end.address, MissingOffsetsResumed("views", ()))
            assert send(daemon_end.address, BatchCounts("views", 1))
            assert counts.get(timeout=WAIT_S) == BatchCounts("views", 1)
    finally:
        daemon_end.close()
    assert [r.getMessage() for r in caplog.records] == [
        "ignoring a malformed metrics message: no handler of 'missing-offsets-resumed' reports"
    ]


def test_a_send_with_no_daemon_listening_fails_quietly(tmp_path: Path) -> None:
    assert not send(str(tmp_path / "gone.sock"), BatchCounts("views", 1))


def test_closing_removes_the_socket() -> None:
    daemon_end = ReportSocket({})
    address = Path(daemon_end.address)
    assert address.exists()
    daemon_end.close()
    assert not address.parent.exists()
