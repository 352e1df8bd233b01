"""The sentences every section shares (``bench/wording.py``)."""

from __future__ import annotations

from bench.wording import machine


def test_the_machine_line_names_the_commit_measured() -> None:
    assert "Spark master local[2], commit 3762234-dirty; load average" in machine(
        "local[2]", "3762234-dirty"
    )
