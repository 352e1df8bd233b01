"""The ceiling's spawned loops start together once each is ready, and a failed one is said."""

from __future__ import annotations

import time
from typing import Any

import pytest

from bench.ceiling import LoopResult, run_loops


def ready_late(delay_s: float, go: Any = None) -> LoopResult:
    """A loop whose clients take ``delay_s`` to build: when it was ready, when it was let go."""
    time.sleep(delay_s)
    ready = time.monotonic()
    go.wait()
    return LoopResult(ready, time.monotonic(), 0, 0)


def fails_before_ready(go: Any = None) -> LoopResult:
    raise ValueError("no clients")


def test_spawned_loops_are_let_go_together_once_the_slowest_is_ready() -> None:
    loops = run_loops(ready_late, [(0.0,), (1.0,)])

    # The quick one waited for the slow one's clients: none was let go before all were ready.
    assert min(loop.done for loop in loops) >= max(loop.first_consumed for loop in loops)


def test_a_loop_that_fails_before_it_is_ready_fails_the_run() -> None:
    with pytest.raises(RuntimeError, match="a ceiling process exited with code 1"):
        run_loops(fails_before_ready, [(), ()])
