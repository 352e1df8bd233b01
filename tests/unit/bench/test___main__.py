"""``python -m bench`` without the ``bench`` extra: one line saying what to install."""

from __future__ import annotations

import importlib.util
import runpy
import sys
from typing import Any

import pytest

from bench import __main__ as bench_main


def _without(monkeypatch: pytest.MonkeyPatch, *names: str) -> None:
    find_spec = importlib.util.find_spec

    def hidden(name: str, *args: Any) -> Any:
        return None if name in names else find_spec(name, *args)

    monkeypatch.setattr(importlib.util, "find_spec", hidden)


@pytest.mark.parametrize("missing", [("psutil",), ("psutil", "matplotlib")])
def test_without_the_measuring_packages_it_says_what_to_install_in_one_line(
    missing: tuple[str, ...], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _without(monkeypatch, *missing)

    assert bench_main.main(["comap"]) == 1

    out, err = capsys.readouterr()
    assert out == ""
    assert err == f"python -m bench needs {' and '.join(missing)}: pip install -e '.[bench]'\n"


def test_without_the_peer_it_says_what_to_install_or_how_to_leave_the_peer_out(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _without(monkeypatch, "quixstreams")

    assert bench_main.main(["comap", "--no-write"]) == 1

    (line,) = capsys.readouterr().err.splitlines()
    assert "quixstreams" in line and "pip install -e '.[bench]'" in line and "--no-quix" in line


def test_run_as_a_module_it_exits_with_the_line_and_no_traceback(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "psutil", None)  # as if not installed
    monkeypatch.delitem(sys.modules, "bench.__main__", raising=False)  # run afresh, as python -m
    monkeypatch.setattr(sys, "argv", ["python -m bench", "comap"])

    with pytest.raises(SystemExit) as exit_:
        runpy.run_module("bench", run_name="__main__")

    assert exit_.value.code == 1
    assert capsys.readouterr().err.splitlines() == [
        "python -m bench needs psutil: pip install -e '.[bench]'"
    ]
