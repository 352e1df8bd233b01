"""A few Kafka protocol requests spoken directly: ApiVersions, SASL and a raw Fetch.

Why not through librdkafka: a consumer hands out records, never the record batches they came
in, so it cannot say which transaction wrote a record, nor whether the broker let an aborted
one through to a ``read_committed`` reader. ``daemon verify`` asks the partition leaders
itself, over the same TLS and SASL settings as every other client (``[kafka] client_conf``),
for the raw batches and for the broker's API versions and features.

Only what verify needs is here: the non-flexible Fetch v4 (every broker since Kafka 0.11
answers it, Kafka 4 included), ApiVersions v3 with a v0 fallback, and SASL PLAIN and
SCRAM-SHA-256/512 (RFC 5802). Other mechanisms (GSSAPI, OAUTHBEARER) make
:func:`connection_settings` say why the raw reading is left out.

The encoding itself (:class:`Reader`, :func:`string` and the other writers, :func:`frame` and
:func:`read_frame`) is the one codec of the house: the test suite's Kafka proxies, which stand
in for what its broker cannot do, read and write with it too.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import socket
import ssl
import struct
from dataclasses import dataclass, field
from typing import Any

API_FETCH = 1
API_SASL_HANDSHAKE = 17
API_VERSIONS = 18
API_SASL_AUTHENTICATE = 36
UNSUPPORTED_VERSION = 35
FETCH_VERSION = 4
"""The Fetch version spoken: record batches v2, an isolation level, no flexible encoding."""
_CLIENT_ID = "enrichd-verify"
_SCRAM = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}


class ProtocolError(Exception):
    """A broker answered with an error or something this reader does not understand."""


@dataclass(frozen=True)
class ConnectionSettings:
    """How to reach a broker as the file's clients do: TLS and SASL from ``client_conf``."""

    tls: bool = False
    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    key_password: str | None = None
    verify_certificate: bool = True
    check_hostname: bool = True
    mechanism: str | None = None
    username: str | None = None
    password: str | None = field(default=None, repr=False)


def connection_settings(conf: dict[str, str]) -> ConnectionSettings | str:
    """The settings of librdkafka's ``conf`` for a raw connection, or why it cannot be made.

    Args:
        conf: a client's settings (``bootstrap.servers`` and ``[kafka] client_conf``).

    Returns:
        The settings; or a line saying which setting this reader does not speak.
    """
    protocol = conf.get("security.protocol", "plaintext").lower()
    if protocol not in ("plaintext", "ssl", "sasl_plaintext", "sasl_ssl"):
        return f"security.protocol {protocol!r} is not one the raw reader knows"
    mechanism = None
    if protocol.startswith("sasl"):
        mechanism = conf.get("sasl.mechanism", conf.get("sasl.mechanisms", "GSSAPI")).upper()
        if mechanism != "PLAIN" and mechanism not in _SCRAM:
            return f"sasl.mechanism {mechanism} is not spoken by the raw reader (PLAIN, SCRAM are)"
    verify = conf.get("enable.ssl.certificate.verification", "true").lower() != "false"
    return ConnectionSettings(
        tls=protocol.endswith("ssl"),
        ca_file=conf.get("ssl.ca.location") or None,
        cert_file=conf.get("ssl.certificate.location") or None,
        key_file=conf.get("ssl.key.location") or None,
        key_password=conf.get("ssl.key.password") or None,
        verify_certificate=verify,
        check_hostname=verify
        and conf.get("ssl.endpoint.identification.algorithm", "https").lower() != "none",
        mechanism=mechanism,
        username=conf.get("sasl.username"),
        password=conf.get("sasl.password"),
    )


