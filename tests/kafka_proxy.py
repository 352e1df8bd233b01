"""A Kafka protocol proxy for tests: passes every frame through, and lets a subclass rewrite some.

Tansu, the test broker, cannot be told to answer some requests the way a test needs (a
ListOffsets answer from a race it rarely loses, a Produce refused as a topic's
``max.message.bytes`` would refuse it). A subclass of :class:`RewritingProxy` sits between
the clients and the broker and changes those requests or their answers; everything else
passes through as it came. It caps the versions of the APIs it reads in the ApiVersions
answer (:attr:`RewritingProxy.caps`) at their last version without flexible fields, so
that its readers and writers stay small. A proxy in front of a broker that advertises its own
port (the session's) rewrites that port to its own in the answers that name brokers
(:func:`readvertise`), so that clients send everything through it.

The frame readers and the accept loop are the SCRAM gate's (tests/scram_proxy.py); the
field readers below read the protocol's plain (not flexible) encodings.
"""

from __future__ import annotations

import socket
import struct
import threading
from typing import Any, ClassVar

from tests.scram_proxy import _read_frame, serve_in_threads

API_VERSIONS = 18
METADATA, FIND_COORDINATOR = 3, 10
READVERTISED: dict[int, int] = {METADATA: 8, FIND_COORDINATOR: 2}
"""The APIs whose answers name brokers, capped at their last versions without flexible fields."""


def send_frame(sock: socket.socket, payload: bytes | bytearray) -> None:
    """Write one size-prefixed frame."""
    sock.sendall(struct.pack(">i", len(payload)) + bytes(payload))


def uvarint(data: bytes | bytearray, at: int) -> tuple[int, int]:
    """An unsigned varint at ``at``, and where the next field starts."""
    value = shift = 0
    while True:
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, at
        shift += 7


def skip_tags(data: bytes | bytearray, at: int) -> int:
    """Where the field after a tagged-fields section at ``at`` starts."""
    count, at = uvarint(data, at)
    for _ in range(count):
        _, at = uvarint(data, at)
        size, at = uvarint(data, at)
        at += size
    return at


def string(data: bytes | bytearray, at: int) -> tuple[str | None, int]:
    """A (nullable) int16-sized string at ``at``, and where the next field starts."""
    (size,) = struct.unpack_from(">h", data, at)
    at += 2
    if size < 0:
        return None, at
    return bytes(data[at : at + size]).decode(), at + size


def int32(data: bytes | bytearray, at: int) -> tuple[int, int]:
    """An int32 at ``at``, and where the next field starts."""
    (value,) = struct.unpack_from(">i", data, at)
    return value, at + 4


def cap_versions(version: int, body: bytearray, caps: dict[int, int]) -> None:
    """An ApiVersions answer (after its correlation id) with the APIs of ``caps`` capped."""
    at = 2  # error code
    if version >= 3:
        count, at = uvarint(body, at)
        count -= 1
    else:
        count, at = int32(body, at)
    for _ in range(max(count, 0)):
        api_key, _, highest = struct.unpack_from(">hhh", body, at)
        cap = caps.get(api_key)
        if cap is not None and highest > cap:
            struct.pack_into(">h", body, at + 4, cap)
        at += 6
        if version >= 3:
            at = skip_tags(body, at)


def _advertise(body: bytearray, at: int, count: int, upstream: int, port: int, rack: bool) -> None:
    """Rewrite the port of each of ``count`` brokers at ``at`` from ``upstream`` to ``port``."""
    for _ in range(count):
        at += 4  # node id
        _, at = string(body, at)
        if struct.unpack_from(">i", body, at)[0] == upstream:
            struct.pack_into(">i", body, at, port)
        at += 4
        if rack:
            _, at = string(body, at)


