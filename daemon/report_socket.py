"""The daemon's report socket: the stages send their reports to it, the daemon reads them.

Why a socket: what the daemon must hear of a pipeline (offsets the source read on past, dead
letters a task wrote after a refusal) is known in Spark's processes, not in the daemon's,
where the Prometheus counters and the log live. The source's planner runs on the driver host
but in a Python worker process of its own, and a task that wrote its output again runs on an
executor. So each sends a report (:mod:`daemon.model.reports`) as one datagram to a unix
datagram socket the daemon listens on (its path travels in the source's and the output's
specs), and the daemon hands each report to the handler of its kind. A micro-batch's counts,
added up on the driver in the daemon's own process, take the same way, so that every report
reaches its handler alike.

A local unix datagram is not dropped for lack of room (the sender waits, for at most a
second); if the daemon is gone or stuck the send fails, is ignored, and the batch goes on:
a report never fails a write or a plan.
"""

from __future__ import annotations

import logging
import shutil
import socket
import tempfile
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from daemon.model.reports import Report, decode, encode
from daemon.private_paths import runtime_folder

log = logging.getLogger("enrichd.metrics")

_MAX_DATAGRAM = 65_536
_SEND_WAIT_S = 1.0
"""How long a send may wait on a full receive queue: a stuck daemon must not stall a stage."""


def send(address: str, report: Report) -> bool:
    """Send ``report`` to the daemon at ``address``; False if it cannot be sent."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
            sock.settimeout(_SEND_WAIT_S)
            sock.sendto(encode(report), address)
    except OSError:
        return False
    return True


class ReportSocket:
    """The daemon's end: a socket in a private temporary folder and a thread reading it.

    Args:
        handlers: what to do with a report, by its kind (``BatchCounts.kind``, ...); each
            gets the decoded report. A datagram that is no report, or of a kind without a
            handler, is logged and skipped.
    """

    def __init__(self, handlers: Mapping[str, Callable[[Any], None]]) -> None:
        self.handlers = dict(handlers)
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
                report = decode(data)
                handler = self.handlers.get(report.kind)
                if handler is None:
                    raise ValueError(f"no handler of {report.kind!r} reports")
                handler(report)
            except Exception as exc:  # one bad message must not end the counting
                log.warning("ignoring a malformed metrics message: %s", exc)

    def close(self) -> None:
        """Stop reading and remove the socket."""
        self._closed.set()
        self._thread.join(timeout=2.0)
        self._socket.close()
        shutil.rmtree(self._folder, ignore_errors=True)
