"""Secured brokers for tests: a CA made by the test, TLS in front of Tansu, SASL turned on.

The test broker (Tansu 0.6) cannot serve TLS itself here (ENVIRONMENT.md), so a TLS
terminator written for the tests with Python's ``ssl`` (tests/tls_proxy.py) stands in front
of a Tansu process that listens on a loopback port of its own and advertises the
terminator's port: every client then reaches the broker through TLS only, the connections
that metadata sends it to included. A session's brokers of this kind are extra Tansu
processes (a few MB each, started in milliseconds), because the session's broker advertises
its plaintext port.

Certificates are made with ``cryptography``: a CA, a server certificate for 127.0.0.1 and
localhost, a client certificate for mutual TLS, and a second CA that signed none of them.
"""

from __future__ import annotations

import datetime
import ipaddress
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from daemon.broker import broker_binary, stop_tansu
from daemon.kafka.admin import EMBEDDED_CLUSTER_ID
from tests.ports import free_port

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Pki:
    """PEM files: ``ca``, ``server``/``server_key``, ``client``/``client_key``, ``other_ca``.

    The client's key is encrypted with ``key_password``, as ``ssl.key.password`` opens it.
    """

    ca: Path
    server: Path
    server_key: Path
    client: Path
    client_key: Path
    other_ca: Path
    key_password: str


def make_pki(folder: Path) -> Pki:
    """Make a CA, a server and a client certificate signed by it, and an unrelated CA."""
    import secrets

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = datetime.datetime.now(datetime.UTC)

    def name(common: str) -> x509.Name:
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])

    key_password = secrets.token_urlsafe(12)

    def write_key(key: ec.EllipticCurvePrivateKey, path: Path, encrypted: bool) -> Path:
        encryption = (
            serialization.BestAvailableEncryption(key_password.encode())
            if encrypted
            else serialization.NoEncryption()
        )
        path.write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption
            )
        )
        return path

    def write_cert(cert: x509.Certificate, path: Path) -> Path:
        path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        return path

    def authority(common: str) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
        key = ec.generate_private_key(ec.SECP256R1())
        cert = (
            x509.CertificateBuilder()
            .subject_name(name(common))
            .issuer_name(name(common))
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=2))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(
                x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False
            )
            .sign(key, hashes.SHA256())
        )
        return key, cert

    ca_key, ca_cert = authority("enrichd test CA")
    _, other_cert = authority("enrichd untrusted CA")

    def leaf(common: str, usage: x509.ObjectIdentifier) -> tuple[Path, Path]:
        key = ec.generate_private_key(ec.SECP256R1())
        builder = (
            x509.CertificateBuilder()
            .subject_name(name(common))
            .issuer_name(ca_cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
                critical=False,
            )
        )
        if usage == ExtendedKeyUsageOID.SERVER_AUTH:
            builder = builder.add_extension(
                x509.SubjectAlternativeName(
                    [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
                ),
                critical=False,
            )
        cert = builder.sign(ca_key, hashes.SHA256())
        encrypted = usage == ExtendedKeyUsageOID.CLIENT_AUTH
        key_path = write_key(key, folder / f"{common}.key", encrypted)
        return write_cert(cert, folder / f"{common}.pem"), key_path

    server, server_key = leaf("server", ExtendedKeyUsageOID.SERVER_AUTH)
    client, client_key = leaf("client", ExtendedKeyUsageOID.CLIENT_AUTH)
    return Pki(
        ca=write_cert(ca_cert, folder / "ca.pem"),
        server=server,
        server_key=server_key,
        client=client,
        client_key=client_key,
        other_ca=write_cert(other_cert, folder / "other-ca.pem"),
        key_password=key_password,
    )


def _await_port(port: int, process: subprocess.Popen[bytes], what: str) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{what} exited with code {process.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"{what} did not listen on port {port}")


def start_tansu(
    port: int, advertised_port: int, *extra: str, cluster_id: str = EMBEDDED_CLUSTER_ID
) -> subprocess.Popen[bytes]:
    """A Tansu process listening on loopback ``port`` that advertises ``advertised_port``.

    ``cluster_id``: the embedded broker's by default, so that pipelines take the commit turn
    on it as on the embedded broker (daemon.sink.commit_turn); Tansu's own is ``tansu_cluster``.
    """
    process = subprocess.Popen(  # noqa: S603 - fixed arguments
        [
            broker_binary(),
            "broker",
            "--cluster-id",
            cluster_id,
            "--listener-url",
            f"tcp://127.0.0.1:{port}",
            "--advertised-listener-url",
            f"tcp://127.0.0.1:{advertised_port}",
            *extra,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    _await_port(port, process, "tansu")
    return process


def start_tls_proxy(
    port: int, upstream_port: int, pki: Pki, *, mutual: bool, log: Path
) -> subprocess.Popen[bytes]:
    """tests/tls_proxy.py on loopback ``port`` in front of ``upstream_port``, logging to ``log``.

    With ``mutual`` it requires a client certificate signed by the test CA. Its standard input
    is a pipe that stays open while it should run (it exits once the pipe closes).
    """
    command = [sys.executable, "-m", "tests.tls_proxy", "--port", str(port)]
    command += ["--upstream-port", str(upstream_port)]
    command += ["--cert", str(pki.server), "--key", str(pki.server_key)]
    if mutual:
        command += ["--ca", str(pki.ca)]
    with log.open("wb") as output:
        process = subprocess.Popen(  # noqa: S603 - our own module
            command,
            cwd=ROOT,  # where ``tests`` is importable from
            stdin=subprocess.PIPE,
            stdout=output,
            stderr=output,
            start_new_session=True,
        )
    _await_port(port, process, "tests/tls_proxy.py")
    return process


class TlsBroker:
    """Tansu behind tests/tls_proxy.py: clients must speak TLS, with ``mutual`` show a certificate.

    ``bootstrap_servers`` is the terminator's port, which Tansu advertises.
    """

    def __init__(self, pki: Pki, folder: Path, *, mutual: bool) -> None:
        self.pki = pki
        self.port = free_port()
        self.bootstrap_servers = f"127.0.0.1:{self.port}"
        tansu_port = free_port()
        self.tansu = start_tansu(tansu_port, self.port)
        log = folder / f"tls-proxy-{self.port}.log"
        self.proxy = start_tls_proxy(self.port, tansu_port, pki, mutual=mutual, log=log)

    def client_conf(self, *, client_cert: bool = True) -> dict[str, str]:
        """Settings of a client that trusts the CA (and shows the client certificate)."""
        conf = {
            "bootstrap.servers": self.bootstrap_servers,
            "security.protocol": "SSL",
            "ssl.ca.location": str(self.pki.ca),
        }
        if client_cert:
            conf["ssl.certificate.location"] = str(self.pki.client)
            conf["ssl.key.location"] = str(self.pki.client_key)
            conf["ssl.key.password"] = self.pki.key_password
        return conf

    def stop(self) -> None:
        """Stop the terminator and Tansu."""
        for process in (self.proxy, self.tansu):
            stop_process(process)


def stop_process(process: subprocess.Popen[bytes]) -> None:
    """Stop a process this module started (a Tansu broker or a proxy) as the embedded
    broker is stopped: killed if it has not exited a second after SIGTERM."""
    stop_tansu(process)
    if process.stdin is not None:
        process.stdin.close()