def readvertise(api_key: int, version: int, body: bytearray, upstream: int, port: int) -> None:
    """A Metadata or FindCoordinator answer (:data:`READVERTISED`) naming ``port`` for ``upstream``.

    Every client that bootstraps from a proxy in front of a broker that advertises its own
    port then sends everything through the proxy, its coordinator requests too.
    """
    if api_key == METADATA:
        at = 4 if version >= 3 else 0  # throttle time
        count, at = int32(body, at)
        _advertise(body, at, count, upstream, port, rack=version >= 1)
    elif api_key == FIND_COORDINATOR:
        at = 0
        if version >= 1:
            at = 6  # throttle time, error code
            _, at = string(body, at)
        else:
            at = 2
        _advertise(body, at, 1, upstream, port, rack=False)


class RewritingProxy:
    """Listens on ``port`` and passes every connection through to the broker on ``upstream_port``.

    A subclass names the APIs it reads in :attr:`caps` and overrides :meth:`asked` and
    :meth:`answer`.
    """

    caps: ClassVar[dict[int, int]] = {}
    """The highest version clients may use, by API key, of each API the proxy reads."""

    def __init__(self, port: int, upstream_port: int) -> None:
        self.port = port
        self.bootstrap_servers = f"127.0.0.1:{port}"
        self.upstream_port = upstream_port
        self._server = serve_in_threads(port, self._serve)

    def asked(self, api_key: int, version: int, body: bytes) -> tuple[bytes | None, Any]:
        """Look at a request (its body after the header) of an API in :attr:`caps`.

        Returns:
            The body to send on instead (None: the request as it came), and what
            :meth:`answer` is to be given with its answer (None: the answer passes as it is).
        """
        return None, None

    def answer(self, api_key: int, version: int, body: bytearray, asked: Any) -> bytes:
        """The answer (its body after the correlation id) to send the client instead."""
        return bytes(body)

    def _serve(self, client: socket.socket) -> None:
        try:
            upstream = socket.create_connection(("127.0.0.1", self.upstream_port))
        except OSError:  # the broker is gone: the test is over
            client.close()
            return
        for sock in (client, upstream):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        pending: dict[int, tuple[int, int, Any]] = {}  # correlation id -> what was asked
        threading.Thread(
            target=self._answers, args=(upstream, client, pending), daemon=True
        ).start()
        with _closing(client, upstream):
            while True:
                request = _read_frame(client)
                api_key, version, correlation_id = struct.unpack_from(">hhi", request)
                if api_key == API_VERSIONS:
                    pending[correlation_id] = (api_key, version, None)
                elif api_key in self.caps and version <= self.caps[api_key]:
                    (client_id_size,) = struct.unpack_from(">h", request, 8)
                    header = request[: 10 + max(client_id_size, 0)]
                    body, asked = self.asked(api_key, version, request[len(header) :])
                    if asked is not None:
                        pending[correlation_id] = (api_key, version, asked)
                    if body is not None:
                        request = header + body
                send_frame(upstream, request)

    def _answers(
        self, upstream: socket.socket, client: socket.socket, pending: dict[int, Any]
    ) -> None:
        with _closing(client, upstream):
            while True:
                response = _read_frame(upstream)
                (correlation_id,) = struct.unpack_from(">i", response)
                asked = pending.pop(correlation_id, None)
                if asked is not None:
                    api_key, version, context = asked
                    body = bytearray(response[4:])  # after the correlation id
                    if api_key == API_VERSIONS:
                        cap_versions(version, body, self.caps)
                        answer = bytes(body)
                    else:
                        answer = self.answer(api_key, version, body, context)
                    response = response[:4] + answer
                send_frame(client, response)

    def close(self) -> None:
        """Stop accepting connections (open ones end with their clients)."""
        self._server.close()


class _closing:  # noqa: N801 - used as a statement, like contextlib's
    """Ends a connection's two sockets when either side ends or a frame cannot be read."""

    def __init__(self, *sockets: socket.socket) -> None:
        self.sockets = sockets

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: Any, exc: Any, trace: Any) -> bool:
        for sock in self.sockets:
            sock.close()
        return kind is None or issubclass(kind, (ConnectionError, OSError, struct.error))
