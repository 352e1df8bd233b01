"""A stop signal reaches a main thread that is sleeping on it, whatever it is doing then.

Handlers that called ``threading.Event.set()`` could hang the process for good: a signal that
lands while the main thread is inside ``Event.wait()`` finds the event's lock taken by the
thread it interrupted. Each try here is a fresh process sent one signal at a random moment
of its wait loop.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time

import pytest

from daemon.signals import StopRequest

WAITER = """
import sys
from daemon.signals import StopRequest
with StopRequest() as stop:
    print("waiting", flush=True)
    while not stop.sleep(float(sys.argv[1])):
        pass
print("stopped", flush=True)
"""


@pytest.mark.parametrize("slice_s", [0.0, 0.001])
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_always_ends_the_wait(signum: int, slice_s: float) -> None:
    for _ in range(10):
        process = subprocess.Popen(
            [sys.executable, "-c", WAITER, str(slice_s)], stdout=subprocess.PIPE, text=True
        )
        assert process.stdout is not None
        assert process.stdout.readline() == "waiting\n"
        time.sleep(0.01)
        process.send_signal(signum)
        try:
            out, _ = process.communicate(timeout=20)  # a hang, not a slow machine, exceeds it
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
        assert (process.returncode, out) == (0, "stopped\n")


def test_the_event_set_by_another_thread_ends_the_wait() -> None:
    event = threading.Event()
    with StopRequest(event) as stop:
        threading.Timer(0.05, event.set).start()
        assert stop.sleep(20)
        assert stop.is_set()


def test_without_a_stop_the_wait_lasts_its_time() -> None:
    with StopRequest() as stop:
        assert not stop.sleep(0.01)
        assert not stop.is_set()


def test_leaving_gives_the_signals_back() -> None:
    before = signal.getsignal(signal.SIGTERM)
    with StopRequest():
        assert signal.getsignal(signal.SIGTERM) is not before
    assert signal.getsignal(signal.SIGTERM) is before
