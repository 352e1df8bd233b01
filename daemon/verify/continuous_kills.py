"""Where ``daemon verify``'s kills land in a continuous run: inside long batches, and at ends.

A continuous pipeline's task commits a sub-batch every commit interval inside a long batch
of seconds (:data:`daemon.verify.plan.LONG_BATCH_MS`), and writes its state when the long
batch ends. A restarted run runs the long batch the kill cut short again: it replays each
sub-batch the dead one committed, writing nothing, then reads on. So the kills land, in turn:

- right after a sub-batch's marker landed on the pipeline's markers topic, between one
  sub-batch's commit and the next (the replay then has committed sub-batches to skip);
- at a random point inside a long batch, seeded by ``--seed``;
- as a long batch ends: just past the time its task stops taking records, while it writes
  its state and Spark logs the batch.
"""

from __future__ import annotations

import random
import time

from daemon.signals import StopRequest
from daemon.verify.kills import Interrupted, MarkerWatch, WaitFor
from daemon.verify.plan import LONG_BATCH_MS
from daemon.verify.run_progress import LagGroupProgress

PAST_END_S = 0.5
"""At most this long after a long batch's end in time, the kill that lands as it ends."""


class LongBatchKillPoints:
    """A continuous run's kills (see the module docstring)."""

    def __init__(self, markers: MarkerWatch, watch: LagGroupProgress, seed: int) -> None:
        self.markers = markers
        self.watch = watch
        self.random = random.Random(seed)  # noqa: S311 - where kills land, no secret

    def land(self, number: int, point: int, wait: WaitFor, stop: StopRequest) -> str:
        """Wait until kill ``number`` is due; what it waited for."""
        turn = (number - 1) % 3
        if turn == 0:
            markers, watch = self.markers, self.watch
            markers.mark()
            # All read already: no sub-batch is to come, the kill lands between long batches.
            wait(
                f"a sub-batch past {point} records committed",
                lambda: markers.moved() or watch.all_committed(),
            )
            return "a sub-batch committed"
        if turn == 1:
            delay = self.random.uniform(0.1, LONG_BATCH_MS / 1000)
            what = "inside a long batch"
        else:
            now_ms = time.time_ns() // 1_000_000
            ends = [until for until in self.watch.ends_in_time() if until > now_ms]
            to_end = (min(ends) - now_ms) / 1000 if ends else 0.0
            delay = to_end + self.random.uniform(0.0, PAST_END_S)
            what = "as a long batch ended"
        if stop.sleep(delay):
            raise Interrupted(f"kill -9 #{number}")
        return what
