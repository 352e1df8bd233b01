"""``daemon demo [NAME]``: from a fresh install to visible results in one command."""

from __future__ import annotations

import importlib

import typer

from daemon.cli.options import Verbose, show_spark_output
from daemon.demos import DEMOS
from daemon.errors import EnrichdError


def demo(
    name: str = typer.Argument("comap", help=f"which demo: {', '.join(DEMOS)}", show_default=True),
    verbose: Verbose = False,
) -> None:
    """Start the embedded broker, replay a joiner's sample data and print what it emitted."""
    # rich loads when the command runs: `daemon --help` and other commands do without it.
    from rich.console import Console

    show_spark_output(verbose)
    if name not in DEMOS:
        choices = "; ".join(f"{demo} ({what})" for demo, what in DEMOS.items())
        raise EnrichdError(f"no demo {name!r}; choose one of: {choices}")
    importlib.import_module(f"daemon.demos.{name}").show(Console())
