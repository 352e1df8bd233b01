"""What a micro-batch wrote, carried from Spark's commit step to the daemon's metrics.

Why a relay: the counts of records written per topic, and of dead letters per reason, are
known exactly only by the tasks that wrote them, which hand them to the sink's ``commit()``
once every task of a micro-batch has committed. Spark runs that ``commit()`` on the driver host but
in a Python worker process of its own, not in the daemon's process where the Prometheus
counters live. So ``commit()`` sends one small JSON datagram per micro-batch to a unix
datagram socket the daemon listens on (its path travels in the sink's spec), and the daemon
adds the counts up. A local unix datagram is not dropped for lack of room (the sender waits,
for at most a second); if the daemon is gone or stuck the send fails, is ignored, and the
batch still commits: metrics never fail a write.

A message: ``{"pipeline": "tweet-views", "batch": 7, "records": {"tweet-views": 40,
"tweet-views.dlq": 2}, "dead_letters": {"UndecodableRecord": 2}, "joiner": {"unmatched": 1},
"latency": {"tweet-views": [[0, 12, 28, 0, ...], 31.5]}, "event_time": {"many": 1764...}}``
(``joiner``: what the joiner counted with ``ctx.count``; ``latency``: the end-to-end latency
histogram per output topic, counts per bucket and the sum in seconds, :mod:`daemon.model.latency`;
``event_time``: the newest event time read per input). The operator, which writes the
records, passes its counts to the sink in counts rows (:data:`daemon.model.wire.COUNTS_TOPIC`).
"""

from __future__ import annotations

import json
import logging
import shutil
import socket
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from daemon.private_paths import runtime_folder

log = logging.getLogger("enrichd.metrics")

_MAX_DATAGRAM = 65_536


def send_batch_counts(
    address: str,
    pipeline: str,
    batch: int,
    records: dict[str, int],
    dead_letters: dict[str, int],
    joiner: dict[str, int] | None = None,
    *,
    latency: dict[str, Any] | None = None,
    event_time: dict[str, int] | None = None,
) -> bool:
    """Send one micro-batch's counts to the daemon at ``address``; False if it cannot be sent."""
    message = json.dumps(
        {
            "pipeline": pipeline,
            "batch": batch,
            "records": records,
            "dead_letters": dead_letters,
            "joiner": joiner or {},
            "latency": latency or {},
            "event_time": event_time or {},
        }
    ).encode()
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
            # A full receive queue blocks the sender; a stuck daemon must not stall a batch.
            sock.settimeout(1.0)
            sock.sendto(message, address)
    except OSError:
        return False
    return True


class MetricsRelay:
    """The daemon's end: a socket in a private temporary folder and a thread reading it.

    ``on_batch`` gets every decoded message; a malformed datagram is logged and skipped.
    """

    def __init__(self, on_batch: Callable[[dict[str, Any]], None]) -> None:
        self.on_batch = on_batch
        # mkdtemp makes a folder only this user can enter, so no one else can feed the
        # counters; in the runtime folder, with the daemon's other files.
        self._folder = Path(tempfile.mkdtemp(prefix="metrics-", dir=runtime_folder()))
        self.address = str(self._folder / "metrics.sock")
        self._socket = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self._socket.bind(self.address)
        self._socket.settimeout(0.5)
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._receive, name="enrichd-metrics", daemon=True)
        self._thread.start()

    def _receive(self) -> None:
        while not self._closed.is_set():
            try:
                data = self._socket.recv(_MAX_DATAGRAM)
            except TimeoutError:
                continue
            except OSError:
                return  # closed
            try:
                message = json.loads(data)
                self.on_batch(message)
            except Exception as exc:  # one bad message must not end the counting
                log.warning("ignoring a malformed metrics message: %s", exc)

    def close(self) -> None:
        """Stop reading and remove the socket."""
        self._closed.set()
        self._thread.join(timeout=2.0)
        self._socket.close()
        shutil.rmtree(self._folder, ignore_errors=True)
