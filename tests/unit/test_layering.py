"""The house's imports, as docs/architecture.md ("Where each piece lives") states them.

Each package of daemon/ may import its own modules and the packages :data:`MAY_IMPORT` names
for it, nothing else; the page's table has a row per package, in the same order, whose last
column names the same packages. The joiners (:data:`THROUGH_THE_FACE`) import the plugin
contract only through its face, ``daemon.plugin`` itself, as a third-party plugin does.
Around daemon/, :data:`HOUSE` says what each of the house's trees may import of the others,
and no import cycle runs anywhere in the house.

Every import counts, at module level, inside a function or only for type checking: an
import put off into a function still ties the two modules' jobs together.
"""

from __future__ import annotations

import ast
import graphlib
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "daemon"

FLOOR = ("secrets", "errors", "model")
"""What every package above the vocabulary may import, but the joiners (the page's "the
floor"): keeping secrets out of what enrichd prints, the one exception root, the vocabulary."""

MAY_IMPORT: dict[str, tuple[str, ...]] = {
    # A module of daemon/ belongs to the package its name's second part names (``daemon.sink
    # .spec`` to ``sink``; ``daemon`` itself, its __init__, to ``__init__``). Read from the
    # floor up: a row names only rows above it, so the rules hold no cycle.
    "__init__": (),  # enrichd's version: `import daemon` loads nothing more
    "secrets": (),
    "errors": ("secrets",),  # an error line never shows a secret
    "private_paths": ("errors",),
    "signals": (),
    "model": ("secrets", "errors"),  # a pipeline file remembers its secrets as it loads
    "checkpoint": (*FLOOR, "private_paths"),
    "formats": FLOOR,
    "plugin": FLOOR,
    "joiners": ("plugin",),  # its face only, as a third-party plugin (docs/plugins.md)
    "kafka": FLOOR,
    "spark": (*FLOOR, "private_paths"),
    "report_socket": (*FLOOR, "private_paths"),
    # The stages: source and sink know nothing of each other, no stage knows a joiner.
    "source": (*FLOOR, "checkpoint", "formats", "kafka", "spark", "report_socket"),
    "sink": (*FLOOR, "private_paths", "checkpoint", "kafka", "spark", "report_socket"),
    "operator": (*FLOOR, "formats", "plugin", "spark", "sink"),  # writes through TaskOutput
    # A long batch's task: reads as the source does, joins through the operator, writes
    # through the sink's sub-batches.
    "continuous": (*FLOOR, "report_socket", "kafka", "spark", "source", "sink", "operator"),
    "state": (
        *FLOOR,
        *("private_paths", "checkpoint", "plugin", "kafka", "spark", "operator"),
        "continuous",  # a continuous checkpoint's leases hold their buckets their own way
    ),
    "pipeline": (
        *FLOOR,
        *("private_paths", "checkpoint", "formats", "plugin", "kafka", "spark"),
        *("source", "sink", "operator", "continuous", "state"),  # it composes the stages
    ),
    # The commands: the service through pipeline/, never a stage; one command imports
    # another only to build on it.
    "broker": (*FLOOR, "kafka"),
    "service": (*FLOOR, "signals", "kafka", "spark", "report_socket", "pipeline"),
    "consumed": (*FLOOR, "report_socket"),
    "replay": (*FLOOR, "formats", "kafka", "spark", "pipeline", "broker", "consumed"),
    "demos": (*FLOOR, "signals", "formats", "kafka", "replay"),
    "testing": (*FLOOR, "formats", "plugin", "source", "operator", "pipeline", "replay"),
    "verify": (
        *FLOOR,
        *("signals", "checkpoint", "formats", "plugin", "kafka", "source"),
        # pipeline: for what continuous mode refuses, as `daemon validate` says it.
        *("pipeline", "broker", "replay", "demos", "testing"),
        # sink: the machine's commit turn, which a zombie must not be stopped inside.
        "sink",
    ),
    "pytest_plugin": (*FLOOR, "spark", "pipeline", "broker"),
    "cli": (
        *FLOOR,
        *("signals", "checkpoint", "plugin", "spark", "state", "pipeline"),
        *("broker", "service", "replay", "demos", "verify"),
    ),
    "__main__": ("cli",),
}
"""Per package of daemon/, the other packages it may import. ``daemon`` itself, which holds
only the version, every module may import: importing any module of daemon/ loads it anyway."""

THROUGH_THE_FACE = frozenset({"joiners"})
"""The packages that import another only through its face (``daemon.plugin``, not
``daemon.plugin.joiner``): the built-in joiners, which see what a third-party plugin sees."""

