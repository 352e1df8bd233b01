"""The service's HTTP endpoint: ``/healthz``, ``/livez``, ``/readyz`` and ``/metrics``.

- ``/healthz``: 200 while the process answers, whatever its pipelines do.
- ``/livez``: 200 while the service makes progress; 503 once a pipeline's query has been
  stalled for the stall timeout, when the systemd watchdog stops being fed too (a liveness
  probe: restart the process when this fails).
- ``/readyz``: 200 when every pipeline's query runs and has progressed recently, else 503;
  one line per query either way, saying how it is (a readiness probe).
- ``/metrics``: the Prometheus text format, from :class:`daemon.service.observability.Metrics`.

A standard-library threaded server on a daemon thread: the endpoint must keep answering while
the main thread supervises Spark, and must never keep the process alive on its own.

Example::

    server = serve_http("127.0.0.1:9464", metrics.registry, lambda: (True, "ready"))
    ...
    server.shutdown()
"""

from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from daemon.errors import ConfigError

log = logging.getLogger("enrichd.http")

Readiness = Callable[[], tuple[bool, str]]
"""Whether the service is ready (or live), and a text saying why (or why not)."""


def always_live() -> tuple[bool, str]:
    """The liveness of a service that has nothing to report: it answers."""
    return True, "ok"


def parse_address(address: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[v6]:PORT`` for IPv6; port 0: any free port) as a pair.

    Raises:
        ConfigError: not of that form.
    """
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        raise ConfigError(
            f"--http {address!r}: give HOST:PORT, e.g. 127.0.0.1:9464 (or 0.0.0.0:9464 "
            "in a container)"
        )
    return host.strip("[]") or "0.0.0.0", int(port)  # noqa: S104 - ":9464" means every address


class MetricsServer(ThreadingHTTPServer):
    """A threaded HTTP server that knows the registry and the readiness check."""

    daemon_threads = True

    def __init__(
        self,
        address: tuple[str, int],
        registry: CollectorRegistry,
        readiness: Readiness,
        liveness: Readiness = always_live,
    ) -> None:
        self.registry = registry
        self.readiness = readiness
        self.liveness = liveness
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        super().__init__(address, _Handler)

    @property
    def url(self) -> str:
        """``http://host:port`` as bound (with the real port when 0 was asked)."""
        host, port = self.server_address[:2]
        return f"http://{host!s}:{port}"


class _Handler(BaseHTTPRequestHandler):
    server: MetricsServer

    def do_GET(self) -> None:  # noqa: N802 - the name http.server calls
        path = self.path.split("?", 1)[0]
        if path == "/healthz":
            self._reply(200, b"ok\n")
        elif path in ("/livez", "/readyz"):
            check = self.server.liveness if path == "/livez" else self.server.readiness
            good, text = check()
            self._reply(200 if good else 503, (text.rstrip("\n") + "\n").encode())
        elif path == "/metrics":
            self._reply(200, generate_latest(self.server.registry), CONTENT_TYPE_LATEST)
        else:
            self._reply(404, b"not found: try /healthz, /livez, /readyz or /metrics\n")

    def _reply(self, status: int, body: bytes, content_type: str = "text/plain") -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        """Scrapes every few seconds would flood the log: keep them at debug level."""
        log.debug("%s " + format, self.address_string(), *args)


def serve_http(
    address: str,
    registry: CollectorRegistry,
    readiness: Readiness,
    liveness: Readiness = always_live,
) -> MetricsServer:
    """Start serving on ``address`` (``HOST:PORT``) in a background thread.

    Raises:
        ConfigError: the address is malformed or cannot be bound.
    """
    host, port = parse_address(address)
    try:
        server = MetricsServer((host, port), registry, readiness, liveness)
    except OSError as exc:
        raise ConfigError(f"--http {address}: cannot listen there ({exc.strerror})") from None
    thread = threading.Thread(target=server.serve_forever, name="enrichd-http", daemon=True)
    thread.start()
    return server
