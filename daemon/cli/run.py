"""``daemon run``: the service; every pipeline of a file until SIGTERM or SIGINT."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from daemon.cli.options import Verbose, show_spark_output
from daemon.service.logs import LogFormat
from daemon.spark import spark_log

PipelinePath = Annotated[Path, typer.Argument(help="The pipeline file (TOML).", show_default=False)]
StopTimeout = Annotated[
    float,
    typer.Option(
        "--stop-timeout",
        min=1.0,
        help="Seconds from SIGTERM/SIGINT to exit 0: the micro-batch in flight gets half of "
        "them to finish, the rest goes to stopping Spark; past them the process exits by force.",
    ),
]

HttpAddress = Annotated[
    str | None,
    typer.Option(
        "--http",
        metavar="HOST:PORT",
        help="Serve /healthz, /livez, /readyz and /metrics (Prometheus) there, e.g. "
        "127.0.0.1:9464. "
        "Default: no endpoint.",
        envvar="ENRICHD_HTTP",
        show_default=False,
    ),
]
LogFormatOption = Annotated[
    LogFormat,
    typer.Option(
        "--log-format",
        envvar="ENRICHD_LOG_FORMAT",
        help="text for people, json for log shippers (one object a line).",
    ),
]
StallTimeout = Annotated[
    float,
    typer.Option(
        "--stall-timeout",
        min=1.0,
        help="Seconds without a progress report after which a pipeline counts as stalled: "
        "not ready, /livez fails, and the systemd watchdog is no longer fed.",
    ),
]


def run(
    pipeline_file: PipelinePath,
    stop_timeout: StopTimeout = 30.0,
    http: HttpAddress = None,
    log_format: LogFormatOption = "text",
    stall_timeout: StallTimeout = 300.0,
    verbose: Verbose = False,
) -> None:
    """Run every pipeline in the file until SIGTERM/SIGINT, then finish and exit 0."""
    show_spark_output(verbose)
    # The service prints nothing on standard output: Spark's log may go there.
    spark_log.allow_stdout()
    # A configuration problem at start-up raises EnrichdError: one line and exit 1 (cli.main).
    from daemon.model.config import load_pipeline_file
    from daemon.service.logs import configure_logging
    from daemon.service.supervisor import run_service

    configure_logging(log_format)
    run_service(
        load_pipeline_file(pipeline_file),
        stop_timeout_s=stop_timeout,
        http=http,
        stall_timeout_s=stall_timeout,
    )
