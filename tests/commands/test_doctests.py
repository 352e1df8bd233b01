"""Every module under daemon/ imports, and the examples in its docstrings are true.

The examples run as the docs show them, each docstring as one test named after its object
(``daemon.secrets``, ``daemon.joiners.window.Window``), so an example that goes stale fails
the suite.
"""

from __future__ import annotations

import doctest
import importlib
import pkgutil
from types import ModuleType

import pytest

import daemon


def _module_names() -> list[str]:
    """Every module and package under daemon/ (the data folders are neither)."""
    found = pkgutil.walk_packages(daemon.__path__, prefix=f"{daemon.__name__}.")
    return [daemon.__name__, *sorted(info.name for info in found)]


MODULES = _module_names()


def _examples() -> list[doctest.DocTest]:
    finder = doctest.DocTestFinder(exclude_empty=True)
    found: list[doctest.DocTest] = []
    for name in MODULES:
        module: ModuleType = importlib.import_module(name)
        # Only the module's own objects: an imported name would run its examples twice.
        found += [t for t in finder.find(module) if t.examples and _defined_in(t, module)]
    return sorted(found, key=lambda test: test.name)


def _defined_in(test: doctest.DocTest, module: ModuleType) -> bool:
    return test.filename is not None and test.filename == module.__file__


EXAMPLES = _examples()


def test_every_module_under_daemon_is_found_and_imports() -> None:
    assert {"daemon.secrets", "daemon.joiners.window", "daemon.__main__"} <= set(MODULES)
    assert all(importlib.import_module(name).__name__ == name for name in MODULES)


def test_the_docstrings_have_examples_to_run() -> None:
    names = {test.name for test in EXAMPLES}
    assert {"daemon.secrets", "daemon.testing.harness.JoinerHarness"} <= names


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda test: test.name)
def test_docstring_example(example: doctest.DocTest) -> None:
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    report: list[str] = []
    result = runner.run(example, out=report.append, clear_globs=True)
    assert result.failed == 0, "".join(report)
    assert result.attempted > 0
