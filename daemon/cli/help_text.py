"""Every command's ``--help`` as its docstring reads to a user.

Typer takes a command's help from its function's docstring, whole, and with rich installed
reads it, and every option's help, as rich markup: ``[kafka]`` or ``[schema_registry]``
vanished as unknown style tags, and the docstring's ``Raises:`` section, written for the
code's readers, was printed as if it were for users. So the commands are declared on apps
that read no markup (:func:`plain_app`), and :func:`apply_help` gives each command the part of
its docstring before the first Google-style section, with reST's double backquotes as
single ones.

Example::

    app = plain_app(name="daemon")
    app.command("validate")(validate)
    apply_help(app)
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable
from typing import Any

import typer

SECTION = re.compile(r"^(Args|Arguments|Raises|Returns|Yields|Example|Examples|Note|Notes):\s*$")
"""A Google-style docstring section's heading: where what is for users ends."""


def plain_app(**settings: Any) -> typer.Typer:
    """A Typer app whose help texts are printed as written: no rich markup is read."""
    return typer.Typer(rich_markup_mode=None, **settings)


def command_help(function: Callable[..., Any]) -> str:
    """The user's part of ``function``'s docstring: up to its first section, ``x`` as `x`."""
    lines = []
    for line in (inspect.getdoc(function) or "").splitlines():
        if SECTION.match(line):
            break
        lines.append(line)
    return re.sub(r"``([^`]+)``", r"`\1`", "\n".join(lines).strip())


def apply_help(app: typer.Typer) -> None:
    """Give every command of ``app`` and of its groups its :func:`command_help`."""
    for command in app.registered_commands:
        if command.help is None and command.callback is not None:
            command.help = command_help(command.callback)
    for group in app.registered_groups:
        if group.typer_instance is not None:
            apply_help(group.typer_instance)
