"""systemd notifications through a real unix datagram socket, as systemd would receive them."""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from daemon.service.notify import Notifier


@pytest.fixture
def systemd(tmp_path: Path) -> Iterator[tuple[str, socket.socket]]:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    path = str(tmp_path / "notify.sock")
    sock.bind(path)
    sock.settimeout(5)
    yield path, sock
    sock.close()


def test_a_message_is_one_datagram_of_key_value_lines(systemd: tuple[str, socket.socket]) -> None:
    path, sock = systemd
    assert Notifier(path).send(READY="1", STATUS="2 of 2 pipelines running")
    assert sock.recv(4096) == b"READY=1\nSTATUS=2 of 2 pipelines running"


def test_an_abstract_socket_address_starts_with_at() -> None:
    name = f"enrichd-test-{uuid.uuid4().hex}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind("\0" + name)
        sock.settimeout(5)
        assert Notifier("@" + name).send(WATCHDOG="1")
        assert sock.recv(4096) == b"WATCHDOG=1"


def test_without_notify_socket_nothing_is_sent(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NOTIFY_SOCKET", raising=False)
    notifier = Notifier.from_environment()
    assert not notifier.enabled
    assert notifier.send(READY="1") is False


def test_a_missing_socket_is_logged_not_raised(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    assert Notifier(str(tmp_path / "gone.sock")).send(READY="1") is False
    assert "could not notify systemd" in caplog.text


def test_the_environment_is_read_then_unset_so_children_cannot_notify(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("NOTIFY_SOCKET", "/run/systemd/notify")
    monkeypatch.setenv("WATCHDOG_USEC", "30000000")
    monkeypatch.setenv("WATCHDOG_PID", str(os.getpid()))
    notifier = Notifier.from_environment()
    assert notifier.address == "/run/systemd/notify"
    assert notifier.watchdog_interval_s == 15.0  # half the watchdog timeout
    assert "NOTIFY_SOCKET" not in os.environ
    assert "WATCHDOG_USEC" not in os.environ


def test_a_watchdog_meant_for_another_process_is_not_fed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NOTIFY_SOCKET", "/run/systemd/notify")
    monkeypatch.setenv("WATCHDOG_USEC", "30000000")
    monkeypatch.setenv("WATCHDOG_PID", str(os.getpid() + 1))
    assert Notifier.from_environment().watchdog_interval_s is None
