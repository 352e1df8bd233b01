"""systemd's notification protocol: readiness, watchdog pings and stopping, without libsystemd.

How it works: systemd starts a ``Type=notify`` service with ``$NOTIFY_SOCKET`` naming a unix
datagram socket (a path, or ``@name`` in the abstract namespace). The service sends it
newline-separated ``KEY=VALUE`` assignments, one datagram per message: ``READY=1`` once
start-up is done, ``WATCHDOG=1`` at least every ``$WATCHDOG_USEC`` microseconds while it is
healthy (systemd kills and restarts it otherwise), ``STOPPING=1`` when it begins to shut down,
``STATUS=...`` as a line for ``systemctl status``. Outside systemd the variable is unset and
every call does nothing, so the service needs no mode switch.

Example::

    notifier = Notifier.from_environment()
    notifier.send(READY="1", STATUS="2 pipelines running")
"""

from __future__ import annotations

import logging
import os
import socket

log = logging.getLogger("enrichd.notify")


class Notifier:
    """Sends notifications to systemd, or nothing when not started by it."""

    def __init__(self, address: str | None, watchdog_usec: int | None = None) -> None:
        self.address = address
        self.watchdog_usec = watchdog_usec

    @classmethod
    def from_environment(cls, *, unset: bool = True) -> Notifier:
        """Read ``$NOTIFY_SOCKET`` and the watchdog settings.

        Args:
            unset: remove the variables from the environment afterwards, so that Spark's JVM
                and Python workers (our children) do not inherit them and cannot speak for
                the service.
        """
        address = os.environ.get("NOTIFY_SOCKET") or None
        watchdog_usec: int | None = None
        usec = os.environ.get("WATCHDOG_USEC", "")
        pid = os.environ.get("WATCHDOG_PID", "")
        # WATCHDOG_PID names the process the watchdog is meant for; another one must not ping.
        if usec.isdigit() and int(usec) > 0 and (not pid or pid == str(os.getpid())):
            watchdog_usec = int(usec)
        if unset:
            for name in ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID"):
                os.environ.pop(name, None)
        return cls(address, watchdog_usec)

    @property
    def enabled(self) -> bool:
        """Whether a notification socket was given."""
        return self.address is not None

    @property
    def watchdog_interval_s(self) -> float | None:
        """How often to ping: half the watchdog timeout, as systemd recommends; None: never."""
        return None if self.watchdog_usec is None else self.watchdog_usec / 2_000_000

    def send(self, **fields: str) -> bool:
        """Send one message of ``KEY=VALUE`` lines; True when it was sent.

        A failure is logged, never raised: losing a notification must not stop the service.
        """
        if self.address is None:
            return False
        message = "\n".join(f"{key}={value}" for key, value in fields.items()).encode()
        # A leading "@" means Linux's abstract namespace, written with a NUL byte.
        target = "\0" + self.address[1:] if self.address.startswith("@") else self.address
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
                sock.sendto(message, target)
        except OSError as exc:
            log.warning("could not notify systemd at %s: %s", self.address, exc)
            return False
        return True
