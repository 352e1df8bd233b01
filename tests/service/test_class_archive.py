"""Spark's JVM classes: the first start archives them, the next one maps the archive.

Each start is a fresh process with its own JVM, as ``daemon run`` and ``daemon demo`` are;
the JVM logs where it loaded each class from, which tells whether it mapped the archive.
(The rest of the suite maps an archive but never records one: see tests/conftest.py.)
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from daemon.spark.class_archive import DIRECTORY, SWITCH, ClassArchive, archive_path

START = """
import sys
from daemon.spark.session import spark_session
from daemon.model.config import SparkConfig

loads = "-Xlog:class+load=info:file=" + sys.argv[1]
spark_session(SparkConfig(master="local[1]", conf={"spark.driver.extraJavaOptions": loads}))
"""
CLASS = "org.apache.spark.SparkContext"


def start_spark(archives: Path, loads: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != SWITCH} | {DIRECTORY: str(archives)}
    subprocess.run([sys.executable, "-c", START, str(loads)], env=env, check=True, timeout=300)


def loaded_from(loads: Path, name: str) -> str:
    (line,) = [line for line in loads.read_text().splitlines() if f" {name} source: " in line]
    return line.split(" source: ", 1)[1]


def test_the_first_start_archives_spark_classes_and_the_next_maps_them(tmp_path: Path) -> None:
    archives = tmp_path / "archives"

    start_spark(archives, tmp_path / "first.log")
    assert loaded_from(tmp_path / "first.log", CLASS).startswith("file:")  # from its jar
    (archive,) = archives.glob("*.jsa")
    assert not list(archives.glob("*.partial"))

    start_spark(archives, tmp_path / "second.log")
    assert loaded_from(tmp_path / "second.log", CLASS) == "shared objects file (top)"
    assert list(archives.glob("*.jsa")) == [archive]


def test_a_start_while_another_records_neither_records_nor_maps(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(DIRECTORY, str(tmp_path))
    monkeypatch.delenv(SWITCH, raising=False)
    archive = archive_path()
    assert archive is not None

    recording = ClassArchive()
    partial = archive.with_suffix(f".{os.getpid()}.partial")
    assert recording.options.startswith(f"-XX:ArchiveClassesAtExit={partial} ")
    assert ClassArchive().options == ""  # the first holds the lock


def test_off_means_no_archive_and_map_means_no_recording(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(DIRECTORY, str(tmp_path))
    monkeypatch.setenv(SWITCH, "map")
    assert ClassArchive().options == ""  # none to map
    assert not list(tmp_path.iterdir())
    archive = archive_path()
    assert archive is not None
    archive.write_bytes(b"an archive")
    assert ClassArchive().options.startswith(f"-XX:SharedArchiveFile={archive} ")
    monkeypatch.setenv(SWITCH, "off")
    assert ClassArchive().options == ""
