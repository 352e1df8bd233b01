"""Options that several commands share, declared once."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

PipelinePath = Annotated[Path, typer.Argument(help="The pipeline file (TOML).", show_default=False)]
PipelineName = Annotated[
    str | None, typer.Option("--pipeline", help="Which pipeline, if the file has several.")
]
Yes = Annotated[bool, typer.Option("--yes", "-y", help="Do it without asking.")]

Verbose = Annotated[
    bool,
    typer.Option(
        "--verbose",
        "-v",
        help="Also show Spark's own output (its JVM's log, its Python workers' lines), which "
        "otherwise goes to a file. Also ENRICHD_VERBOSE=1.",
    ),
]


def show_spark_output(verbose: bool) -> None:
    """Let Spark's own output through, for this process and its children, if asked."""
    if verbose:
        os.environ["ENRICHD_VERBOSE"] = "1"
