"""A SASL/SCRAM-SHA-512 gate in front of Tansu, because Tansu 0.6 authenticates nobody here.

Tansu's ``--authentication`` refuses every login on this build (docs/contributing.md says why),
so this stand-in does the broker's side of SASL instead, the way tests/registry.py stands in
for a Schema Registry: it answers a connection's ``SaslHandshake`` and ``SaslAuthenticate``
requests itself, checks the client's SCRAM proof against one user's password (RFC 5802,
SHA-512), and only then passes the connection's bytes through to Tansu, which advertises
the gate's port. ``ApiVersions`` is passed through before authentication, as brokers allow;
any other request before it closes the connection, as a broker does. The clients are the
real librdkafka SCRAM clients enrichd makes, so a client made without the SASL settings
could not read or write anything.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import socket
import struct
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from daemon.verify.protocol import (
    API_SASL_AUTHENTICATE,
    API_SASL_HANDSHAKE,
    API_VERSIONS,
    ProtocolError,
    Reader,
    bytes_,
    frame,
    read_frame,
    string,
)

_UNSUPPORTED_SASL_MECHANISM, _SASL_AUTHENTICATION_FAILED = 33, 58
MECHANISM = "SCRAM-SHA-512"


def _answer(correlation_id: int, body: bytes) -> bytes:
    """A response frame: the request's correlation id, then ``body``."""
    return frame(struct.pack(">i", correlation_id) + body)


def serve_in_threads(port: int, serve: Callable[[socket.socket], None]) -> socket.socket:
    """Listen on the loopback ``port``; hand each connection to ``serve`` in a thread of its own.

    Returns the listening socket: closing it stops the accepting (open connections go on).
    """
    server = socket.create_server(("127.0.0.1", port))

    def accept() -> None:
        while True:
            try:
                client, _ = server.accept()
            except OSError:
                return  # closed
            threading.Thread(target=serve, args=(client,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    return server


def _hmac(key: bytes, message: bytes) -> bytes:
    return hmac.new(key, message, hashlib.sha512).digest()


@dataclass
class ScramSession:
    """The server side of one SCRAM-SHA-512 exchange (RFC 5802) for one user."""

    user: str
    password: str
    iterations: int = 4096
    salt: bytes = field(default_factory=lambda: os.urandom(16))
    _first_bare: str = ""
    _server_first: str = ""
    _nonce: str = ""

    def first(self, message: str) -> str | None:
        """The server-first message, or None for another user or a malformed message."""
        _, _, bare = message.partition(",,")  # after the GS2 header "n,,"
        attributes = dict(part.split("=", 1) for part in bare.split(",") if "=" in part)
        if attributes.get("n") != self.user or "r" not in attributes:
            return None
        self._first_bare = bare
        self._nonce = attributes["r"] + base64.b64encode(os.urandom(18)).decode()
        salt = base64.b64encode(self.salt).decode()
        self._server_first = f"r={self._nonce},s={salt},i={self.iterations}"
        return self._server_first

    def final(self, message: str) -> str | None:
        """The server-final message, or None when the client's proof is wrong."""
        without_proof, _, proof = message.rpartition(",p=")
        attributes = dict(part.split("=", 1) for part in without_proof.split(",") if "=" in part)
        if attributes.get("r") != self._nonce:
            return None
        salted = hashlib.pbkdf2_hmac("sha512", self.password.encode(), self.salt, self.iterations)
        client_key = _hmac(salted, b"Client Key")
        auth = f"{self._first_bare},{self._server_first},{without_proof}".encode()
        signature = _hmac(hashlib.sha512(client_key).digest(), auth)
        expected = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
        if not hmac.compare_digest(base64.b64decode(proof), expected):
            return None
        return "v=" + base64.b64encode(_hmac(_hmac(salted, b"Server Key"), auth)).decode()


class ScramGate:
    """Listens on ``port``; passes authenticated connections through to ``upstream_port``."""

    def __init__(self, port: int, upstream_port: int, user: str, password: str) -> None:
        self.bootstrap_servers = f"127.0.0.1:{port}"
        self.upstream_port = upstream_port
        self.user, self.password = user, password
        self.authenticated = 0
        self.refused = 0
        """Connections that failed the exchange or sent a request before authenticating."""
        self._lock = threading.Lock()
        self._server = serve_in_threads(port, self._serve)

    def _count(self, authenticated: bool) -> None:
        with self._lock:
            if authenticated:
                self.authenticated += 1
            else:
                self.refused += 1

    def _serve(self, client: socket.socket) -> None:
        try:
            upstream = socket.create_connection(("127.0.0.1", self.upstream_port))
        except OSError:  # the broker is gone: the test is over
            client.close()
            return
        for sock in (client, upstream):  # pass small requests on at once, as a broker answers
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            if self._authenticate(client, upstream):
                self._count(True)
                threading.Thread(target=_pipe, args=(upstream, client), daemon=True).start()
                _pipe(client, upstream)
            else:
                self._count(False)
        except (ConnectionError, OSError, struct.error, ValueError, ProtocolError):
            pass
        finally:
            for sock in (client, upstream):
                sock.close()

    def _authenticate(self, client: socket.socket, upstream: socket.socket) -> bool:
        session = ScramSession(self.user, self.password)
        step = 0
        while True:
            request = read_frame(client, "the client")
            header = Reader(request)
            api_key, version, correlation_id = header.int16(), header.int16(), header.int32()
            header.string()  # client id
            body = Reader(request[header.at :])
            if api_key == API_VERSIONS:
                upstream.sendall(frame(request))
                client.sendall(frame(read_frame(upstream)))
            elif api_key == API_SASL_HANDSHAKE:
                mechanism = body.string()
                error = 0 if mechanism == MECHANISM else _UNSUPPORTED_SASL_MECHANISM
                answer = struct.pack(">hi", error, 1) + string(MECHANISM)
                client.sendall(_answer(correlation_id, answer))
                if error:
                    return False
            elif api_key == API_SASL_AUTHENTICATE and version in (0, 1):
                message = (body.bytes_() or b"").decode()
                step += 1
                reply = session.first(message) if step == 1 else session.final(message)
                error = 0 if reply is not None else _SASL_AUTHENTICATION_FAILED
                text = None if reply is not None else "Authentication failed: invalid credentials"
                answer = struct.pack(">h", error) + string(text) + bytes_((reply or "").encode())
                if version == 1:
                    answer += struct.pack(">q", 0)  # no session lifetime
                client.sendall(_answer(correlation_id, answer))
                if reply is None:
                    return False
                if step == 2:
                    return True
            else:
                return False  # a request before authenticating: closed, as a broker does

    def close(self) -> None:
        """Stop accepting connections (open ones end with their clients)."""
        self._server.close()


def _pipe(source: socket.socket, target: socket.socket) -> None:
    try:
        while chunk := source.recv(65536):
            target.sendall(chunk)
    except OSError:
        pass
    finally:
        for sock in (source, target):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
