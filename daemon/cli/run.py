"""``daemon run``: the service; every pipeline of a file until SIGTERM or SIGINT."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Annotated

import typer

PipelinePath = Annotated[Path, typer.Argument(help="The pipeline file (TOML).", show_default=False)]
StopTimeout = Annotated[
    float,
    typer.Option(
        "--stop-timeout",
        min=1.0,
        help="Seconds to finish micro-batches in flight and exit after SIGTERM/SIGINT.",
    ),
]


def run(pipeline_file: PipelinePath, stop_timeout: StopTimeout = 30.0) -> None:
    """Run every pipeline in the file until SIGTERM/SIGINT, then finish and exit 0."""
    # A configuration problem at start-up raises EnrichdError: one line and exit 1 (cli.main).
    from daemon.config import load_pipeline_file
    from daemon.service import run_service

    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    run_service(load_pipeline_file(pipeline_file), stop_timeout_s=stop_timeout)
