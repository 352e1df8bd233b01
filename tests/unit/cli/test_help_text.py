"""Every command's ``--help`` reads as written: each sentence of its description and of its
options' help is there word for word, brackets included, and nothing meant for the code's
readers (a docstring's ``Raises:``, reST's double backquotes) is."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from daemon.cli import app


def commands(group: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    """Every command's path, groups' commands too (Typer's own click: duck-typed)."""
    for name, command in group.commands.items():
        yield (*path, name)
        if hasattr(command, "commands"):
            yield from commands(command, (*path, name))


GROUP = typer.main.get_command(app)
EVERY = list(commands(GROUP))


def words(text: str) -> str:
    return " ".join(text.split())


def command_of(path: tuple[str, ...]) -> Any:
    command = GROUP
    for name in path:
        command = command.commands[name]
    return command


def test_every_command_is_covered() -> None:
    assert {"run", "validate", "verify", "demo", "broker"} <= {p[0] for p in EVERY}
    assert ("plugins", "describe") in EVERY


@pytest.mark.parametrize("path", EVERY, ids=" ".join)
def test_help_reads_as_written(path: tuple[str, ...]) -> None:
    done = CliRunner().invoke(app, [*path, "--help"], terminal_width=100)
    assert done.exit_code == 0, done.output
    shown = words(done.output)
    command = command_of(path)
    texts = [command.help or ""] + [
        getattr(param, "help", None) or ""
        for param in command.params
        if param.param_type_name == "option"
    ]
    for text in texts:
        for sentence in re.split(r"(?<=[.;:])\s+", words(text)):
            assert sentence in shown, (sentence, done.output)
    for bracketed in re.findall(r"\[[a-z_.]+\]", " ".join(texts)):
        assert bracketed in shown
    for forbidden in ("Raises:", "Args:", "Returns:", "``"):
        assert forbidden not in done.output, done.output


def test_validate_names_the_sections_of_the_pipeline_file() -> None:
    """The help that lost them: rich took ``[kafka]`` and ``[schema_registry]`` for markup."""
    done = CliRunner().invoke(app, ["validate", "--help"], terminal_width=100)
    shown = words(done.output)
    assert "With a `[schema_registry]`, subjects and schemas are checked against it" in shown
    assert "exists on [kafka] bootstrap_servers." in shown
    assert "ConfigProblems" not in shown
