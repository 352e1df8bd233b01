"""``daemon broker``: the embedded development broker, in the foreground until stopped."""

from __future__ import annotations

from typing import Annotated

import typer

from daemon.broker import LOOPBACK, EmbeddedBroker
from daemon.errors import BrokerError
from daemon.signals import StopRequest

Port = Annotated[
    int | None,
    typer.Option("--port", help="Port to listen on.", show_default="a free port"),
]

Host = Annotated[
    str,
    typer.Option(
        "--host",
        help="Address to listen on; 0.0.0.0 serves other hosts, e.g. other containers.",
    ),
]
AdvertisedHost = Annotated[
    str | None,
    typer.Option(
        "--advertised-host",
        help="Host name clients are told to connect to, e.g. a compose service's name.",
        show_default="the --host address (127.0.0.1 for 0.0.0.0)",
    ),
]

_POLL_S = 0.5


def broker(
    port: Port = None, host: Host = LOOPBACK, advertised_host: AdvertisedHost = None
) -> None:
    """Start the embedded Kafka-compatible broker (on loopback by default); print its address.

    It keeps everything in memory: every start is an empty cluster. Ctrl-C or SIGTERM stops
    it and exits 0.

    Raises:
        BrokerError: it could not start, or it died while running.
    """
    # Handled here rather than by main()'s KeyboardInterrupt, because stopping the
    # development broker is how this command is meant to end: exit 0, not 130.
    with (
        StopRequest() as stop,
        EmbeddedBroker(port, host=host, advertised_host=advertised_host) as running,
    ):
        typer.echo(f'bootstrap_servers = "{running.bootstrap_servers}"')
        typer.echo(
            "put that line under [kafka] in a pipeline file; the broker keeps nothing "
            "on disk. Ctrl-C stops it.",
            err=True,
        )
        while not stop.sleep(_POLL_S):
            process = running.process
            if process is not None and process.poll() is not None:
                raise BrokerError(
                    f"the embedded broker exited unexpectedly with code {process.returncode}"
                )
    typer.echo("broker stopped", err=True)
