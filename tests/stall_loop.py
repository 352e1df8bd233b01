"""Replay one pipeline many times in two tasks on the test broker; count the stalls.

``python -m tests.stall_loop RUNS``: the loop behind docs/contributing.md's figures. One
embedded broker, one Spark session with two shuffle partitions (two tasks write each
micro-batch, as in a deployment), and ``tests/joins/test_table.py``'s outer-join replay in four
micro-batches, checked each time. A stall is a ``read_committed`` read that stops short of
the end ("no progress past offset N"), the symptom of a transaction the broker left
unresolved (docs/contributing.md).
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

from daemon.broker import EmbeddedBroker
from daemon.model.config import SparkConfig, load_pipeline_file
from daemon.replay import replay
from daemon.spark.session import spark_session
from tests.joins.test_table import EXAMPLE, check, inputs, quarter


def main(runs: int) -> int:
    """Replay ``runs`` times; print a line per run and a summary; exit 1 on any failure."""
    stalls = failures = 0
    with EmbeddedBroker() as broker:
        spark = spark_session(SparkConfig(master="local[2]"))
        assert spark.conf.get("spark.sql.shuffle.partitions") == "2"
        folder = Path(tempfile.mkdtemp(prefix="enrichd-stall-loop-"))
        files = {}
        for role, lines in inputs()[0].items():
            files[role] = folder / f"{role}.jsonl"
            files[role].write_text("".join(json.dumps(line) + "\n" for line in lines), "utf-8")
        file = load_pipeline_file(EXAMPLE)
        for run in range(1, runs + 1):
            started = time.monotonic()
            try:
                result = replay(
                    file,
                    files,
                    max_batch=quarter(),
                    bootstrap_servers=broker.bootstrap_servers,
                    timeout_s=120,
                )
                check(result, "outer")
                status = "ok"
            except Exception as exc:  # counted and shown: the loop is a measurement
                text = str(exc)
                if "no progress past offset" in text:
                    stalls += 1
                    status = "STALL " + text[:160]
                else:
                    failures += 1
                    status = "FAILED " + text[:160]
            took = time.monotonic() - started
            print(f"run {run}: {status} ({took:.1f} s)", flush=True)
        spark.stop()
    print(f"{runs} runs: {stalls} stalls, {failures} other failures")
    return 1 if stalls or failures else 0


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1]) if len(sys.argv) > 1 else 100))
