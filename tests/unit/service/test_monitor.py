"""The supervisor's tick: READY once every query started, watchdog pings only while nothing is
stalled, STATUS as pipelines fail; notifications read from a real unix datagram socket."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from daemon.service.monitor import Monitor
from daemon.service.notify import Notifier


@dataclass
class FakeQuery:
    isActive: bool = True  # noqa: N815 - the name StreamingQuery has
    runId: str = field(default_factory=lambda: str(id(object())))  # noqa: N815


@dataclass
class FakePipeline:
    name: str
    query: Any = None
    restarts: int = 0
    failures: int = 0
    restart_at: float | None = None
    last_failure: str | None = None
    stuck: str | None = None
    stopped: bool = False


class Systemd:
    def __init__(self, path: Path) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(str(path))
        self.sock.setblocking(False)

    def messages(self) -> list[str]:
        out = []
        while True:
            try:
                out.append(self.sock.recv(4096).decode())
            except BlockingIOError:
                return out


@pytest.fixture
def systemd(tmp_path: Path) -> Iterator[Systemd]:
    listening = Systemd(tmp_path / "notify.sock")
    yield listening
    listening.sock.close()


@pytest.fixture
def monitor(systemd: Systemd, tmp_path: Path) -> Iterator[Monitor]:
    notifier = Notifier(str(tmp_path / "notify.sock"), watchdog_usec=2_000_000)  # ping every 1 s
    running = Monitor({"bootstrap.servers": "127.0.0.1:1"}, stall_after_s=60, notifier=notifier)
    yield running
    running.close()


def test_ready_only_once_every_query_has_started(monitor: Monitor, systemd: Systemd) -> None:
    views = FakePipeline("views", query=FakeQuery())
    totals = FakePipeline("views.totals", query=FakeQuery(isActive=False), restart_at=5.0)
    monitor.tick([views, totals], now=1.0)
    assert systemd.messages() == []
    totals.query, totals.restart_at, totals.restarts = FakeQuery(), None, 1
    monitor.tick([views, totals], now=5.0)
    assert systemd.messages() == ["READY=1\nSTATUS=2 of 2 pipelines running", "WATCHDOG=1"]
    monitor.tick([views, totals], now=5.5)
    assert systemd.messages() == []  # the next ping is due a second after the last


def test_status_names_a_pipeline_waiting_for_its_restart(
    monitor: Monitor, systemd: Systemd
) -> None:
    views = FakePipeline("views", query=FakeQuery())
    monitor.tick([views], now=1.0)
    views.query.isActive, views.failures, views.restart_at = False, 1, 3.0
    monitor.tick([views], now=1.2)
    assert systemd.messages() == [
        "READY=1\nSTATUS=1 of 1 pipelines running",
        "WATCHDOG=1",
        "STATUS=0 of 1 pipelines running; restarting: views",
    ]
    reg = monitor.metrics.registry
    assert reg.get_sample_value("enrichd_pipeline_failures_total", {"pipeline": "views"}) == 1


def test_no_watchdog_ping_while_a_query_is_stalled(
    monitor: Monitor, systemd: Systemd, caplog: pytest.LogCaptureFixture
) -> None:
    views = FakePipeline("views", query=FakeQuery())
    monitor.tick([views], now=100.0)  # started: READY and a first ping
    monitor.health.progressed("views", 120.0)
    monitor.tick([views], now=150.0)
    assert systemd.messages() == [
        "READY=1\nSTATUS=1 of 1 pipelines running",
        "WATCHDOG=1",
        "WATCHDOG=1",
    ]
    monitor.tick([views], now=181.0)  # 61 s since the last report: stalled
    monitor.tick([views], now=190.0)
    assert systemd.messages() == []
    assert "pipeline views has not progressed for 60 s" in caplog.text
    gauge = monitor.metrics.registry.get_sample_value
    assert gauge("enrichd_pipeline_stuck", {"pipeline": "views"}) == 1  # hung counts as stuck
    monitor.health.progressed("views", 191.0)  # the batch completed after all
    monitor.tick([views], now=191.5)
    assert systemd.messages() == ["WATCHDOG=1"]
    assert gauge("enrichd_pipeline_stuck", {"pipeline": "views"}) == 0


def test_a_restarted_query_gets_a_fresh_start_time(monitor: Monitor, systemd: Systemd) -> None:
    views = FakePipeline("views", query=FakeQuery())
    monitor.tick([views], now=100.0)
    views.query, views.restarts = FakeQuery(), 1  # restarted at 170: not stalled at 181
    monitor.tick([views], now=170.0)
    monitor.tick([views], now=181.0)
    assert monitor.health.stalled(181.0) == []
    assert systemd.messages()[-1] == "WATCHDOG=1"


def test_waiting_for_kafka_extends_the_start_timeout_and_shows_in_readyz(
    monitor: Monitor, systemd: Systemd
) -> None:
    monitor.waiting("waiting for Kafka: try 2 failed, the next in 2 s", for_s=32)
    assert systemd.messages() == [
        "STATUS=waiting for Kafka: try 2 failed, the next in 2 s\nEXTEND_TIMEOUT_USEC=32000000"
    ]
    assert monitor.readiness() == (
        False,
        "no pipeline has started yet; waiting for Kafka: try 2 failed, the next in 2 s",
    )


def test_a_stuck_pipeline_shows_in_readyz_status_and_its_gauge(
    monitor: Monitor, systemd: Systemd
) -> None:
    views = FakePipeline("views", query=FakeQuery())
    monitor.tick([views], now=1.0)
    why = "stuck: micro-batch 2 failed 5 times in a row with the same error (joiner x): boom"
    views.query.isActive, views.failures, views.restart_at = False, 5, 30.0
    views.last_failure, views.stuck = "boom", why
    monitor.tick([views], now=2.0)
    assert "STATUS=0 of 1 pipelines running; restarting: views; stuck: views" in (
        systemd.messages()
    )
    assert monitor.readiness() == (False, f"views: {why}")
    gauge = monitor.metrics.registry.get_sample_value
    assert gauge("enrichd_pipeline_stuck", {"pipeline": "views"}) == 1
    views.stuck, views.restart_at, views.query = None, None, FakeQuery()  # a batch went through
    monitor.tick([views], now=40.0)
    assert gauge("enrichd_pipeline_stuck", {"pipeline": "views"}) == 0


def test_readyz_names_every_query_and_one_waiting_its_turn(monitor: Monitor) -> None:
    """The pipelines of a file start one by one: one not started yet is waiting, not failed."""
    views = FakePipeline("views", query=FakeQuery())
    clicks = FakePipeline("clicks")  # no query yet, no restart due
    monitor.tick([views, clicks], now=1.0)
    monitor.health.progressed("views", time.monotonic())
    assert monitor.readiness() == (
        False,
        "clicks: waiting its turn to start (a file's pipelines start one by one)\n"
        "views: progressing",
    )
    clicks.query = FakeQuery()
    monitor.tick([views, clicks], now=2.0)
    monitor.health.progressed("clicks", time.monotonic())
    assert monitor.readiness() == (True, "clicks: progressing\nviews: progressing")


def test_livez_fails_while_the_watchdog_goes_unfed(monitor: Monitor) -> None:
    views = FakePipeline("views", query=FakeQuery())
    now = time.monotonic()
    monitor.tick([views], now=now - 61)  # started 61 s ago, and no report since: stalled
    monitor.health.supervised(now)
    live, why = monitor.liveness()
    assert not live and why.startswith("views: stalled: no progress report for 6"), why
    assert "\n" not in why  # the supervisor itself turns
    monitor.health.progressed("views", time.monotonic())
    assert monitor.liveness() == (True, "ok")


def test_stopping_is_told_to_systemd(monitor: Monitor, systemd: Systemd) -> None:
    monitor.stopping()
    assert systemd.messages() == ["STOPPING=1\nSTATUS=stopping"]


def test_a_query_view_names_inputs_by_role_and_outputs_by_name() -> None:
    from types import SimpleNamespace

    from daemon.service.monitor import view_of

    plan: Any = SimpleNamespace(
        config=SimpleNamespace(name="clicks"),
        source=SimpleNamespace(
            inputs=[
                SimpleNamespace(role="stream", topic="clicks"),
                SimpleNamespace(role="table", topic="regions"),
            ]
        ),
        operator=SimpleNamespace(
            output_topic="enriched-clicks",
            outputs={"totals": ("clicks-per-region", None)},
            dead_letter_topic="clicks.dlq",
        ),
    )
    view = view_of(plan)
    assert view.name == "clicks"
    assert view.inputs == {"clicks": "stream", "regions": "table"}
    assert view.outputs == {"enriched-clicks": "output", "clicks-per-region": "totals"}
    assert view.dead_letter_topic == "clicks.dlq"
