"""The bench package as a whole: no import cycle among its modules.

Every import counts, at module level, inside a function or only for type checking, as
``tests/unit/test_layering.py`` counts them for ``daemon/``: a cycle hidden in a function
still ties the modules' jobs together.
"""

from __future__ import annotations

import ast
import graphlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


def import_graph(top: Path) -> dict[str, set[str]]:
    """Each module of the package at ``top`` -> the package's modules it imports."""
    names = {
        ".".join(path.relative_to(top.parent).with_suffix("").parts).removesuffix(".__init__"): path
        for path in sorted(top.rglob("*.py"))
    }
    graph: dict[str, set[str]] = {name: set() for name in names}
    for name, path in names.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                # `from bench import x` loads bench.x when x is a module, else bench.
                targets = [
                    f"{node.module}.{alias.name}"
                    if f"{node.module}.{alias.name}" in names
                    else node.module
                    for alias in node.names
                ]
            else:
                continue
            graph[name] |= {target for target in targets if target in names and target != name}
    return graph


def test_bench_has_no_import_cycle() -> None:
    graphlib.TopologicalSorter(import_graph(ROOT / "bench")).prepare()  # CycleError names it


def test_the_check_sees_a_cycle_through_an_import_inside_a_function(tmp_path: Path) -> None:
    package = tmp_path / "bench"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "report.py").write_text("from bench import summary\n")
    (package / "summary.py").write_text("def rows():\n    from bench.report import Section\n")

    with pytest.raises(graphlib.CycleError):
        graphlib.TopologicalSorter(import_graph(package)).prepare()
