"""What a long batch's task tells the daemon while it runs: its sub-batches' counts.

Spark reports a query's progress when a batch ends, and a long batch ends every few
minutes; a daemon that heard only that would count output in bursts and take a running
continuous pipeline for a stalled one. So the task reports itself, through the daemon's report
socket (:mod:`daemon.report_socket`): about once a second, what its sub-batches committed
since the last report (as a micro-batch's counting reports it), the records they read and
where they have read to. A second with nothing committed still gets its report, an empty
one: the daemon's health check takes it for progress, since the task is there and reading.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from daemon.report_socket import send
from daemon.sink.spark_sink import CountTotals, batch_counts
from daemon.sink.spec import OutputSpec

REPORT_EVERY_MS = 1000
"""How often a long batch's task reports, at most, and at least while it runs."""


class Progress:
    """A long batch's reports to the daemon (see the module docstring).

    Args:
        output: the pipeline's output; no report is sent without its ``metrics_address``.
        batch: the long batch.
        task: the lease's number.
        clock: the wall clock in milliseconds.
    """

    def __init__(self, output: OutputSpec, batch: int, task: int, clock: Callable[[], int]) -> None:
        self.output = output
        self.batch = batch
        self.task = task
        self.clock = clock
        self._written: list[Any] = []
        self._read: Counter[str] = Counter()
        self._reading = 0
        self._sent_at = clock() - REPORT_EVERY_MS  # the first report goes at once

    def committed(self, counts: list[Any], read: Counter[str]) -> None:
        """A sub-batch committed: its counts rows, and the records it read by topic."""
        totals = CountTotals()
        for row in counts:
            totals.add(row.value)
        self._written.append(totals.written(self.task, self.batch, self.clock()))
        self._read.update(read)
        self._reading += 1 if read else 0

    def report(
        self, positions: dict[str, int], *, last: bool = False, ended_early: str = ""
    ) -> None:
        """Send what was committed since the last report, if a second has passed (or ``last``).

        ``ended_early``: the last report's line saying why the long batch ended before its
        time was up ("": it did not).
        """
        now = self.clock()
        address = self.output.metrics_address
        if address is None or (now - self._sent_at < REPORT_EVERY_MS and not last):
            return
        counts = batch_counts(self.output.pipeline, self._written, self.batch)
        heard = replace(
            counts,
            read=dict(self._read),
            positions=dict(positions),
            sub_batches=self._reading,
            lease=self.task,
            ended_early=ended_early,
        )
        send(address, heard)
        self._written, self._read, self._reading, self._sent_at = [], Counter(), 0, now
