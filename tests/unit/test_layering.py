"""The tree along the data path: each package of daemon/ imports only what lies below it.

:data:`LAYERS` is the one written order, bottom first; docs/architecture.md ("Where each piece
lives") lists the same entries in the same order. A module belongs to the longest entry that
is a prefix of its name, and may import its own entry and the entries before it, whether the
import is at module level, inside a function or only for type checking.
"""

from __future__ import annotations

import ast
import graphlib
import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "daemon"

LAYERS = (
    "daemon.secrets",  # keeping secrets out of what enrichd prints
    "daemon.errors",  # the one exception root
    "daemon.private_paths",  # the daemon's own folders and files, 0700 and 0600
    "daemon.signals",  # a stop signal as a request
    "daemon.model",  # the vocabulary: pipeline file, wire rows, routing, constants
    "daemon.checkpoint",  # a checkpoint's files: their names, Spark's logs, the due-time map
    "daemon.formats",  # Avro, Kafka keys, the registry, each input's codecs
    "daemon.plugin",  # the plugin contract
    "daemon.joiners",  # the built-in joiners
    "daemon.kafka",  # the Kafka clients
    "daemon.spark",  # the Spark session
    "daemon.report_socket",  # the daemon's socket, which the stages report to
    "daemon.source",  # stage 1: the source
    "daemon.sink",  # stage 4 and 5: transactional output and counts
    "daemon.operator",  # stage 2 and 3: the joiner operator, which writes through the sink
    "daemon.state",  # a checkpoint's state from outside
    "daemon.pipeline",  # composes the stages into a query
    "daemon.broker",  # the embedded development broker
    "daemon.service",  # daemon run
    "daemon.replay",  # daemon replay
    "daemon.demos",  # daemon demo
    "daemon.testing",  # the plugin authors' test kit
    "daemon.verify",  # daemon verify: exactly once proven on a cluster
    "daemon.pytest_plugin",  # the plugin authors' fixtures
    "daemon.cli",  # the command line
    "daemon.__main__",  # python -m daemon
)


@dataclass(frozen=True)
class Import:
    """One import of an enrichd module by another."""

    importer: str
    imported: str
    line: int
    in_function: bool


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def imports_of(name: str, path: Path, known: set[str]) -> list[Import]:
    """Every import of an enrichd module in ``path``, resolved to the module it loads."""
    tree = ast.parse(path.read_text())
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    in_function = {
        id(node)
        for function in ast.walk(tree)
        if isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef)
        for node in ast.walk(function)
    }
    found = []
    for node in ast.walk(tree):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([node.module] if node.module else [])])
            # `from daemon.x import y` loads daemon.x.y when y is a module, else daemon.x.
            targets = [
                f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base
                for alias in node.names
            ]
        for target in targets:
            if target.split(".")[0] == "daemon":
                found.append(Import(name, target, node.lineno, id(node) in in_function))
    return found


def layer_of(name: str) -> int | None:
    """The index in :data:`LAYERS` of the longest entry ``name`` falls under, or None."""
    best = None
    for index, entry in enumerate(LAYERS):
        if (name == entry or name.startswith(entry + ".")) and (
            best is None or len(entry) > len(LAYERS[best])
        ):
            best = index
    return best


def all_imports() -> list[Import]:
    known = set(modules())
    return [found for name, path in modules().items() for found in imports_of(name, path, known)]


def test_every_module_of_daemon_has_a_place_in_the_layers() -> None:
    unplaced = [name for name in modules() if name != "daemon" and layer_of(name) is None]
    assert unplaced == [], f"add these to LAYERS (and docs/architecture.md): {unplaced}"


def test_no_package_imports_one_above_it() -> None:
    upward = [
        f"{found.importer}:{found.line} imports {found.imported}"
        for found in all_imports()
        if found.importer != "daemon"
        and (layer_of(found.imported) or 0) > (layer_of(found.importer) or 0)
    ]
    assert upward == []


def test_the_layering_check_sees_an_upward_import(tmp_path: Path) -> None:
    # The check above must be able to fail: a model module importing the operator is upward.
    source = tmp_path / "daemon" / "model" / "bad.py"
    source.parent.mkdir(parents=True)
    source.write_text("def f():\n    from daemon.operator import core\n")
    found = imports_of("daemon.model.bad", source, {"daemon.operator.core"})
    assert [(i.imported, i.in_function) for i in found] == [("daemon.operator.core", True)]
    assert layer_of("daemon.operator.core") > layer_of("daemon.model.bad")  # type: ignore[operator]


