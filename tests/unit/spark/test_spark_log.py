"""Spark's log: a private file rotated at a size cap, or standard output in a container."""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

import pytest

from daemon.spark import spark_log
from daemon.spark.spark_log import RotatingLog


def test_the_log_is_rotated_at_its_cap_and_keeps_so_many_older_files(tmp_path: Path) -> None:
    path = tmp_path / "spark.log"
    log = RotatingLog(path, max_bytes=100, kept=2)
    lines = [f"line {n:02d} {'x' * 30}\n".encode() for n in range(12)]  # 40 bytes each
    for line in lines:
        log.write(line)
    log.close()
    files = sorted(tmp_path.iterdir())
    assert [f.name for f in files] == ["spark.log", "spark.log.1", "spark.log.2"]
    assert all(f.stat().st_size <= 100 for f in files)
    assert all(stat.S_IMODE(f.stat().st_mode) == 0o600 for f in files)
    # The newest lines, in order, oldest file first; older ones dropped beyond `kept`.
    kept = b"".join(f.read_bytes() for f in (files[2], files[1], files[0]))
    assert kept == b"".join(lines[-6:])


def test_a_restart_appends_to_the_log_and_counts_what_it_holds(tmp_path: Path) -> None:
    path = tmp_path / "spark.log"
    path.write_bytes(b"x" * 90)
    log = RotatingLog(path, max_bytes=100, kept=1)
    log.write(b"y" * 20)
    log.close()
    assert path.read_bytes() == b"y" * 20
    assert path.with_name("spark.log.1").read_bytes() == b"x" * 90


def test_stdout_only_for_a_command_that_prints_nothing_there(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setattr(spark_log, "_stdout_allowed", False)
    monkeypatch.setenv("ENRICHD_SPARK_LOG", "stdout")
    # `daemon replay` prints its outputs on stdout: Spark's log stays in the runtime folder.
    runtime = tmp_path / f"enrichd-{os.getuid()}"
    assert spark_log.destination() == runtime / f"spark-{os.getpid()}.log"
    spark_log.allow_stdout()  # `daemon run`
    assert spark_log.destination() == "stdout"
    assert spark_log.log_name() == "standard output"
    monkeypatch.setenv("ENRICHD_SPARK_LOG", "log")
    assert spark_log.destination() == "log"