class Reader:
    """Reads the big-endian fields of one response body."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.at = 0

    def take(self, size: int) -> bytes:
        """The next ``size`` bytes."""
        if self.at + size > len(self.data):
            raise ProtocolError("the response ended early")
        chunk = self.data[self.at : self.at + size]
        self.at += size
        return chunk

    def int8(self) -> int:
        """A signed byte."""
        return int(struct.unpack(">b", self.take(1))[0])

    def int16(self) -> int:
        """A big-endian int16."""
        return int(struct.unpack(">h", self.take(2))[0])

    def int32(self) -> int:
        """A big-endian int32."""
        return int(struct.unpack(">i", self.take(4))[0])

    def int64(self) -> int:
        """A big-endian int64."""
        return int(struct.unpack(">q", self.take(8))[0])

    def uvarint(self) -> int:
        """An unsigned varint."""
        value = shift = 0
        while True:
            byte = self.take(1)[0]
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
            shift += 7
            if shift > 63:
                raise ProtocolError("a varint runs past 64 bits")

    def varint(self) -> int:
        """A zig-zag encoded signed varint, as record fields are written."""
        raw = self.uvarint()
        return (raw >> 1) ^ -(raw & 1)

    def string(self) -> str | None:
        """A STRING (int16 length); None for null."""
        size = self.int16()
        return None if size < 0 else self.take(size).decode("utf-8", "replace")

    def compact_string(self) -> str | None:
        """A COMPACT_STRING (varint length + 1); None for null."""
        size = self.uvarint() - 1
        return None if size < 0 else self.take(size).decode("utf-8", "replace")

    def bytes_(self) -> bytes | None:
        """A BYTES (int32 length); None for null."""
        size = self.int32()
        return None if size < 0 else self.take(size)

    def skip_tags(self) -> dict[int, bytes]:
        """The tagged fields of a flexible structure, by tag."""
        tags = {}
        for _ in range(self.uvarint()):
            tag = self.uvarint()
            tags[tag] = self.take(self.uvarint())
        return tags


def string(text: str | None) -> bytes:
    """A protocol STRING (int16 length), or null."""
    if text is None:
        return struct.pack(">h", -1)
    raw = text.encode()
    return struct.pack(">h", len(raw)) + raw


def bytes_(data: bytes | None) -> bytes:
    """A protocol BYTES (int32 length), or null."""
    if data is None:
        return struct.pack(">i", -1)
    return struct.pack(">i", len(data)) + data


def compact_string(text: str) -> bytes:
    """A flexible version's COMPACT_STRING."""
    raw = text.encode()
    return uvarint(len(raw) + 1) + raw


def frame(payload: bytes) -> bytes:
    """``payload`` as it goes on the wire: its size (int32), then itself."""
    return struct.pack(">i", len(payload)) + payload


def read_frame(sock: socket.socket, peer: str = "the broker") -> bytes:
    """The payload of the next size-prefixed frame on ``sock``.

    Raises:
        ProtocolError: ``peer`` closed the connection before the frame's end.
    """
    (size,) = struct.unpack(">i", _read_exact(sock, 4, peer))
    return _read_exact(sock, size, peer)


def _read_exact(sock: socket.socket, size: int, peer: str) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise ProtocolError(f"{peer} closed the connection")
        data += chunk
    return data


def uvarint(value: int) -> bytes:
    """An unsigned varint."""
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