HOUSE: dict[str, tuple[str, ...]] = {
    "daemon": (),  # what is installed: nothing of the trees beside it
    "bench": ("daemon.*",),  # measures enrichd's parts, as enrichd's own tests do
    "tests": ("daemon.*", "bench.*"),
    # A plugin: the three public modules and the built-ins to build on (docs/plugins.md).
    "plugins": ("daemon.plugin", "daemon.testing", "daemon.pytest_plugin", "daemon.joiners.*"),
    "deploy": (),  # the image's build script
}
"""Per tree of the house (a top folder of the repository), what it may import of the other
trees: a module by its name, or, written ``name.*``, that module and every module under it."""

LONGEST = 600
"""The lines a module of daemon/ may have without saying why it has more."""

REASON_FOR_LENGTH = "Why this module is long:"
"""How a module of daemon/ over :data:`LONGEST` lines starts the line of its docstring that
says why it is not split."""


@dataclass(frozen=True)
class Import:
    """One import of a module of the house by another."""

    importer: str
    imported: str
    line: int


def module_name(path: Path, root: Path = ROOT) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@cache
def modules() -> dict[str, Path]:
    """Every module of daemon/ by name."""
    return {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


@cache
def house_modules() -> dict[str, Path]:
    """Every module of the house's trees by name, as it is imported.

    A plugin's package is named from its plugin's folder, where it is installed from; a
    plugin's tests, which nothing imports, by their path.
    """
    found = {}
    for tree in HOUSE:
        for path in sorted((ROOT / tree).rglob("*.py")):
            parts = path.relative_to(ROOT).parts
            plugin = ROOT / tree / parts[1]
            in_package = len(parts) > 3 and (plugin / parts[2] / "__init__.py").exists()
            found[module_name(path, plugin if tree == "plugins" and in_package else ROOT)] = path
    return found


def tree_of(path: Path) -> str:
    return path.relative_to(ROOT).parts[0]


def imports_of(name: str, path: Path, known: Iterable[str]) -> list[Import]:
    """Every import in ``path`` of a module of the house, resolved to the module it loads."""
    known = set(known)
    tops = {module.split(".")[0] for module in known} | {"daemon"}
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(node, ast.Import | ast.ImportFrom):
            continue
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        else:
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
            if target.split(".")[0] in tops:
                found.append(Import(name, target, node.lineno))
    return found


@cache
def all_imports() -> list[Import]:
    known = set(house_modules())
    return [
        found for name, path in house_modules().items() for found in imports_of(name, path, known)
    ]


def package_of(name: str) -> str | None:
    """The entry of :data:`MAY_IMPORT` a module of daemon/ belongs to; None outside daemon/."""
    if name == "daemon":
        return "__init__"
    return name.split(".")[1] if name.startswith("daemon.") else None


def breaches(found: Iterable[Import]) -> list[str]:
    """The imports among daemon's packages that :data:`MAY_IMPORT` does not allow."""
    wrong = set()
    for i in found:
        importer, imported = package_of(i.importer), package_of(i.imported)
        if importer is None or imported in (None, "__init__", importer):
            continue
        by_the_face = importer not in THROUGH_THE_FACE or i.imported == f"daemon.{imported}"
        if imported not in MAY_IMPORT.get(importer, ()) or not by_the_face:
            wrong.add((i.importer, i.line, i.imported))
    return [f"{importer}:{line} imports {imported}" for importer, line, imported in sorted(wrong)]


def allows(entry: str, module: str) -> bool:
    """Whether an entry of :data:`HOUSE` (``name`` or ``name.*``) allows importing ``module``."""
    if entry.endswith(".*"):
        return module == entry[:-2] or module.startswith(entry[:-1])
    return module == entry


def house_breaches(found: Iterable[Import], trees: Mapping[str, str]) -> list[str]:
    """The imports from one tree of the house into another that :data:`HOUSE` does not allow.

    ``trees`` names the tree of each module.
    """
    wrong = {
        (i.importer, i.line, i.imported)
        for i in found
        if i.imported in trees
        and trees[i.importer] != trees[i.imported]
        and not any(allows(entry, i.imported) for entry in HOUSE[trees[i.importer]])
    }
    return [f"{importer}:{line} imports {imported}" for importer, line, imported in sorted(wrong)]


def import_graph(found: Iterable[Import], names: Iterable[str]) -> dict[str, set[str]]:
    """Each module of ``names`` -> the others of ``names`` it imports."""
    graph: dict[str, set[str]] = {name: set() for name in names}
    for i in found:
        if i.importer in graph and i.imported in graph and i.importer != i.imported:
            graph[i.importer].add(i.imported)
    return graph


def long_without_reason(found: Mapping[str, Path]) -> list[str]:
    """The modules over :data:`LONGEST` lines whose docstring does not say why."""
    unexplained = []
    for name, path in found.items():
        text = path.read_text(encoding="utf-8")
        lines = len(text.splitlines())
        if lines <= LONGEST:
            continue
        docstring = ast.get_docstring(ast.parse(text)) or ""
        if not any(line.startswith(REASON_FOR_LENGTH) for line in docstring.splitlines()):
            unexplained.append(f"{name} ({lines} lines)")
    return unexplained


# -- daemon/'s packages ------------------------------------------------------------------------


def test_every_module_of_daemon_has_a_package_in_the_rules() -> None:
    unplaced = [name for name in modules() if package_of(name) not in MAY_IMPORT]
    assert unplaced == [], f"add these to MAY_IMPORT (and docs/architecture.md): {unplaced}"


def test_each_package_imports_only_what_its_rule_allows() -> None:
    assert breaches(all_imports()) == []


def test_the_rules_read_from_the_floor_up() -> None:
    # A package may import only packages listed before it: the page reads bottom up, and
    # the rules themselves allow no cycle between packages.
    order = list(MAY_IMPORT)
    later = {
        package: [other for other in allowed if order.index(other) >= order.index(package)]
        for package, allowed in MAY_IMPORT.items()
    }
    assert {package: found for package, found in later.items() if found} == {}


def sample_module(package: str, *, behind_the_face: bool = False) -> str | None:
    """A module of a package of daemon/; with ``behind_the_face``, one other than its face."""
    face = "daemon" if package == "__init__" else f"daemon.{package}"
    names = sorted(name for name in modules() if package_of(name) == package)
    return next((name for name in reversed(names) if not behind_the_face or name != face), None)


def import_line(number: int, module: str) -> tuple[str, int]:
    """An import of ``module``, written in turn at module level, for type checking only and
    inside a function; and how many lines before the import statement itself."""
    parent, _, leaf = module.rpartition(".")
    written = f"from {parent} import {leaf}" if parent else f"import {module}"
    if number % 3 == 0:
        return f"{written}\n", 0
    if number % 3 == 1:
        return f"if TYPE_CHECKING:\n    {written}\n", 1
    return f"def load_{number}() -> None:\n    {written}  # heavy\n", 1


@pytest.mark.parametrize("package", list(MAY_IMPORT))
def test_each_rule_reports_an_import_it_does_not_allow(package: str, tmp_path: Path) -> None:
    # A module of the package imports a module of every other package: the check must name
    # exactly the imports of packages the rule leaves out (and, for a package that imports
    # through the face, a module behind an allowed face), and pass the others.
    name = "daemon" if package == "__init__" else f"daemon.{package}.injected"
    wanted: list[tuple[str, bool]] = []
    for other in MAY_IMPORT:
        if other in (package, "__init__"):
            continue
        allowed = other in MAY_IMPORT[package]
        if allowed and package in THROUGH_THE_FACE:
            wanted.append((f"daemon.{other}", False))
            behind = sample_module(other, behind_the_face=True)
            wanted += [(behind, True)] if behind else []
        else:
            wanted.append((sample_module(other) or f"daemon.{other}", not allowed))
    text, expected, line = "from typing import TYPE_CHECKING\n", [], 2
    for number, (module, reported) in enumerate(wanted):
        written, before = import_line(number, module)
        if reported:
            expected.append((line + before, module))
        text += written
        line += written.count("\n")
    source = tmp_path / "injected.py"
    source.write_text(text)

    found = imports_of(name, source, modules())

    assert len(found) == len(wanted)
    assert breaches(found) == [f"{name}:{at} imports {module}" for at, module in expected]
    assert any(reported for _, reported in wanted)


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


def test_no_module_of_daemon_is_long_without_saying_why() -> None:
    assert long_without_reason(modules()) == []


def test_the_length_check_sees_a_long_module_without_its_reason(tmp_path: Path) -> None:
    body = "\n".join(f"A_{n} = {n}" for n in range(LONGEST))
    silent, explained = tmp_path / "silent.py", tmp_path / "explained.py"
    silent.write_text(f'"""A module."""\n{body}\n')
    explained.write_text(f'"""A module.\n\n{REASON_FOR_LENGTH} one table.\n"""\n{body}\n')
    short = tmp_path / "short.py"
    short.write_text('"""A module."""\nA = 1\n')

    found = long_without_reason({"silent": silent, "explained": explained, "short": short})

    assert found == [f"silent ({LONGEST + 1} lines)"]


def test_the_architecture_page_states_the_rules() -> None:
    # The page's table, a row per package from the floor up, names in its last column what
    # the package may import: the packages in backquotes, "the floor" for FLOOR, and "face
    # only" where it imports through the face.
    page = (ROOT / "docs" / "architecture.md").read_text()
    section = page.split("## Where each piece lives", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| `daemon/")]
    stated = {}
    for row in rows:
        where, *_, may_import = (cell.strip() for cell in row.strip().strip("|").split("|"))
        package = where.strip("`").removeprefix("daemon/").removesuffix("/").removesuffix(".py")
        names = re.findall(r"`(\w+)`", may_import)
        floor = list(FLOOR) if "the floor" in may_import else []
        stated[package] = (sorted([*floor, *names]), "face only" in may_import)
    assert list(stated) == list(MAY_IMPORT)
    assert stated == {
        package: (sorted(allowed), package in THROUGH_THE_FACE)
        for package, allowed in MAY_IMPORT.items()
    }


# -- the house: daemon/, bench/, tests/, plugins/, deploy/ -------------------------------------


def test_every_python_file_of_the_repository_lies_in_a_tree_of_the_house() -> None:
    skipped = {"build", "dist", "node_modules", "__pycache__"}
    astray = []
    for folder, subfolders, files in os.walk(ROOT):
        subfolders[:] = [
            sub
            for sub in subfolders
            if not sub.startswith(".") and sub not in skipped and not sub.endswith(".egg-info")
        ]
        astray += [
            str(Path(folder, file).relative_to(ROOT))
            for file in files
            if file.endswith(".py") and tree_of(Path(folder, file)) not in HOUSE
        ]
    assert astray == [], f"add their tree to HOUSE (and docs/architecture.md): {astray}"


def test_each_tree_imports_of_the_others_only_what_the_house_allows() -> None:
    trees = {name: tree_of(path) for name, path in house_modules().items()}
    assert house_breaches(all_imports(), trees) == []


@pytest.mark.parametrize("tree", list(HOUSE))
def test_each_house_rule_reports_an_import_it_does_not_allow(tree: str, tmp_path: Path) -> None:
    # A module of the tree imports, of every other tree, a module its rule leaves out and
    # one it allows where there is one; and behind each face the rule allows by its name,
    # a module it does not.
    known = house_modules()
    trees = {name: tree_of(path) for name, path in known.items()}
    wanted: list[tuple[str, bool]] = []
    for other in HOUSE:
        theirs = sorted(
            name
            for name, at in trees.items()
            if at == other and all(part.isidentifier() for part in name.split("."))
        )
        if other == tree or not theirs:
            continue
        allowed = [name for name in theirs if any(allows(e, name) for e in HOUSE[tree])]
        left_out = [name for name in theirs if name not in allowed]
        wanted += [(name, False) for name in allowed[:1]] + [(name, True) for name in left_out[-1:]]
    for face in (entry for entry in HOUSE[tree] if not entry.endswith(".*")):
        behind = [name for name in known if name.startswith(f"{face}.")]
        wanted += [(face, False), *[(name, True) for name in sorted(behind)[:1]]]
    source = tmp_path / "injected.py"
    source.write_text("".join(f"import {module}\n" for module, _ in wanted))
    name = f"{tree}.injected" if tree != "plugins" else "plugins.example.injected"

    found = imports_of(name, source, known)

    assert house_breaches(found, {**trees, name: tree}) == [
        f"{name}:{line} imports {module}"
        for line, (module, reported) in enumerate(wanted, start=1)
        if reported
    ]


def test_no_import_cycle_anywhere_in_the_house() -> None:
    graph = import_graph(all_imports(), house_modules())
    graphlib.TopologicalSorter(graph).prepare()  # raises CycleError naming the cycle


def test_the_cycle_check_sees_a_cycle_through_an_import_inside_a_function(
    tmp_path: Path,
) -> None:
    report, summary = tmp_path / "report.py", tmp_path / "summary.py"
    report.write_text("from bench import summary\n")
    summary.write_text("def rows() -> None:\n    from bench.report import Section\n")
    names = {"bench.report": report, "bench.summary": summary}
    found = [i for name, path in names.items() for i in imports_of(name, path, names)]

    with pytest.raises(graphlib.CycleError):
        graphlib.TopologicalSorter(import_graph(found, names)).prepare()


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
