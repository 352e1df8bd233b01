"""A `daemon run` process under test: its log, its HTTP endpoint, and waiting on both."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import IO

from tests.ports import free_port


def daemon_run(path: Path) -> subprocess.CompletedProcess[str]:
    """``daemon run PATH`` in a process of its own, to its end: a start that is refused."""
    return subprocess.run(
        [sys.executable, "-m", "daemon", "run", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYSPARK_PYTHON": sys.executable},
    )


class DaemonProcess:
    """``daemon run PATH --http ... ARGS`` in a session of its own, stdout and stderr to ``log``
    (stdout to ``stdout`` instead, if given)."""

    def __init__(
        self,
        path: Path,
        log: Path,
        *args: str,
        env: dict[str, str],
        stdout: IO[bytes] | None = None,
    ) -> None:
        self.url = f"http://127.0.0.1:{free_port()}"
        self.log = log
        with self.log.open("wb") as out:
            self.process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "daemon",
                    "run",
                    str(path),
                    "--http",
                    self.url.removeprefix("http://"),
                    *args,
                ],
                env={**os.environ, "PYSPARK_PYTHON": sys.executable, **env},
                stdout=out if stdout is None else stdout,
                stderr=subprocess.STDOUT if stdout is None else out,
                start_new_session=True,
            )

    def log_text(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace")

    def get(self, path: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(self.url + path, timeout=10) as reply:  # noqa: S310
                return reply.status, reply.read().decode()
        except urllib.error.HTTPError as error:
            return error.code, error.read().decode()

    def wait_until(self, what: str, done: Callable[[], bool], timeout_s: float = 300.0) -> None:
        deadline = time.monotonic() + timeout_s
        while not done():
            assert self.process.poll() is None, f"daemon run exited:\n{self.log_text()[-3000:]}"
            assert time.monotonic() < deadline, f"no {what}:\n{self.log_text()[-3000:]}"
            time.sleep(0.5)

    def metric(self, name: str, **labels: str) -> float | None:
        """One sample of /metrics, or None if it is not there."""
        _, text = self.get("/metrics")
        wanted = ",".join(f'{key}="{value}"' for key, value in sorted(labels.items()))
        for line in text.splitlines():
            if line.startswith("#"):
                continue
            series, _, value = line.rpartition(" ")
            metric, _, label_text = series.partition("{")
            got = ",".join(sorted(label_text.rstrip("}").split(","))) if label_text else ""
            if metric == name and got == wanted:
                return float(value)
        return None
