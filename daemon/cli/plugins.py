"""``daemon plugins``: what joiners are installed, and what each one does.

Everything shown comes from the plugin host's own records (:func:`daemon.plugin.host.registry`)
and the joiner classes themselves (:mod:`daemon.plugin.describe`), so a third-party joiner is
listed and described exactly like a built-in. A plugin that failed to load is reported after
the joiners; it is not an error of this command.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from daemon.cli.help_text import plain_app
from daemon.plugin.describe import JoinerInfo, describe_joiner
from daemon.plugin.host import BUILTIN_DISTRIBUTION, JoinerRegistry, PluginFailure, registry

app = plain_app(
    help="List and describe the installed joiners.",
    no_args_is_help=True,
    add_completion=False,
)

JsonFlag = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]
JoinerName = Annotated[str, typer.Argument(help="A joiner name from `daemon plugins list`.")]


def _console() -> Console:
    # Wide enough that descriptions stay on one line when piped; rich keeps the terminal
    # width when there is a terminal.
    return Console(soft_wrap=False, width=None if Console().is_terminal else 160)


def joiner_infos(reg: JoinerRegistry) -> list[JoinerInfo]:
    """Every registered joiner, built-ins first, then by name."""
    infos = [describe_joiner(registered) for registered in reg.joiners.values()]
    return sorted(infos, key=lambda info: (info.distribution != BUILTIN_DISTRIBUTION, info.name))


def _failure_json(failure: PluginFailure) -> dict[str, Any]:
    return {
        "plugin": failure.plugin.name,
        "distribution": failure.plugin.distribution,
        "version": failure.plugin.version,
        "error": failure.error,
    }


def listing_json(reg: JoinerRegistry) -> dict[str, Any]:
    """Build the ``plugins list --json`` document: ``{"joiners": [...], "failures": [...]}``."""
    return {
        "joiners": [info.to_json() for info in joiner_infos(reg)],
        "failures": [_failure_json(failure) for failure in reg.failures],
    }


@app.command("list")
def list_joiners(as_json: JsonFlag = False) -> None:
    """List every installed joiner: name, distribution, version, description, options."""
    reg = registry()
    if as_json:
        typer.echo(json.dumps(listing_json(reg), indent=2))
        return
    console = _console()
    table = Table(title="installed joiners", title_justify="left")
    table.add_column("name", no_wrap=True, style="bold")
    table.add_column("distribution", no_wrap=True)
    table.add_column("version", no_wrap=True)
    table.add_column("description")
    table.add_column("options")
    for info in joiner_infos(reg):
        table.add_row(
            escape(info.name),
            escape(info.distribution),
            escape(info.version),
            escape(info.description),
            escape(", ".join(info.option_names()) or "-"),
        )
    console.print(table)
    if reg.failures:
        failures = Table(title="plugins that failed to load", title_justify="left")
        failures.add_column("plugin", no_wrap=True)
        failures.add_column("distribution", no_wrap=True)
        failures.add_column("error")
        for failure in reg.failures:
            failures.add_row(
                escape(failure.plugin.name),
                escape(failure.plugin.distribution),
                escape(failure.error),
            )
        console.print(failures)


@app.command("describe")
def describe(name: JoinerName) -> None:
    """Show a joiner's roles, options (types, defaults, choices) and semantics.

    Raises:
        UnknownJoinerError: no installed plugin provides ``name``; the message lists them.
    """
    info = describe_joiner(registry().get(name))
    console = _console()
    state = "" if info.implemented else "  [yellow](not implemented yet)[/yellow]"
    console.print(
        f"[bold]{escape(info.name)}[/bold]  {escape(info.distribution)} "
        f"{escape(info.version)} (plugin {escape(info.plugin)}){state}"
    )
    console.print(escape(info.description))
    console.print()
    console.print(f"[bold]roles:[/bold] {escape(', '.join(info.roles))}")
    console.print()
    if info.options:
        options = Table(title="options", title_justify="left")
        options.add_column("name", no_wrap=True)
        options.add_column("type")
        options.add_column("default", no_wrap=True)
        options.add_column("description")
        for option in info.options:
            options.add_row(
                escape(option.name),
                escape(option.type_and_field()),
                escape(option.default_text()),
                escape(option.description),
            )
        console.print(options)
    else:
        console.print("[bold]options:[/bold] none")
    for output in info.outputs:
        console.print()
        title = "output value" if output.output == "output" else f"output {output.output}"
        table = Table(title=f"{title} (default options)", title_justify="left")
        table.add_column("field", no_wrap=True)
        table.add_column("holds")
        table.add_column("what")
        for name, kind, what in output.fields:
            table.add_row(escape(name), escape(kind), escape(what))
        console.print(table)
        if output.key:
            console.print(f"key: {escape(output.key)}")
        if output.tombstones:
            console.print(f"tombstones: {escape(output.tombstones)}")
    if not info.outputs:
        console.print()
        console.print("[bold]output value:[/bold] not declared (the semantics say it)")
    console.print()
    console.print(f"[bold]headers:[/bold] {escape(info.headers)}")
    console.print()
    console.print("[bold]semantics[/bold]")
    console.print(escape(info.semantics))