JOINERS_MAY_IMPORT = ("daemon.plugin", "daemon.model", "daemon.joiners")
"""What a built-in joiner may import: the plugin face itself (``daemon.plugin``, not a module
under it), the vocabulary and its sibling joiners, as a third-party plugin imports the face
and its own modules (docs/plugins.md, "What a plugin may import")."""


def joiner_back_doors(found: list[Import]) -> list[str]:
    """The imports by a module of daemon/joiners of anything outside :data:`JOINERS_MAY_IMPORT`."""
    face, *beside = JOINERS_MAY_IMPORT
    return sorted(
        {
            f"{i.importer}:{i.line} imports {i.imported}"
            for i in found
            if (i.importer + ".").startswith("daemon.joiners.")
            and i.imported != face
            and not any((i.imported + ".").startswith(f"{entry}.") for entry in beside)
        }
    )


def test_the_built_in_joiners_import_only_the_plugin_face_and_the_vocabulary() -> None:
    assert joiner_back_doors(all_imports()) == []


def test_the_joiner_check_sees_a_back_door(tmp_path: Path) -> None:
    source = tmp_path / "daemon" / "joiners" / "bad.py"
    source.parent.mkdir(parents=True)
    source.write_text(
        "from daemon.plugin import Joiner\n"
        "from daemon.model.keys import key_parts\n"
        "from daemon.joiners.versions import Versions\n"
        "from daemon.plugin.joiner import JOINED\n"
        "def f():\n    from daemon.formats.avro import codec\n"
    )
    known = {"daemon.plugin.joiner", "daemon.formats.avro.codec", "daemon.joiners.versions"}
    found = imports_of("daemon.joiners.bad", source, known)
    assert joiner_back_doors(found) == [
        "daemon.joiners.bad:4 imports daemon.plugin.joiner",
        "daemon.joiners.bad:6 imports daemon.formats.avro.codec",
    ]


def test_no_import_cycle() -> None:
    graph: dict[str, set[str]] = {name: set() for name in modules()}
    for found in all_imports():
        if found.importer != found.imported and found.imported in graph:
            graph[found.importer].add(found.imported)
    graphlib.TopologicalSorter(graph).prepare()  # raises CycleError naming the cycle


def test_an_import_inside_a_function_says_why() -> None:
    # Only a heavy import kept off a path (Spark, pyarrow, a Kafka or registry client,
    # pydantic on workers) may wait for a function; a comment right above the import (or
    # above the group of imports it starts) says which.
    silent = []
    for name, path in modules().items():
        lines = path.read_text().splitlines()
        tree = ast.parse("\n".join(lines))
        for function in ast.walk(tree):
            if not isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            for node in ast.walk(function):
                if isinstance(node, ast.Import | ast.ImportFrom):
                    above = node.lineno - 2
                    while above >= 0 and lines[above].strip().startswith(("from ", "import ")):
                        above -= 1
                    commented = lines[above].strip().startswith("#")
                    if not commented and "#" not in lines[node.lineno - 1]:
                        silent.append(f"{name}:{node.lineno}")
    assert silent == []


def test_the_architecture_page_lists_the_layers_in_order() -> None:
    page = (ROOT / "docs" / "architecture.md").read_text()
    section = page.split("## Where each piece lives", 1)[1].split("\n## ", 1)[0]
    listed = re.findall(r"^\| `(daemon/[\w/.]*)`", section, flags=re.MULTILINE)
    as_modules = [entry.removesuffix("/").removesuffix(".py").replace("/", ".") for entry in listed]
    assert as_modules == list(LAYERS)


def test_unit_tests_sit_beside_what_they_test() -> None:
    # tests/unit/<package>/test_<module>.py, or test_<module>_<facet>.py for one facet of a
    # large module; the benchmark's own tests mirror bench/.
    whole_tree = {"test_layering.py", "test_worker_imports.py"}
    astray = []
    for test in sorted((ROOT / "tests" / "unit").rglob("test_*.py")):
        if test.name in whole_tree:
            continue
        folder = test.parent.relative_to(ROOT / "tests" / "unit").parts
        under = ROOT.joinpath(*folder) if folder[:1] == ("bench",) else PACKAGE.joinpath(*folder)
        words = test.stem.removeprefix("test_").split("_")
        candidates = ["_".join(words[:n]) for n in range(len(words), 0, -1)]
        if not any((under / f"{name}.py").exists() for name in candidates):
            astray.append(str(test.relative_to(ROOT)))
    assert astray == []
