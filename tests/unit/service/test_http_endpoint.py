"""The HTTP endpoint on a real socket: /healthz, /livez, /readyz, /metrics and its address."""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest
from prometheus_client import CollectorRegistry, Counter

from daemon.errors import ConfigError
from daemon.service.http_endpoint import MetricsServer, parse_address, serve_http


@pytest.fixture
def state() -> dict[str, object]:
    return {
        "ready": False,
        "text": "views: started; no micro-batch or idle report yet",
        "live": True,
        "why": "ok",
    }


@pytest.fixture
def server(state: dict[str, object]) -> Iterator[MetricsServer]:
    registry = CollectorRegistry()
    Counter("enrichd_batches", "Micro-batches.", ["pipeline"], registry=registry).labels(
        "views"
    ).inc(3)
    running = serve_http(
        "127.0.0.1:0",
        registry,
        lambda: (bool(state["ready"]), str(state["text"])),
        liveness=lambda: (bool(state["live"]), str(state["why"])),
    )
    yield running
    running.shutdown()
    running.server_close()


def get(server: MetricsServer, path: str) -> tuple[int, str, str]:
    try:
        with urllib.request.urlopen(server.url + path, timeout=10) as reply:  # noqa: S310
            return reply.status, reply.headers["Content-Type"], reply.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.headers["Content-Type"], error.read().decode()


def test_healthz_is_200_while_the_process_answers(server: MetricsServer) -> None:
    assert get(server, "/healthz") == (200, "text/plain", "ok\n")


def test_livez_is_503_with_the_reason_once_not_live(
    server: MetricsServer, state: dict[str, object]
) -> None:
    assert get(server, "/livez") == (200, "text/plain", "ok\n")
    state.update(live=False, why="views: stalled: no progress report for 301 s")
    assert get(server, "/livez") == (
        503,
        "text/plain",
        "views: stalled: no progress report for 301 s\n",
    )
    assert get(server, "/healthz")[0] == 200  # the process still answers


def test_readyz_is_503_with_the_reason_until_ready(
    server: MetricsServer, state: dict[str, object]
) -> None:
    assert get(server, "/readyz") == (
        503,
        "text/plain",
        "views: started; no micro-batch or idle report yet\n",
    )
    state.update(ready=True, text="views: progressing")
    assert get(server, "/readyz") == (200, "text/plain", "views: progressing\n")


def test_metrics_is_the_prometheus_text_format(server: MetricsServer) -> None:
    status, content_type, body = get(server, "/metrics")
    assert (status, content_type.split(";")[0]) == (200, "text/plain")
    assert 'enrichd_batches_total{pipeline="views"} 3.0' in body.splitlines()


def test_other_paths_are_404(server: MetricsServer) -> None:
    assert get(server, "/")[0] == 404


def test_addresses() -> None:
    assert parse_address("127.0.0.1:9464") == ("127.0.0.1", 9464)
    assert parse_address(":9464") == ("0.0.0.0", 9464)  # noqa: S104
    assert parse_address("[::1]:9464") == ("::1", 9464)
    with pytest.raises(ConfigError, match="give HOST:PORT"):
        parse_address("9464")


def test_a_port_in_use_is_a_config_error(server: MetricsServer) -> None:
    port = server.server_address[1]
    with pytest.raises(ConfigError, match=f"--http 127.0.0.1:{port}: cannot listen there"):
        serve_http(f"127.0.0.1:{port}", CollectorRegistry(), lambda: (True, ""))
