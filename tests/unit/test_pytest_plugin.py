"""enrichd's pytest plugin, loaded by pytest in every run where enrichd is installed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_pytest_plugin_imports_neither_spark_nor_the_broker() -> None:
    # pytest loads it in every run of an environment where enrichd is installed.
    code = (
        "import sys, daemon.pytest_plugin; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('pyspark', 'py4j', 'pyarrow', 'pandas') or m == 'daemon.broker'))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    )
    assert done.stdout.strip() == "[]"
