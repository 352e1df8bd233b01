"""The worker daemon imports enrichd's worker modules and stays safe to fork."""

from __future__ import annotations

import json
import os
import subprocess
import sys

_PROBE = """
import json, os, sys, threading
from daemon.pipeline.worker_daemon import preload
preload()
tasks = [t for t in os.listdir("/proc/self/task") if int(t) != os.getpid()]
others = sorted(open(f"/proc/self/task/{t}/comm").read().strip() for t in tasks)
print(json.dumps({
    "python_threads": threading.active_count(),
    "other_native": others,
    "loaded": [m for m in ("pyspark.worker", "daemon.operator.processor",
                           "daemon.sink.spark_sink", "daemon.source.spark_source")
               if m in sys.modules],
}))
"""


def test_preloading_loads_the_workers_modules_and_starts_no_thread_a_fork_would_lose() -> None:
    env = {key: value for key, value in os.environ.items() if key != "OPENBLAS_NUM_THREADS"}
    done = subprocess.run(
        [sys.executable, "-c", _PROBE], capture_output=True, text=True, env=env, check=True
    )
    found = json.loads(done.stdout.splitlines()[-1])

    assert found["loaded"] == [
        "pyspark.worker",
        "daemon.operator.processor",
        "daemon.sink.spark_sink",
        "daemon.source.spark_source",
    ]
    assert found["python_threads"] == 1
    # Beside the main thread, at most jemalloc's background thread, which survives fork() by
    # design; an OpenBLAS pool or any other native thread here would make forking unsafe.
    assert [name for name in found["other_native"] if name != "jemalloc_bg_thd"] == []