class BrokerConnection:
    """One connection to one broker, logged in as ``settings`` say; requests one at a time."""

    def __init__(self, host: str, port: int, settings: ConnectionSettings, timeout: float = 30):
        self.settings = settings
        self._correlation = 0
        raw = socket.create_connection((host, port), timeout=timeout)
        if settings.tls:
            context = ssl.create_default_context(cafile=settings.ca_file)
            context.check_hostname = settings.check_hostname
            if not settings.verify_certificate:
                context.verify_mode = ssl.CERT_NONE
            if settings.cert_file:
                context.load_cert_chain(
                    settings.cert_file, settings.key_file, password=settings.key_password
                )
            self.sock: socket.socket = context.wrap_socket(raw, server_hostname=host)
        else:
            self.sock = raw
        self.versions: dict[int, tuple[int, int]] = {}
        self.api_versions_body = self._api_versions()
        if settings.mechanism is not None:
            self._authenticate()

    def request(self, api_key: int, version: int, body: bytes, *, flexible: bool = False) -> bytes:
        """Send one request; return its response body (after the response header).

        ``flexible``: the request uses header v2 and its response header v1 (tagged fields);
        ApiVersions' response header stays v0 whatever the version, as the protocol says.
        """
        self._correlation += 1
        header = struct.pack(">hhi", api_key, version, self._correlation) + string(_CLIENT_ID)
        if flexible:
            header += b"\x00"  # no tagged fields
        self.sock.sendall(frame(header + body))
        response = Reader(read_frame(self.sock))
        if response.int32() != self._correlation:
            raise ProtocolError("the broker answered another request")
        if flexible and api_key != API_VERSIONS:
            response.skip_tags()
        return response.data[response.at :]

    def close(self) -> None:
        """Close the connection."""
        self.sock.close()

    def _api_versions(self) -> bytes:
        """Ask ApiVersions v3 (with features), or v0 where the broker does not know v3."""
        body = compact_string(_CLIENT_ID) + compact_string("1") + b"\x00"
        answer = self.request(API_VERSIONS, 3, body, flexible=True)
        reader = Reader(answer)
        error = reader.int16()
        if error == UNSUPPORTED_VERSION:
            answer = self.request(API_VERSIONS, 0, b"")
            reader = Reader(answer)
            error = reader.int16()
            flexible = False
        else:
            flexible = True
        if error:
            raise ProtocolError(f"ApiVersions answered error {error}")
        count = reader.uvarint() - 1 if flexible else reader.int32()
        for _ in range(max(count, 0)):
            key, low, high = reader.int16(), reader.int16(), reader.int16()
            if flexible:
                reader.skip_tags()
            self.versions[key] = (low, high)
        return answer if flexible else b""

    def supports(self, api_key: int, version: int) -> bool:
        """Whether the broker said it speaks ``version`` of ``api_key``."""
        low, high = self.versions.get(api_key, (0, -1))
        return low <= version <= high

    def _authenticate(self) -> None:
        settings = self.settings
        mechanism = settings.mechanism or ""
        answer = Reader(self.request(API_SASL_HANDSHAKE, 1, string(mechanism)))
        error = answer.int16()
        if error:
            offered = [answer.string() for _ in range(max(answer.int32(), 0))]
            raise ProtocolError(f"the broker does not offer SASL {mechanism} (it offers {offered})")
        user, password = settings.username or "", settings.password or ""
        if mechanism == "PLAIN":
            self._sasl_step(f"\x00{user}\x00{password}".encode())
            return
        exchange = ScramClient(_SCRAM[mechanism], user, password)
        server_first = self._sasl_step(exchange.first().encode())
        server_final = self._sasl_step(exchange.final(server_first.decode()).encode())
        if not exchange.verify(server_final.decode()):
            raise ProtocolError("the broker's SCRAM signature is wrong")

    def _sasl_step(self, message: bytes) -> bytes:
        answer = Reader(self.request(API_SASL_AUTHENTICATE, 1, bytes_(message)))
        error, text = answer.int16(), answer.string()
        if error:
            raise ProtocolError(f"SASL authentication failed ({text or error})")
        return answer.bytes_() or b""


