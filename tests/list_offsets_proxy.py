"""A proxy in front of Tansu that answers ListOffsets(EARLIEST) past a partition's first records.

Tansu 0.6 answers ListOffsets(EARLIEST) with the base offset of the record batch it *stored*
first. It gives a batch its offsets before it stores it, so when two producers write a
partition at once, the batch at offset 0 is now and then stored after a later one, and
ListOffsets then says the partition starts at that later batch, while Fetch responses say
(rightly) that the log starts at 0 (docs/contributing.md; issue 49 caught it in the lookup
replay, whose first stage's two tasks write the enriched topic together). That happens in
a few runs in a hundred, so a test cannot wait for it; this proxy gives the same answer
every time, for the partitions a test names, the way tests/scram_proxy.py stands in for
what Tansu cannot do.

Everything else passes through unchanged: Tansu advertises the proxy's port, so every
client's requests come here. The proxy caps the ListOffsets versions it lets clients use
at 5 in the ApiVersions answers (the last version without flexible fields), so that it can
read and rewrite those requests and answers in place.
"""

from __future__ import annotations

import socket
import struct
import threading
from typing import Any

from tests.scram_proxy import _read_frame

_LIST_OFFSETS, _API_VERSIONS = 2, 18
_MAX_LIST_OFFSETS = 5
_EARLIEST = -2


def _send_frame(sock: socket.socket, payload: bytes | bytearray) -> None:
    sock.sendall(struct.pack(">i", len(payload)) + bytes(payload))


def _uvarint(data: bytes | bytearray, at: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, at
        shift += 7


def _skip_tags(data: bytes | bytearray, at: int) -> int:
    count, at = _uvarint(data, at)
    for _ in range(count):
        _, at = _uvarint(data, at)
        size, at = _uvarint(data, at)
        at += size
    return at


def _string(data: bytes | bytearray, at: int) -> tuple[str, int]:
    (size,) = struct.unpack_from(">h", data, at)
    at += 2
    return bytes(data[at : at + max(size, 0)]).decode(), at + max(size, 0)


def cap_list_offsets(version: int, body: bytearray) -> None:
    """An ApiVersions answer (after its correlation id) with ListOffsets capped, in place."""
    at = 2  # error code
    if version >= 3:
        count, at = _uvarint(body, at)
        count -= 1
    else:
        (count,) = struct.unpack_from(">i", body, at)
        at += 4
    for _ in range(max(count, 0)):
        api_key, _, highest = struct.unpack_from(">hhh", body, at)
        if api_key == _LIST_OFFSETS and highest > _MAX_LIST_OFFSETS:
            struct.pack_into(">h", body, at + 4, _MAX_LIST_OFFSETS)
        at += 6
        if version >= 3:
            at = _skip_tags(body, at)


def earliest_asked(version: int, body: bytes) -> set[tuple[str, int]]:
    """The partitions a ListOffsets request (v1-v5, after its header) asks EARLIEST of."""
    at = 4 + (1 if version >= 2 else 0)  # replica id, isolation level
    asked = set()
    (topics,) = struct.unpack_from(">i", body, at)
    at += 4
    for _ in range(topics):
        topic, at = _string(body, at)
        (partitions,) = struct.unpack_from(">i", body, at)
        at += 4
        for _ in range(partitions):
            (partition,) = struct.unpack_from(">i", body, at)
            at += 4 + (4 if version >= 4 else 0)  # current leader epoch
            (timestamp,) = struct.unpack_from(">q", body, at)
            at += 8
            if timestamp == _EARLIEST:
                asked.add((topic, partition))
    return asked


def rewrite_answer(
    version: int, body: bytearray, asked: set[tuple[str, int]], answers: dict[tuple[str, int], int]
) -> None:
    """Put ``answers`` into a ListOffsets answer (v1-v5) for the ``asked`` partitions."""
    at = 4 if version >= 2 else 0  # throttle time
    (topics,) = struct.unpack_from(">i", body, at)
    at += 4
    for _ in range(topics):
        topic, at = _string(body, at)
        (partitions,) = struct.unpack_from(">i", body, at)
        at += 4
        for _ in range(partitions):
            (partition, error) = struct.unpack_from(">ih", body, at)
            offset_at = at + 4 + 2 + 8
            wanted = answers.get((topic, partition))
            if error == 0 and (topic, partition) in asked and wanted is not None:
                struct.pack_into(">q", body, offset_at, wanted)
            at = offset_at + 8 + (4 if version >= 4 else 0)  # leader epoch


class ListOffsetsProxy:
    """Listens on ``port`` and passes every connection through to Tansu on ``upstream_port``.

    A ListOffsets(EARLIEST) request for a partition in :attr:`earliest` is answered with
    the offset given there instead of Tansu's answer.
    """

    def __init__(self, port: int, upstream_port: int) -> None:
        self.bootstrap_servers = f"127.0.0.1:{port}"
        self.upstream_port = upstream_port
        self.earliest: dict[tuple[str, int], int] = {}
        self._server = socket.create_server(("127.0.0.1", port))
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._server.accept()
            except OSError:
                return  # closed
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        try:
            upstream = socket.create_connection(("127.0.0.1", self.upstream_port))
        except OSError:  # the broker is gone: the test is over
            client.close()
            return
        for sock in (client, upstream):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        pending: dict[int, tuple[int, int, Any]] = {}  # correlation id -> what was asked
        answering = threading.Thread(
            target=self._answers, args=(upstream, client, pending), daemon=True
        )
        answering.start()
        try:
            while True:
                request = _read_frame(client)
                api_key, version, correlation_id = struct.unpack_from(">hhi", request)
                if api_key == _API_VERSIONS:
                    pending[correlation_id] = (api_key, version, None)
                elif api_key == _LIST_OFFSETS and 1 <= version <= _MAX_LIST_OFFSETS:
                    (client_id_size,) = struct.unpack_from(">h", request, 8)
                    body = request[10 + max(client_id_size, 0) :]
                    pending[correlation_id] = (api_key, version, earliest_asked(version, body))
                _send_frame(upstream, request)
        except (ConnectionError, OSError, struct.error):
            pass
        finally:
            for sock in (client, upstream):
                sock.close()

    def _answers(
        self, upstream: socket.socket, client: socket.socket, pending: dict[int, Any]
    ) -> None:
        try:
            while True:
                response = _read_frame(upstream)
                (correlation_id,) = struct.unpack_from(">i", response)
                asked = pending.pop(correlation_id, None)
                if asked is not None:
                    api_key, version, partitions = asked
                    body = bytearray(response[4:])  # after the correlation id
                    if api_key == _API_VERSIONS:
                        cap_list_offsets(version, body)
                    elif partitions:
                        rewrite_answer(version, body, partitions, self.earliest)
                    response = response[:4] + bytes(body)
                _send_frame(client, response)
        except (ConnectionError, OSError, struct.error):
            pass
        finally:
            for sock in (client, upstream):
                sock.close()

    def close(self) -> None:
        """Stop accepting connections (open ones end with their clients)."""
        self._server.close()
