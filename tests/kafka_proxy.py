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

It reads and writes the protocol with ``daemon verify``'s codec (:mod:`daemon.verify.protocol`:
frames, and a :class:`~daemon.verify.protocol.Reader` whose position says where to rewrite a
field in place); the accept loop is the SCRAM gate's (tests/scram_proxy.py).
"""

from __future__ import annotations

import socket
import struct
import threading
from typing import Any, ClassVar

from daemon.verify.protocol import API_VERSIONS, ProtocolError, Reader, frame, read_frame
from tests.scram_proxy import serve_in_threads

METADATA, FIND_COORDINATOR = 3, 10
READVERTISED: dict[int, int] = {METADATA: 8, FIND_COORDINATOR: 2}
"""The APIs whose answers name brokers, capped at their last versions without flexible fields."""


def cap_versions(version: int, body: bytearray, caps: dict[int, int]) -> None:
    """An ApiVersions answer (after its correlation id) with the APIs of ``caps`` capped."""
    reader = Reader(bytes(body))
    reader.int16()  # error code
    count = reader.uvarint() - 1 if version >= 3 else reader.int32()
    for _ in range(max(count, 0)):
        at = reader.at
        api_key, _, highest = reader.int16(), reader.int16(), reader.int16()
        cap = caps.get(api_key)
        if cap is not None and highest > cap:
            struct.pack_into(">h", body, at + 4, cap)
        if version >= 3:
            reader.skip_tags()


def _advertise(
    body: bytearray, reader: Reader, count: int, upstream: int, port: int, rack: bool
) -> None:
    """Rewrite the port of the ``count`` brokers at ``reader`` from ``upstream`` to ``port``."""
    for _ in range(count):
        reader.int32()  # node id
        reader.string()  # host
        at = reader.at
        if reader.int32() == upstream:
            struct.pack_into(">i", body, at, port)
        if rack:
            reader.string()


def readvertise(api_key: int, version: int, body: bytearray, upstream: int, port: int) -> None:
    """A Metadata or FindCoordinator answer (:data:`READVERTISED`) naming ``port`` for ``upstream``.

    Every client that bootstraps from a proxy in front of a broker that advertises its own
    port then sends everything through the proxy, its coordinator requests too.
    """
    reader = Reader(bytes(body))
    if api_key == METADATA:
        if version >= 3:
            reader.int32()  # throttle time
        brokers = reader.int32()
        _advertise(body, reader, brokers, upstream, port, rack=version >= 1)
    elif api_key == FIND_COORDINATOR:
        if version >= 1:
            reader.int32()  # throttle time
        reader.int16()  # error code
        if version >= 1:
            reader.string()  # error message
        _advertise(body, reader, 1, upstream, port, rack=False)


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
                request = read_frame(client, "the client")
                header = Reader(request)
                api_key, version, correlation_id = header.int16(), header.int16(), header.int32()
                if api_key == API_VERSIONS:
                    pending[correlation_id] = (api_key, version, None)
                elif api_key in self.caps and version <= self.caps[api_key]:
                    header.string()  # client id
                    body, asked = self.asked(api_key, version, request[header.at :])
                    if asked is not None:
                        pending[correlation_id] = (api_key, version, asked)
                    if body is not None:
                        request = request[: header.at] + body
                upstream.sendall(frame(request))

    def _answers(
        self, upstream: socket.socket, client: socket.socket, pending: dict[int, Any]
    ) -> None:
        with _closing(client, upstream):
            while True:
                response = read_frame(upstream)
                correlation_id = Reader(response).int32()
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
                client.sendall(frame(response))

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
        ended = (ConnectionError, OSError, struct.error, ProtocolError)
        return kind is None or issubclass(kind, ended)
