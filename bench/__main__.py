"""``python -m bench all`` or ``python -m bench NAME``: enrichd against the raw ceiling and a peer.

Each workload is a module ``bench/NAME.py`` with ``add_arguments(parser)`` (its sizes, the
issue's by default) and ``run(args, broker) -> Section``. ``NAME`` runs one, with its own
options, on an embedded broker of its own. ``all`` runs every workload that is present, one
after the other at the issue's sizes, each as ``python -m bench NAME`` in a child process,
so that every section is what its own command gives (run after others in one process, a
workload shares their broker, which still holds their records, and their JVM: that slowed it
down; ``BENCHMARKS.md`` has the figures). ``smoke`` runs every workload at tiny sizes into a
report of its own, to show the benchmark still works (:mod:`bench.smoke`).
Either prints a table per workload and writes its section (between
``<!-- bench:NAME -->`` markers) and chart to ``BENCHMARKS.md`` at the repository top, as each
workload finishes, so a failure late in the run keeps the sections before it; a joiner's
workload also rewrites its row of the summary atop the file. ``summary`` rebuilds that
summary from the sections as they stand, running nothing (:mod:`bench.summary`).
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import subprocess
import sys
import traceback
from pathlib import Path
from types import ModuleType

from rich.console import Console

from bench import smoke, summary, tuning
from bench.report import print_section, write_section
from bench.workloads import REPO
from daemon.spark import class_archive

WORKLOADS = (
    "passthrough",
    "comap",
    "lookup",
    "nway",
    "asof",
    "window",
    "state",
    "startup",
    "commit_turn",
    "continuous",
)
"""Every workload, in the order ``all`` runs them (cheapest first)."""
MEASURING = ("psutil", "matplotlib")
"""What the ``bench`` extra brings that the workloads and their charts need (psutil samples
memory, matplotlib draws): missing, a run would end in a traceback, the charts' only after
the measuring."""
PEER = "quixstreams"
"""The peer's package, also from the ``bench`` extra; ``--no-quix`` leaves the peer out."""
INSTALL = "pip install -e '.[bench]'"


def _missing(names: tuple[str, ...]) -> list[str]:
    return [name for name in names if importlib.util.find_spec(name) is None]


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
    parser.add_argument(
        "--no-quix",
        dest="quix_python",
        action="store_const",
        const="",
        help="leave the Quix Streams peer out",
    )
    parser.add_argument("--no-write", action="store_true", help="print only; write no report")
    tuning.add_arguments(parser)


def _parser(modules: dict[str, ModuleType | str]) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    every = commands.add_parser(
        "all", help="every workload at the issues' sizes, each in a process of its own"
    )
    _common(every)
    every.add_argument(
        "--only",
        nargs="+",
        choices=WORKLOADS,
        help="run only these workloads (still at their default sizes)",
    )
    smoke.add_arguments(
        commands.add_parser("smoke", help="every workload at tiny sizes, into a report of its own")
    )
    summary.add_arguments(
        commands.add_parser(
            "summary", help="rebuild the summary atop the report from its sections (runs nothing)"
        ),
        REPO / "BENCHMARKS.md",
    )
    for name, module in modules.items():
        if isinstance(module, str):
            continue
        first = (module.__doc__ or name).strip().splitlines()[0].split(": ", 1)[-1]
        sub = commands.add_parser(name, help=first, description=module.__doc__)
        module.add_arguments(sub)
        _common(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Parse the command line and run the chosen workloads; 0 when every check passed."""
    missing = _missing(MEASURING)
    if missing:
        print(f"python -m bench needs {' and '.join(missing)}: {INSTALL}", file=sys.stderr)
        return 1
    modules = _modules()
    parser = _parser(modules)
    args = parser.parse_args(argv)
    if args.command == "summary":
        return summary.run(args)
    quix = getattr(args, "quix_python", "")
    if quix == sys.executable and args.command != "smoke" and _missing((PEER,)):
        print(
            f"python -m bench needs {PEER} for its peer: {INSTALL}, or leave the peer out "
            "with --no-quix",
            file=sys.stderr,
        )
        return 1
    # A JVM that records Spark's class archive runs slower: no measured run records one (it
    # maps one made before, e.g. by `daemon demo`). startup sets this for its own starts.
    os.environ.setdefault(class_archive.SWITCH, "map")
    try:
        tuning.apply(tuning.from_args(args))
    except ValueError as exc:
        parser.error(str(exc))
    if args.command == "all":
        return _run_all(args, modules)
    if args.command == "smoke":
        return smoke.run(args, modules, parser)
    module = modules[args.command]
    assert not isinstance(module, str)
    from daemon.broker import EmbeddedBroker

    console = Console()
    console.rule(args.command)
    try:
        with EmbeddedBroker() as broker:
            try:
                section = module.run(args, broker)
            finally:
                _stop_spark()  # before the broker: Spark's workers hold Kafka clients
    except Exception:  # noqa: BLE001 - say what failed, as a workload of `all` would
        console.print(f"[bold red]{args.command} failed[/]\n{traceback.format_exc()}")
        return 1
    print_section(console, section)
    if not args.no_write:
        write_section(args.output, section)
        console.print(f"wrote the {args.command} section of {args.output}")
    return 0 if section.ok else 1


def _run_all(args: argparse.Namespace, modules: dict[str, ModuleType | str]) -> int:
    """Each chosen workload at its default sizes, as ``python -m bench NAME`` in a child."""
    console = Console()
    common = ["--output", str(Path(args.output).resolve())]
    common += ["--quix-python", args.quix_python] if args.quix_python else ["--no-quix"]
    if args.no_write:
        common.append("--no-write")
    common += tuning.current().options()
    ok = True
    for name in WORKLOADS:
        if args.only and name not in args.only:
            continue
        module = modules[name]
        if isinstance(module, str):
            console.print(f"[yellow]{name}: skipped, {module}[/]")
            continue
        # From the repository top, which holds the bench package, wherever this was run from.
        child = subprocess.run(  # noqa: S603 - this interpreter, this package
            [sys.executable, "-m", "bench", name, *common], cwd=REPO, check=False
        )
        ok = ok and child.returncode == 0
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
