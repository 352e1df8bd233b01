"""What Spark's Python processes load when they load enrichd's source and sink.

A query's first micro-batch starts a fresh Python process for each of Spark's steps (the
source's schema, its planning, the writer, the commit, ...), and each imports the source or
the sink module, so every start pays for what they import once per process. Pydantic (the
pipeline file's models) is the largest piece they do not need: this keeps it out.
"""

from __future__ import annotations

import subprocess
import sys

WORKER_MODULES = ("daemon.source.spark_source", "daemon.sink.spark_sink")


def test_the_source_and_the_sink_load_without_pydantic() -> None:
    probe = (
        f"import sys; import {', '.join(WORKER_MODULES)}; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('pydantic', 'pandas')))"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert loaded == "[]"
