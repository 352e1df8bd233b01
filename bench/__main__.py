"""``python -m bench all`` or ``python -m bench NAME``: enrichd against the raw ceiling and a peer.

Each workload is a module ``bench/NAME.py`` with ``add_arguments(parser)`` (its sizes, the
issue's by default) and ``run(args, broker) -> Section``. ``all`` runs every workload that is
present, one after the other on one embedded broker, at the issue's sizes, and writes each
section as it finishes, so a failure late in the run keeps the sections before it. ``NAME``
runs one, with its own options. Either prints a table per workload and writes its section
(between ``<!-- bench:NAME -->`` markers) and chart to ``BENCHMARKS.md`` at the repository top.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import traceback
from pathlib import Path
from types import ModuleType

from rich.console import Console

from bench.report import print_section, write_section
from bench.workloads import REPO

WORKLOADS = ("passthrough", "comap", "lookup", "asof", "window")
"""Every workload, in the order ``all`` runs them (cheapest first)."""


def _modules() -> dict[str, ModuleType | str]:
    """Each workload's module, or why it cannot be imported (not written yet, or broken)."""
    found: dict[str, ModuleType | str] = {}
    for name in WORKLOADS:
        try:
            found[name] = importlib.import_module(f"bench.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"bench.{name}":
                raise  # the module exists but needs something missing: say so loudly
            found[name] = "not written yet"
    return found


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--output",
        type=Path,
        default=REPO / "BENCHMARKS.md",
        help="the Markdown report to write (default: BENCHMARKS.md at the repository top)",
    )
    parser.add_argument(
        "--quix-python",
        default=sys.executable,
        help="the interpreter that runs the Quix Streams peer (default: this one)",
    )
    parser.add_argument("--no-write", action="store_true", help="print only; write no report")


def _parser(modules: dict[str, ModuleType | str]) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    every = commands.add_parser("all", help="every workload at the issues' sizes, one broker")
    _common(every)
    every.add_argument(
        "--only",
        nargs="+",
        choices=WORKLOADS,
        help="run only these workloads (still at their default sizes)",
    )
    for name, module in modules.items():
        if isinstance(module, str):
            continue
        first = (module.__doc__ or name).strip().splitlines()[0].split(": ", 1)[-1]
        sub = commands.add_parser(name, help=first, description=module.__doc__)
        module.add_arguments(sub)
        _common(sub)
    return parser


def _defaults(module: ModuleType, common: argparse.Namespace) -> argparse.Namespace:
    """A workload's default options (the issue's sizes) plus the run's common options."""
    parser = argparse.ArgumentParser()
    module.add_arguments(parser)
    args = parser.parse_args([])
    for name in ("output", "quix_python", "no_write"):
        setattr(args, name, getattr(common, name))
    return args


def main(argv: list[str] | None = None) -> int:
    """Parse the command line and run the chosen workloads; 0 when every check passed."""
    modules = _modules()
    args = _parser(modules).parse_args(argv)
    console = Console()
    if args.command == "all":
        chosen = [n for n in WORKLOADS if not args.only or n in args.only]
        runs = []
        for name in chosen:
            module = modules[name]
            if isinstance(module, str):
                console.print(f"[yellow]{name}: skipped, {module}[/]")
                continue
            runs.append((name, module, _defaults(module, args)))
    else:
        module = modules[args.command]
        assert not isinstance(module, str)
        runs = [(args.command, module, args)]
    from daemon.broker import EmbeddedBroker

    ok = True
    with EmbeddedBroker() as broker:
        for name, module, options in runs:
            console.rule(name)
            try:
                section = module.run(options, broker)
            except Exception:  # noqa: BLE001 - one workload's failure must not lose the others
                console.print(f"[bold red]{name} failed[/]\n{traceback.format_exc()}")
                ok = False
                continue
            print_section(console, section)
            ok = ok and section.ok
            if not options.no_write:
                write_section(options.output, section)
                console.print(f"wrote the {name} section of {options.output}")
    _stop_spark()
    return 0 if ok else 1


def _stop_spark() -> None:
    """Stop the session a workload left running, so the JVM exits with this process."""
    if "pyspark" not in sys.modules:
        return
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        active.stop()


if __name__ == "__main__":
    sys.exit(main())
