"""The tests' TLS terminator (tests/tls_proxy.py) on its own, in front of an echo server.

The broker tests (tests/test_connecting.py and tests/test_connecting_service.py) show that
librdkafka's clients reach Tansu through it; these show what they rely on in a few seconds:
bytes pass both ways unchanged on many connections at once, in amounts larger than a TLS
record, and a refused handshake gets its TLS alert and leaves the terminator serving.
"""

from __future__ import annotations

import socket
import ssl
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.ports import free_port
from tests.secure_cluster import Pki, start_tls_proxy, stop_process

CHUNK = 65536


class EchoServer:
    """A plaintext server on loopback that sends back every byte it receives."""

    def __init__(self) -> None:
        self._server = socket.create_server(("127.0.0.1", 0))
        self.port = self._server.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._server.accept()
            except OSError:
                return  # closed
            threading.Thread(target=self._echo, args=(conn,), daemon=True).start()

    @staticmethod
    def _echo(conn: socket.socket) -> None:
        with conn:
            try:
                while chunk := conn.recv(CHUNK):
                    conn.sendall(chunk)
            except OSError:
                pass

    def close(self) -> None:
        self._server.close()


@pytest.fixture(scope="module")
def echo() -> Iterator[EchoServer]:
    server = EchoServer()
    yield server
    server.close()


def terminator(pki: Pki, echo: EchoServer, folder: Path, *, mutual: bool) -> Iterator[int]:
    port = free_port()
    process = start_tls_proxy(port, echo.port, pki, mutual=mutual, log=folder / "proxy.log")
    yield port
    stop_process(process)


@pytest.fixture(scope="module")
def tls_port(pki: Pki, echo: EchoServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    yield from terminator(pki, echo, tmp_path_factory.mktemp("tls-proxy"), mutual=False)


@pytest.fixture(scope="module")
def mtls_port(
    pki: Pki, echo: EchoServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[int]:
    yield from terminator(pki, echo, tmp_path_factory.mktemp("mtls-proxy"), mutual=True)


def client_context(pki: Pki, *, client_cert: bool) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(pki.ca))
    if client_cert:
        context.load_cert_chain(str(pki.client), str(pki.client_key), password=pki.key_password)
    return context


def round_trip(port: int, context: ssl.SSLContext, payload: bytes) -> bytes:
    """Send ``payload`` through the terminator, 64 KiB at a time, and read as many bytes back.

    One thread sends and reads, since an ``ssl`` socket must not be used by two at once; 64
    KiB in flight fits the loopback socket buffers, so the echo never waits on this reader.
    """
    received = bytearray()
    with socket.create_connection(("127.0.0.1", port), timeout=30) as raw:
        with context.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
            for start in range(0, len(payload), CHUNK):
                tls.sendall(payload[start : start + CHUNK])
                while len(received) < min(start + CHUNK, len(payload)):
                    chunk = tls.recv(CHUNK)
                    if not chunk:
                        return bytes(received)
                    received += chunk
    return bytes(received)


def test_bytes_pass_both_ways_unchanged_on_many_connections_at_once(
    tls_port: int, pki: Pki
) -> None:
    context = client_context(pki, client_cert=False)
    # Each payload is many TLS records long (a record holds 16 KiB) and differs per connection.
    payloads = [bytes([i]) * 1000 + bytes(range(256)) * 4000 for i in range(16)]
    with ThreadPoolExecutor(max_workers=len(payloads)) as pool:
        echoed = list(pool.map(lambda p: round_trip(tls_port, context, p), payloads))
    assert echoed == payloads


def test_a_client_without_a_certificate_is_refused_and_the_next_one_served(
    mtls_port: int, pki: Pki
) -> None:
    refused = client_context(pki, client_cert=False)
    with socket.create_connection(("127.0.0.1", mtls_port), timeout=30) as raw:
        with refused.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
            # TLS 1.3: the client's side of the handshake ends before the server has checked
            # its certificate, so the terminator's alert arrives on the first read.
            with pytest.raises(ssl.SSLError, match="CERTIFICATE_REQUIRED"):
                tls.recv(1)
    payload = bytes(range(256)) * 1000
    assert round_trip(mtls_port, client_context(pki, client_cert=True), payload) == payload


def test_it_exits_by_itself_once_its_standard_input_closes(
    pki: Pki, echo: EchoServer, tmp_path: Path
) -> None:
    """What ends it when the test process that started it ends without stopping it."""
    process = start_tls_proxy(free_port(), echo.port, pki, mutual=False, log=tmp_path / "log")
    assert process.stdin is not None
    process.stdin.close()
    try:
        assert process.wait(timeout=30) == 0  # a bound on a hang, not a measurement
    finally:
        stop_process(process)
