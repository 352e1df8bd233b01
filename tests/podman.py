"""Podman for the deployment tests: build the image from this checkout, run and read containers.

Podman from Debian's packages stands in for a Docker engine (none on these machines); its
settings come from the environment that ``.ci/containers`` sets up (``CONTAINERS_CONF``,
``CONTAINERS_STORAGE_CONF``). ``ENRICHD_BASE_IMAGE`` names the Dockerfile's base when the
default cannot be pulled (here no registry can be reached, so CI builds one locally).
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
IMAGE = "localhost/enrichd:test"
"""The runtime image: the Dockerfile's default target."""
DEV_IMAGE = "localhost/enrichd-dev:test"
"""The development image (target ``dev``): the runtime's, plus the embedded broker."""
STOP_TIMEOUT_S = 60
"""``podman stop -t``: past it podman kills; the daemon's own stop timeout is 30 s."""


def podman(
    *args: str, timeout: float = 600, check: bool = True
) -> subprocess.CompletedProcess[str]:
    """Run ``podman ARGS``; with ``check``, fail the test on a non-zero exit, with its stderr."""
    done = subprocess.run(["podman", *args], capture_output=True, text=True, timeout=timeout)
    if check:
        assert done.returncode == 0, f"podman {' '.join(args)}:\n{done.stderr[-3000:]}"
    return done


def build_image(target: str = "runtime") -> str:
    """Build the Dockerfile of this checkout, ``target`` (``runtime`` as :data:`IMAGE`, or
    ``dev`` as :data:`DEV_IMAGE`); layers are cached between runs and shared by both."""
    tag = IMAGE if target == "runtime" else DEV_IMAGE
    args = ["build", "--network", "host", "--target", target, "--tag", tag]
    base = os.environ.get("ENRICHD_BASE_IMAGE")
    if base:
        args += ["--build-arg", f"BASE_IMAGE={base}"]
    podman(*args, str(ROOT), timeout=1800)
    return tag


def json_lines(text: str) -> list[dict[str, Any]]:
    """The JSON log lines of a container's output: every line, Spark's included (the image
    sets ``ENRICHD_SPARK_LOG=log``); a line that is not JSON fails the test."""
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def http_get(url: str) -> tuple[int, str]:
    """Status and body of a GET; 0 when nothing answers."""
    try:
        with urllib.request.urlopen(url, timeout=10) as reply:  # noqa: S310 - loopback only
            return reply.status, reply.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()
    except OSError:
        return 0, ""


class Container:
    """A detached container started with ``podman run -d``; removed by :meth:`remove`."""

    def __init__(self, name: str, *run_args: str) -> None:
        self.name = name
        podman("run", "-d", "--name", name, *run_args)

    def logs(self) -> str:
        """Everything it wrote, stdout and stderr."""
        done = podman("logs", self.name, check=False)
        return done.stdout + done.stderr

    def state(self) -> dict[str, Any]:
        """``State`` of ``podman inspect``: Status, Running, ExitCode..."""
        found = json.loads(podman("inspect", self.name).stdout)
        return found[0]["State"]  # type: ignore[no-any-return]

    def wait_until(self, what: str, done: Callable[[], bool], timeout_s: float = 300.0) -> None:
        """Poll ``done`` until it holds; fail, with the log, if the container ends or time is up."""
        deadline = time.monotonic() + timeout_s
        while not done():
            assert self.state()["Running"], f"{self.name} exited:\n{self.logs()[-3000:]}"
            assert time.monotonic() < deadline, f"no {what}:\n{self.logs()[-3000:]}"
            time.sleep(1.0)

    def stop(self) -> int:
        """``podman stop`` (SIGTERM, SIGKILL after :data:`STOP_TIMEOUT_S`); the exit code."""
        podman("stop", "--time", str(STOP_TIMEOUT_S), self.name, timeout=STOP_TIMEOUT_S + 60)
        return int(self.state()["ExitCode"])

    def remove(self) -> None:
        """Remove it, stopping it first if it still runs."""
        podman("rm", "--force", "--time", "5", self.name, check=False)
