"""The ``daemon`` command line: one module per command group, composed here.

Errors a user can fix (:class:`daemon.errors.EnrichdError`) become one line on stderr and exit
code 1 in :func:`main`, and nowhere else; ``ENRICHD_DEBUG=1`` shows the traceback instead.
Once a command has set up JSON logs (``daemon run --log-format json``), the line is a JSON
log line, like the rest of the process's output.
Importing this package starts no JVM: commands import Spark only when they run.
"""

from __future__ import annotations

import logging
import os
import sys
import traceback
import warnings

import typer

from daemon.cli import (
    broker,
    demo,
    plugins,
    replay,
    reset,
    run,
    snapshot,
    state,
    validate,
    verify,
)
from daemon.cli.help_text import apply_help, plain_app
from daemon.errors import EnrichdError
from daemon.secrets import redact
from daemon.service.logs import json_lines_configured
from daemon.spark import spark_log

app = plain_app(
    name="daemon",
    help="enrichd: join and enrich Kafka topics with pluggable joiners on Spark.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
app.add_typer(plugins.app, name="plugins")
app.command("run")(run.run)
app.command("validate")(validate.validate)
app.command("broker")(broker.broker)
app.command("replay")(replay.replay)
app.command("demo")(demo.demo)
app.command("state")(state.state)
app.command("reset")(reset.reset)
app.command("rescale")(reset.rescale)
app.command("snapshot")(snapshot.snapshot)
app.command("restore")(snapshot.restore)
app.command("verify")(verify.verify)
apply_help(app)


def debug() -> bool:
    """Whether ``ENRICHD_DEBUG`` asks for tracebacks."""
    return os.environ.get("ENRICHD_DEBUG", "") not in ("", "0")


def report(lines: list[str]) -> None:
    """Write an error's lines to stderr: ``error: LINE``, or JSON lines where logs are JSON.

    Both pass through :func:`daemon.secrets.redact` (the JSON formatter redacts its lines).
    """
    for line in lines:
        if json_lines_configured():
            logging.getLogger("enrichd").error(line)
        else:
            typer.echo(redact(f"error: {line}"), err=True)


def main() -> None:
    """Run the command line, turning operator errors into one line and exit code 1.

    Everything printed here passes through :func:`daemon.secrets.redact`, the traceback
    under ``ENRICHD_DEBUG`` too.
    """
    if not spark_log.verbose():
        # PySpark 4.3 warns on every start that it does not fully support pandas 3: chatter
        # to a user, who can do nothing about it (the Spark log has PySpark's own warnings).
        warnings.filterwarnings(
            "ignore", message="PySpark does not yet fully support pandas", category=FutureWarning
        )
    try:
        app()  # usage errors are reported by Typer itself, with exit code 2
    except EnrichdError as exc:
        if debug():
            _print_traceback(exc)
            sys.exit(1)
        report(str(exc).splitlines() or [type(exc).__name__])
        sys.exit(1)
    except KeyboardInterrupt:
        typer.echo("interrupted", err=True)
        sys.exit(130)
    except Exception as exc:
        if debug():
            _print_traceback(exc)
            sys.exit(1)
        message = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        report([f"{type(exc).__name__}: {message} (ENRICHD_DEBUG=1 shows where)"])
        sys.exit(1)


def _print_traceback(exc: BaseException) -> None:
    """The traceback of ``exc`` on stderr, secrets masked: Python's own would print them.

    A failed pipeline's Spark task traceback comes first: that is where it went wrong.
    """
    task = getattr(exc, "traceback", None)
    if isinstance(task, str):
        sys.stderr.write(redact(f"the Spark task's traceback:\n{task}\n\n"))
    sys.stderr.write(redact("".join(traceback.format_exception(exc))))
