"""Loopback ports for the servers the tests start, each handed out once per session.

A port from ``bind(("127.0.0.1", 0))`` lies in the kernel's ephemeral range, the range
outgoing connections take their local port from. Between the moment a test picks one and the
moment its server binds it (a daemon's start takes seconds), a Kafka client's connection or
another xdist worker can take the same number: CI saw a daemon refuse ``--http`` with "Address
already in use" and a test read a broker's bytes as an HTTP answer. Below the ephemeral range
each worker takes ports in turn from a slice of its own, so neither can happen.
"""

from __future__ import annotations

import itertools
import os
import socket
from pathlib import Path

SLICE = 2_000
"""Ports per xdist worker: far more than a session's servers."""


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32_768  # Linux's default


def _worker() -> int:
    return int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw") or 0)


_first = max(1_024, _ephemeral_low() - 8 * SLICE) + _worker() * SLICE
_ports = itertools.cycle(range(_first, _first + SLICE))


def free_port() -> int:
    """A loopback TCP port nothing listens on, not handed out before in this worker."""
    for port in _ports:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue  # in use, or in TIME_WAIT from an earlier test
            return port
    raise AssertionError("unreachable: the cycle never ends")
