"""The raw Kafka requests verify speaks: SCRAM, the client settings, Fetch and ApiVersions."""

from __future__ import annotations

import socket
import struct
import threading

import pytest

from daemon.verify.protocol import (
    BrokerConnection,
    ConnectionSettings,
    ProtocolError,
    Reader,
    ScramClient,
    bytes_,
    compact_string,
    connection_settings,
    frame,
    parse_api_versions,
    parse_fetch,
    read_frame,
    string,
    uvarint,
)
from tests.scram_proxy import ScramSession


def test_a_scram_sha_512_exchange_with_the_suites_broker_side() -> None:
    server = ScramSession("enrichd", "s3cret")
    client = ScramClient("sha512", "enrichd", "s3cret")
    server_first = server.first(client.first())
    assert server_first is not None
    server_final = server.final(client.final(server_first))
    assert server_final is not None and client.verify(server_final)
    assert not client.verify("v=" + "A" * 88)  # a broker that does not know the password


def test_a_wrong_password_fails_the_brokers_check() -> None:
    server = ScramSession("enrichd", "s3cret")
    client = ScramClient("sha512", "enrichd", "guess")
    server_first = server.first(client.first())
    assert server_first is not None
    assert server.final(client.final(server_first)) is None


def test_client_settings_become_tls_and_sasl_settings() -> None:
    settings = connection_settings(
        {
            "bootstrap.servers": "b:9096",
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": "SCRAM-SHA-256",
            "sasl.username": "u",
            "sasl.password": "p",
            "ssl.ca.location": "/ca.pem",
            "ssl.endpoint.identification.algorithm": "none",
        }
    )
    assert settings == ConnectionSettings(
        tls=True,
        ca_file="/ca.pem",
        check_hostname=False,
        mechanism="SCRAM-SHA-256",
        username="u",
        password="p",  # noqa: S106 - a test value
    )
    assert connection_settings({}) == ConnectionSettings()


@pytest.mark.parametrize(
    ("conf", "reason"),
    [
        ({"security.protocol": "SASL_SSL"}, "sasl.mechanism GSSAPI is not spoken"),
        (
            {"security.protocol": "sasl_plaintext", "sasl.mechanisms": "OAUTHBEARER"},
            "sasl.mechanism OAUTHBEARER is not spoken",
        ),
        ({"security.protocol": "carrier-pigeon"}, "security.protocol 'carrier-pigeon'"),
    ],
)
def test_settings_the_raw_reader_does_not_speak_say_so(conf: dict[str, str], reason: str) -> None:
    answer = connection_settings(conf)
    assert isinstance(answer, str) and answer.startswith(reason)


def test_a_fetch_v4_response_gives_the_partitions_records_and_offsets() -> None:
    def partition(number: int, records: bytes) -> bytes:
        aborted = struct.pack(">i", 1) + struct.pack(">qq", 9, 40)
        return struct.pack(">ihqq", number, 0, 50, 42) + aborted + bytes_(records)

    body = struct.pack(">i", 0) + struct.pack(">i", 1) + string("t")
    body += struct.pack(">i", 2) + partition(0, b"zero") + partition(1, b"one")
    answer = parse_fetch(body, "t", 1)
    assert (answer.high_watermark, answer.last_stable_offset, answer.aborted) == (50, 42, [(9, 40)])
    assert answer.records == b"one"


def test_features_in_an_api_versions_v3_response() -> None:
    supported = (
        uvarint(2) + compact_string("transaction.version") + struct.pack(">hh", 0, 2) + b"\x00"
    )
    finalized = (
        uvarint(2) + compact_string("transaction.version") + struct.pack(">hh", 2, 2) + b"\x00"
    )
    tags = uvarint(2) + uvarint(0) + uvarint(len(supported)) + supported
    tags += uvarint(2) + uvarint(len(finalized)) + finalized
    body = struct.pack(">h", 0) + uvarint(2) + struct.pack(">hhh", 1, 4, 17) + b"\x00"
    body += struct.pack(">i", 0) + tags
    assert parse_api_versions(body) == {
        "supported": {"transaction.version": [0, 2]},
        "finalized": {"transaction.version": 2},
    }
    assert parse_api_versions(b"") == {"supported": {}, "finalized": {}}


def test_a_broker_without_api_versions_v3_is_asked_v0() -> None:
    """A stand-in broker that answers v3 with UNSUPPORTED_VERSION, as older brokers do."""
    server = socket.create_server(("127.0.0.1", 0))
    asked: list[int] = []

    def serve() -> None:
        conn, _ = server.accept()
        with conn:
            for _ in range(2):
                header = Reader(read_frame(conn, "the client"))
                _, version, correlation = header.int16(), header.int16(), header.int32()
                asked.append(version)
                listing = struct.pack(">i", 1) + struct.pack(">hhh", 1, 0, 11)
                error = 35 if version == 3 else 0
                conn.sendall(frame(struct.pack(">ih", correlation, error) + listing))

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    connection = BrokerConnection("127.0.0.1", server.getsockname()[1], ConnectionSettings())
    connection.close()
    server.close()
    assert asked == [3, 0]
    assert connection.versions == {1: (0, 11)}
    assert connection.supports(1, 4) and not connection.supports(1, 12)
    assert connection.api_versions_body == b""


def test_frames_and_nullable_fields_read_back_as_written() -> None:
    near, far = socket.socketpair()
    with near, far:
        near.sendall(frame(string("t") + string(None) + bytes_(b"ab") + bytes_(None)))
        reader = Reader(read_frame(far))
        assert (reader.string(), reader.string()) == ("t", None)
        assert (reader.bytes_(), reader.bytes_()) == (b"ab", None)
        near.sendall(frame(b"cut short")[:6])
        near.close()
        with pytest.raises(ProtocolError, match="the client closed the connection"):
            read_frame(far, "the client")
