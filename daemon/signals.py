"""SIGTERM and SIGINT as a request to stop, which the main thread can sleep on safely.

Why not ``signal.signal(signum, lambda *_: event.set())``: a Python signal handler runs in
the main thread, between two bytecodes of whatever that thread was doing. If it was inside
``threading.Event.wait()``, it holds the event's lock, which is not reentrant, and a handler
that calls ``Event.set()`` waits for that lock for ever (a loop of ``stop.wait(0)`` sent one
signal hung in 122 of 200 tries; ``daemon broker`` hung so in a CI run). So the handler here
only sets a flag, and the main thread, sleeping in short slices, sets the event itself.
"""

from __future__ import annotations

import signal
import threading
import time
from types import FrameType, TracebackType
from typing import Any

_SIGNALS = (signal.SIGTERM, signal.SIGINT)
_SLICE_S = 0.05  # how soon a sleeping main thread notices a signal


class StopRequest:
    """Set by SIGTERM or SIGINT (once :meth:`install` is called), or by setting :attr:`event`.

    Args:
        event: the event other threads wait on; None: a new one.

    Example:
        >>> with StopRequest() as stop:
        ...     stop.sleep(0.01)
        False
    """

    def __init__(self, event: threading.Event | None = None) -> None:
        self.event = event or threading.Event()
        self._signalled = False
        self._previous: dict[int, Any] = {}

    def install(self) -> None:
        """Let SIGTERM and SIGINT request the stop; call it in the main thread.

        Calling it again takes the signals back from a handler installed since (PySpark
        installs one for SIGINT as its session starts).
        """
        for signum in _SIGNALS:
            previous = signal.signal(signum, self._on_signal)
            self._previous.setdefault(signum, previous)

    def restore(self) -> None:
        """Give the signals back to the handlers :meth:`install` replaced."""
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous.clear()

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self._signalled = True  # no lock here: see the module's docstring

    def is_set(self) -> bool:
        """Whether the stop was requested (a signal came, or the event was set)."""
        if self._signalled and not self.event.is_set():
            self.event.set()  # outside any handler: the main thread holds no lock here
        return self.event.is_set()

    def sleep(self, seconds: float) -> bool:
        """Wait up to ``seconds`` for the stop; whether it was requested."""
        if not self._previous:  # no handler of ours can interrupt this thread
            return self.event.wait(seconds)
        deadline = time.monotonic() + seconds
        while not self.is_set():
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            time.sleep(min(left, _SLICE_S))
        return True

    def __enter__(self) -> StopRequest:
        self.install()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.restore()
