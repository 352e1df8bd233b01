"""`daemon broker`: a real embedded broker in the foreground, stopped by a signal."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys

import pytest
from confluent_kafka.admin import AdminClient

from tests.ports import free_port

ADDRESS = re.compile(r'^bootstrap_servers = "([\w.]+:\d+)"$')


def start(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "daemon", "broker", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def address_of(process: subprocess.Popen[str]) -> str:
    assert process.stdout is not None
    line = process.stdout.readline().strip()  # blocks until the broker answers requests
    match = ADDRESS.match(line)
    if match is None and process.poll() is not None and process.stderr is not None:
        line += "\n" + process.stderr.read()
    assert match, line
    return match.group(1)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_broker_prints_its_address_serves_kafka_and_stops_cleanly(signum: int) -> None:
    process = start()
    try:
        servers = address_of(process)
        metadata = AdminClient({"bootstrap.servers": servers}).list_topics(timeout=10)
        assert metadata.brokers
        process.send_signal(signum)
        _, stderr = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 0, stderr
    assert "Ctrl-C stops it" in stderr
    assert "broker stopped" in stderr
    assert "Traceback" not in stderr


def test_broker_listens_on_the_given_port() -> None:
    port = free_port()
    process = start("--port", str(port))
    try:
        assert address_of(process) == f"127.0.0.1:{port}"
    finally:
        os.kill(process.pid, signal.SIGINT)
        process.communicate(timeout=30)
    assert process.returncode == 0


def test_broker_on_all_addresses_advertises_the_given_host_name() -> None:
    """As in a compose stack: listening on 0.0.0.0, clients told to use the service's name."""
    port = free_port()
    everywhere = "0.0.0.0"  # noqa: S104 - the option under test; clients use loopback only
    process = start("--port", str(port), "--host", everywhere, "--advertised-host", "localhost")
    try:
        assert address_of(process) == f"localhost:{port}"
        metadata = AdminClient({"bootstrap.servers": f"127.0.0.1:{port}"}).list_topics(timeout=10)
        assert [(b.host, b.port) for b in metadata.brokers.values()] == [("localhost", port)]
    finally:
        os.kill(process.pid, signal.SIGTERM)
        process.communicate(timeout=30)
    assert process.returncode == 0
