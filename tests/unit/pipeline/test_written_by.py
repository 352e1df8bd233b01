"""The versions a checkpoint records, and which pyspark versions count as its own."""

from __future__ import annotations

import pytest

from daemon.pipeline import written_by


def test_a_minor_version_and_its_pin() -> None:
    assert written_by.minor("4.3.1") == "4.3"
    assert written_by.minor("4.10.0.dev1") == "4.10"
    assert written_by.pin("4.3.0") == "pyspark>=4.3,<4.4"
    assert written_by.pin("4.9.2") == "pyspark>=4.9,<4.10"


def test_only_another_minor_version_is_a_mismatch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(written_by, "running", lambda: {"enrichd": "0.2.0", "pyspark": "4.3.2"})
    made = {"written_by": {"enrichd": "0.1.0", "pyspark": "4.3.0"}}
    assert written_by.spark_mismatch(made) is None
    made["written_by"]["pyspark"] = "4.4.0"
    assert written_by.spark_mismatch(made) == ("4.4.0", "4.3.2")
    assert written_by.spark_mismatch({}) is None  # recorded before versions were
    made["written_by"]["pyspark"] = "unknown"
    assert written_by.spark_mismatch(made) is None


def test_enrichd_requires_the_pyspark_minor_version_it_runs_with() -> None:
    """pyproject.toml pins pyspark's minor version, the one installed here: checkpoints made
    with it are refused by another (docs/operations.md, "Upgrading enrichd and pyspark")."""
    import tomllib
    from importlib import metadata
    from pathlib import Path

    project = Path(__file__).resolve().parents[3] / "pyproject.toml"
    requires = tomllib.loads(project.read_text())["project"]["dependencies"]
    assert written_by.pin(metadata.version("pyspark")) in requires
