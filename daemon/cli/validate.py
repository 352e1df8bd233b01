"""``daemon validate``: every problem of a pipeline file in one report, without Spark."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from daemon.model.config import ConfigProblems
from daemon.pipeline.validation import summary, validate_pipeline_file
from daemon.secrets import redact

PipelinePath = Annotated[Path, typer.Argument(help="The pipeline file (TOML).", show_default=False)]
CheckTopics = Annotated[
    bool,
    typer.Option(
        "--check-topics",
        help="Also check that every input topic exists on [kafka] bootstrap_servers.",
    ),
]


Offline = Annotated[
    bool,
    typer.Option(
        "--offline",
        help="Do not ask the Schema Registry of [schema_registry] about subjects and schemas.",
    ),
]


def validate(
    pipeline_file: PipelinePath, check_topics: CheckTopics = False, offline: Offline = False
) -> None:
    """Check config, joiners, options, schemas and registry subjects; print every problem.

    With a ``[schema_registry]``, subjects and schemas are checked against it unless
    ``--offline``; a valid file prints a summary.

    Raises:
        ConfigProblems: one line per problem; the command line prints them and exits 1.
    """
    parsed, problems = validate_pipeline_file(
        pipeline_file, check_topics=check_topics, check_registry=not offline
    )
    if problems or parsed is None:
        raise ConfigProblems(problems)
    typer.echo(redact(summary(parsed)))
