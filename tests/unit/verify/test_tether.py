"""A tethered command dies with the process that started it, even one killed with SIGKILL."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="prctl is Linux's")

SLEEPER = [sys.executable, "-c", "import time; time.sleep(600)"]


def running(pid: int) -> bool:
    """Whether the process runs (a zombie, dead but not yet reaped, does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


def test_the_command_is_killed_when_its_parent_is_killed() -> None:
    # A parent that starts a tethered sleeper, says its pid, and waits to be killed.
    parent_code = (
        "import os, subprocess, sys, time\n"
        "tethered = [sys.executable, '-m', 'daemon.verify.tether', str(os.getpid())]\n"
        f"child = subprocess.Popen(tethered + {SLEEPER!r})\n"
        "print(child.pid, flush=True)\n"
        "time.sleep(600)\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", parent_code], stdout=subprocess.PIPE)
    assert parent.stdout is not None
    child = int(parent.stdout.readline())
    try:
        command = b""
        while b"time.sleep" not in command:  # until the tether has become the sleeper
            assert running(child)
            command = Path(f"/proc/{child}/cmdline").read_bytes()
            time.sleep(0.02)
        parent.kill()
        parent.wait()
        deadline = time.monotonic() + 60  # a guard against hanging, not a speed check
        while running(child):
            assert time.monotonic() < deadline, "the tethered command outlived its parent"
            time.sleep(0.05)
    finally:
        if running(child):
            os.kill(child, signal.SIGKILL)


def test_a_parent_already_gone_runs_nothing() -> None:
    # Pid 1 stands for a parent that died and left the tether to init: it is not its parent.
    done = subprocess.run(
        [sys.executable, "-m", "daemon.verify.tether", "1", sys.executable, "-c", "print('ran')"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (done.returncode, done.stdout) == (1, "")
