"""A helper process of a latency run, spawned, that takes orders and reports back.

The load generator (:mod:`bench.offering`) and the yardstick's raw loop
(:mod:`bench.yardstick`) each run in a process of their own, spawned (librdkafka's threads
do not survive ``fork``), so that their CPU is theirs alone and neither competes with the
benchmark's process for its interpreter. A :class:`Child` runs ``target(*args, orders,
reports)``: ``orders`` carries the parent's messages to it, ``reports`` its ``(kind,
*values)`` messages back; a failure in it comes back as a ``("failed", traceback)`` report.
"""

from __future__ import annotations

import multiprocessing
import queue
import time
import traceback
from collections.abc import Callable
from typing import Any


def _run(target: Callable[..., None], args: tuple[Any, ...], orders: Any, reports: Any) -> None:
    try:
        target(*args, orders, reports)
    except BaseException:  # noqa: BLE001 - handed to the parent, which says what failed
        traceback.print_exc()  # in full on the benchmark's stderr; the parent says its last line
        reports.put(("failed", traceback.format_exc()))


class Child:
    """``target(*args, orders, reports)`` in a spawned process, started at once."""

    def __init__(self, target: Callable[..., None], args: tuple[Any, ...], name: str) -> None:
        context = multiprocessing.get_context("spawn")
        self.orders = context.Queue()
        self.reports = context.Queue()
        self.name = name
        self.process = context.Process(
            target=_run, args=(target, args, self.orders, self.reports), name=name, daemon=True
        )
        self.process.start()

    def expect(self, kind: str, timeout_s: float) -> tuple[Any, ...]:
        """The next report's values, which must be of ``kind``.

        Raises:
            RuntimeError: the child failed, exited, or sent nothing within ``timeout_s``.
        """
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                report = self.reports.get(timeout=0.5)
            except queue.Empty:
                if not self.process.is_alive():
                    raise RuntimeError(
                        f"the {self.name} exited with code {self.process.exitcode}"
                    ) from None
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"the {self.name} sent no {kind} in {timeout_s:.0f}s"
                    ) from None
                continue
            if report[0] == "failed":
                raise RuntimeError(f"the {self.name} failed: {report[1].strip().splitlines()[-1]}")
            if report[0] != kind:
                raise RuntimeError(f"the {self.name} sent {report[0]}, not {kind}")
            return tuple(report[1:])

    def stop(self, timeout_s: float = 30.0) -> None:
        """Wait for the child to end (after its last order); kill it if it does not."""
        self.process.join(timeout_s)
        if self.process.is_alive():
            self.process.kill()
            self.process.join(5)
