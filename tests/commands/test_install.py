"""`daemon demo` from a built wheel, installed into a fresh virtual environment.

The wheel must carry what the demo reads (the example pipelines and their schemas, package
data of ``daemon``), so the demo runs away from any checkout. Dependencies come through pip's
usual cache and index. It is also the suite's test of `daemon demo` as a command of its own
(tests/commands/test_demos.py runs the demos in-process, on the session's broker and Spark).

It needs no podman, so it runs in the suite, beside the other tests, rather than with the
deployment tests that `.ci/containers` runs one after another once the suite is done.
"""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run(
    *args: str | Path, cwd: Path, timeout: float = 900, **extra: str
) -> subprocess.CompletedProcess[str]:
    # Nothing of this checkout's environment: the fresh venv stands alone.
    env = {
        key: value for key, value in os.environ.items() if key not in ("VIRTUAL_ENV", "PYTHONPATH")
    }
    env["PYSPARK_PYTHON"] = str(cwd / "venv" / "bin" / "python")
    env |= extra
    done = subprocess.run(
        [str(arg) for arg in args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
        env=env,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done


def test_the_demo_runs_from_a_wheel_in_a_fresh_venv(tmp_path: Path) -> None:
    run(
        sys.executable,
        "-m",
        "pip",
        "wheel",
        "--no-deps",
        "-w",
        tmp_path / "dist",
        ROOT,
        cwd=tmp_path,
    )
    (wheel,) = (tmp_path / "dist").glob("enrichd-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        packaged = set(archive.namelist())
        (entry_points,) = [n for n in packaged if n.endswith(".dist-info/entry_points.txt")]
        entry_points_text = archive.read(entry_points).decode()
    for folder, pattern in (("examples", "*.toml"), ("schemas", "*.avsc")):
        for path in (ROOT / folder).glob(pattern):
            assert f"daemon/{folder}/{path.name}" in packaged, path
    # Plugin authors' kit: type information, and the pytest plugin with its fixtures.
    assert "daemon/py.typed" in packaged
    assert "[pytest11]\nenrichd = daemon.pytest_plugin" in entry_points_text
    run(sys.executable, "-m", "venv", tmp_path / "venv", cwd=tmp_path)
    # --no-compile: pip would byte-compile all 4,954 modules (about 20 s of CPU here), where
    # the demo imports some 700, which Python compiles as it imports them.
    run(
        tmp_path / "venv" / "bin" / "pip", "install", "--quiet", "--no-compile", wheel, cwd=tmp_path
    )
    # The README's first command as a newcomer runs it: its own broker and Spark, exit 0, and
    # nothing on stderr, Spark's own output going to its log file. Had Spark outlived the
    # demo's broker, each of its Python workers (they keep Kafka clients between
    # micro-batches) would have printed "Connection refused" after the results.
    spark_log = tmp_path / "spark.log"
    done = run(
        tmp_path / "venv" / "bin" / "daemon", "demo", cwd=tmp_path, ENRICHD_SPARK_LOG=str(spark_log)
    )
    assert "7 input records, 5 views, 0 dead letters." in " ".join(done.stdout.split())
    assert done.stderr == ""
    assert "Streaming TransformWithStateInPandas Python worker" in spark_log.read_text()