class ScramClient:
    """The client side of one SCRAM exchange (RFC 5802), without channel binding."""

    def __init__(self, digest: str, user: str, password: str) -> None:
        self.digest = digest
        self.password = password
        name = user.replace("=", "=3D").replace(",", "=2C")
        self.nonce = base64.b64encode(os.urandom(18)).decode()
        self.first_bare = f"n={name},r={self.nonce}"
        self._auth = b""
        self._salted = b""

    def first(self) -> str:
        """The client-first message."""
        return "n,," + self.first_bare

    def final(self, server_first: str) -> str:
        """The client-final message, with the proof, for the server-first message."""
        fields = dict(part.split("=", 1) for part in server_first.split(",") if "=" in part)
        nonce, salt, rounds = fields["r"], base64.b64decode(fields["s"]), int(fields["i"])
        if not nonce.startswith(self.nonce):
            raise ProtocolError("the broker's SCRAM nonce does not extend ours")
        without_proof = f"c=biws,r={nonce}"
        self._salted = hashlib.pbkdf2_hmac(self.digest, self.password.encode(), salt, rounds)
        client_key = self._hmac(self._salted, b"Client Key")
        stored = hashlib.new(self.digest, client_key).digest()
        self._auth = f"{self.first_bare},{server_first},{without_proof}".encode()
        signature = self._hmac(stored, self._auth)
        proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
        return f"{without_proof},p={base64.b64encode(proof).decode()}"

    def verify(self, server_final: str) -> bool:
        """Whether the server-final message proves the broker knows the password too."""
        if not server_final.startswith("v="):
            return False
        expected = self._hmac(self._hmac(self._salted, b"Server Key"), self._auth)
        return hmac.compare_digest(base64.b64decode(server_final[2:]), expected)

    def _hmac(self, key: bytes, message: bytes) -> bytes:
        return hmac.new(key, message, self.digest).digest()


@dataclass(frozen=True)
class FetchedPartition:
    """One partition's part of a Fetch response."""

    error: int
    high_watermark: int
    last_stable_offset: int
    aborted: list[tuple[int, int]]
    """The aborted transactions the broker listed: (producer id, first offset)."""
    records: bytes


def fetch_request(topic: str, partition: int, offset: int, max_bytes: int) -> bytes:
    """The body of a Fetch v4 of one partition, read uncommitted (every batch, markers too)."""
    body = struct.pack(">iiiib", -1, 100, 1, max_bytes, 0)
    body += struct.pack(">i", 1) + string(topic)
    body += struct.pack(">i", 1) + struct.pack(">iqi", partition, offset, max_bytes)
    return body


def parse_fetch(body: bytes, topic: str, partition: int) -> FetchedPartition:
    """The partition's answer in a Fetch v4 response body."""
    reader = Reader(body)
    reader.int32()  # throttle time
    for _ in range(reader.int32()):
        name = reader.string()
        for _ in range(reader.int32()):
            number, error = reader.int32(), reader.int16()
            high, stable = reader.int64(), reader.int64()
            aborted = [(reader.int64(), reader.int64()) for _ in range(max(reader.int32(), 0))]
            records = reader.bytes_() or b""
            if name == topic and number == partition:
                return FetchedPartition(error, high, stable, aborted, records)
    raise ProtocolError(f"the Fetch response has no {topic}/{partition}")


def fetch(
    connection: BrokerConnection, topic: str, partition: int, offset: int, max_bytes: int
) -> FetchedPartition:
    """Fetch one partition's raw record batches from ``offset``."""
    body = fetch_request(topic, partition, offset, max_bytes)
    return parse_fetch(connection.request(API_FETCH, FETCH_VERSION, body), topic, partition)


def parse_api_versions(body: bytes) -> dict[str, Any]:
    """The features in an ApiVersions v3 response body: supported ranges and finalized levels.

    Returns:
        ``{"supported": {name: [min, max]}, "finalized": {name: level}}``; empty maps for a
        broker that answered v0 (``body`` empty) or lists none.
    """
    found: dict[str, Any] = {"supported": {}, "finalized": {}}
    if not body:
        return found
    reader = Reader(body)
    reader.int16()
    for _ in range(max(reader.uvarint() - 1, 0)):
        reader.take(6)
        reader.skip_tags()
    reader.int32()  # throttle time
    tags = reader.skip_tags()
    if 0 in tags:
        supported = Reader(tags[0])
        for _ in range(max(supported.uvarint() - 1, 0)):
            name = supported.compact_string() or ""
            found["supported"][name] = [supported.int16(), supported.int16()]
            supported.skip_tags()
    if 2 in tags:
        finalized = Reader(tags[2])
        for _ in range(max(finalized.uvarint() - 1, 0)):
            name = finalized.compact_string() or ""
            level, _ = finalized.int16(), finalized.int16()
            found["finalized"][name] = level
            finalized.skip_tags()
    return found
