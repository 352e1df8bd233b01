"""A TLS terminator in front of a plaintext broker port, written with Python's ``ssl``.

Tansu cannot serve TLS itself here (ENVIRONMENT.md), so this stands in front of it: it
listens on a loopback port with the server certificate, with ``--ca`` requires a client
certificate that CA signed (mutual TLS), and passes bytes both ways between each TLS
connection and a new plain connection to the broker. It needs nothing beyond the standard
library, so the TLS tests need nothing installed beside the project.

It runs as a process of its own, ``python -m tests.tls_proxy``, started by
tests/secure_cluster.py: its encryption then never waits on the test process's GIL (which
also drives Spark and the test's Kafka clients), and it is started and stopped the way the
Tansu process behind it is. It exits on SIGTERM, or once its standard input reaches its
end: the test process holds the other end of that pipe, so a test process killed before it
could stop the terminator does not leave it running.

Each connection gets a thread that owns both of its sockets. The TLS handshake is done on
the socket itself, waiting for it (up to a timeout), so that when it is refused OpenSSL
writes its alert (``certificate required``, say) straight to the client before the
connection is closed, as a broker's would; a refused handshake ends only its own
connection. The bytes are then relayed by the same thread with non-blocking sockets,
because an ``ssl`` socket must not be read in one thread while it is written in another:
both calls use the same OpenSSL connection object.
"""

from __future__ import annotations

import argparse
import select
import socket
import ssl
import sys
import threading

CHUNK = 65536
HANDSHAKE_TIMEOUT_S = 30
"""A client that opens a connection and says nothing does not hold its thread for good."""


def server_context(cert: str, key: str, ca: str | None) -> ssl.SSLContext:
    """TLS with ``cert``; with ``ca``, clients must show a certificate that CA signed."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    if ca is not None:
        context.verify_mode = ssl.CERT_REQUIRED
        context.load_verify_locations(ca)
    return context


def serve(listener: socket.socket, context: ssl.SSLContext, upstream_port: int) -> None:
    """Accept connections on ``listener`` until it is closed, a thread for each."""
    while True:
        try:
            client, _ = listener.accept()
        except OSError:
            return  # closed
        threading.Thread(
            target=_connection, args=(client, context, upstream_port), daemon=True
        ).start()


def _connection(client: socket.socket, context: ssl.SSLContext, upstream_port: int) -> None:
    with client:
        client.settimeout(HANDSHAKE_TIMEOUT_S)
        try:
            tls = context.wrap_socket(client, server_side=True)  # the handshake, blocking
        except (ssl.SSLError, OSError) as error:  # including secure_cluster's port probe
            print(f"tls_proxy: no TLS session: {error}", file=sys.stderr, flush=True)
            return
        with tls:
            try:
                upstream = socket.create_connection(("127.0.0.1", upstream_port))
            except OSError:
                return  # the broker is gone: the test is over
            with upstream:
                for sock in (tls, upstream):  # small requests and answers go out at once
                    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                try:
                    _relay(tls, upstream)
                except OSError:
                    pass  # a reset or a broken pipe ends the connection like an EOF


class _Direction:
    """Bytes from one socket to the other: ``backlog`` was read and is not written yet."""

    def __init__(self, source: socket.socket, target: socket.socket) -> None:
        self.source, self.target = source, target
        self.backlog = b""

    def move(self) -> tuple[int, int] | None:
        """One read (when nothing waits) and one write; then what to poll for, or None at EOF.

        The sockets are non-blocking: a call that cannot proceed raises, and says what it
        waits for (an ``ssl`` socket may need to read in order to write, or the other way
        round). A write an ``ssl`` socket did not finish is tried again with the same
        bytes, as OpenSSL requires.
        """
        sock = self.source
        try:
            if not self.backlog:
                self.backlog = sock.recv(CHUNK)
                if not self.backlog:
                    return None
            sock = self.target
            sent = sock.send(self.backlog)
            self.backlog = self.backlog[sent:]
        except ssl.SSLWantReadError:
            return sock.fileno(), select.POLLIN
        except ssl.SSLWantWriteError:
            return sock.fileno(), select.POLLOUT
        except BlockingIOError:
            pass
        if sock is self.source:  # its recv would have blocked
            return sock.fileno(), select.POLLIN
        if self.backlog:
            return self.target.fileno(), select.POLLOUT
        return self.source.fileno(), select.POLLIN


def _relay(tls: ssl.SSLSocket, plain: socket.socket) -> None:
    """Pass bytes both ways until either side closes (then the caller closes both).

    A direction reads only once its backlog is written, so a slow reader holds back its
    writer instead of filling memory. Each turn tries both directions, then polls for what
    they wait on: a fresh ``poll`` object per turn has no registrations to keep up to date.
    """
    inbound, outbound = _Direction(tls, plain), _Direction(plain, tls)
    for sock in (tls, plain):
        sock.setblocking(False)
    while True:
        waits = [inbound.move(), outbound.move()]
        wanted: dict[int, int] = {}
        for wait in waits:
            if wait is None:
                return
            fd, events = wait
            wanted[fd] = wanted.get(fd, 0) | events
        poller = select.poll()
        for fd, events in wanted.items():
            poller.register(fd, events)
        # Bytes OpenSSL has already decrypted do not make the socket readable: read them now.
        decrypted = tls.pending() and not inbound.backlog
        poller.poll(0 if decrypted else None)


def main(argv: list[str] | None = None) -> None:
    """Serve until SIGTERM or until standard input closes."""
    parser = argparse.ArgumentParser(prog="python -m tests.tls_proxy", description=__doc__)
    parser.add_argument("--port", type=int, required=True, help="the loopback TLS port")
    parser.add_argument("--upstream-port", type=int, required=True, help="the broker's")
    parser.add_argument("--cert", required=True, help="the server certificate (PEM)")
    parser.add_argument("--key", required=True, help="its key (PEM, unencrypted)")
    parser.add_argument("--ca", help="require client certificates signed by this CA (PEM)")
    args = parser.parse_args(argv)
    context = server_context(args.cert, args.key, args.ca)
    listener = socket.create_server(("127.0.0.1", args.port), backlog=128)
    accepting = threading.Thread(
        target=serve, args=(listener, context, args.upstream_port), daemon=True
    )
    accepting.start()
    sys.stdin.buffer.read()  # returns at EOF: the starting process closed it or ended
    listener.close()


if __name__ == "__main__":
    main()
