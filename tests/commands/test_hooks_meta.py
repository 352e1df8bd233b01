"""Meta-tests: every hook is documented and tested; every built-in joiner documents itself."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest

from daemon.plugin import hookspecs
from daemon.plugin.describe import describe_joiner
from daemon.plugin.host import BUILTIN_DISTRIBUTION, build_registry

TESTS = Path(__file__).resolve().parents[1]
HOOKS = sorted(
    name
    for name, value in vars(hookspecs).items()
    if callable(value) and hasattr(value, f"{hookspecs.PROJECT}_spec")
)
BUILTINS = sorted(
    name
    for name, registered in build_registry().joiners.items()
    if registered.plugin.distribution == BUILTIN_DISTRIBUTION
)


def test_there_are_hooks_and_builtins() -> None:
    assert HOOKS
    assert set(BUILTINS) >= {"comap", "asof", "lookup", "window", "table"}


@pytest.mark.parametrize("hook", HOOKS)
def test_hook_has_a_docstring_with_a_sentence(hook: str) -> None:
    doc = inspect.getdoc(getattr(hookspecs, hook)) or ""
    assert re.search(r"\w[^.]*\w\.(\s|$)", doc), f"hook {hook} needs a docstring sentence"


@pytest.mark.parametrize("hook", HOOKS)
def test_hook_is_used_by_a_test(hook: str) -> None:
    users = [
        path
        for path in TESTS.rglob("test_*.py")
        if path.resolve() != Path(__file__).resolve() and hook in path.read_text("utf-8")
    ]
    assert users, f"hook {hook} appears in no test under tests/; write one"


@pytest.mark.parametrize("name", BUILTINS)
def test_builtin_joiner_documents_itself(name: str) -> None:
    info = describe_joiner(build_registry().get(name))
    assert info.description.strip()
    assert "\n" not in info.description, "the description is one line"
    assert info.semantics.strip()
    assert info.roles
