"""How far a running query has read its inputs, and how many of its batches read records.

A micro-batch query's progress reports say it: Spark posts one when a batch has committed,
with the offsets it ended at. A continuous query's report only when a long batch ends; its
task reports where its committed sub-batches read to, about once a second, through a report
socket (:mod:`daemon.continuous.progress`). ``daemon replay`` and the benchmarks wait on
either the same way (:data:`Consumed`).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from typing import Any

from daemon.model.reports import BatchCounts, least_read
from daemon.model.wire import parse_offsets
from daemon.report_socket import ReportSocket

Consumed = Callable[[], tuple[dict[str, int], int]]
"""Where a query has read to by partition name, and how many of its batches read records."""


def reached(report: Any, ends: dict[str, int]) -> bool:
    """Whether the micro-batch of a progress report ended at or past ``ends``."""
    if not report.sources:
        return False
    end = parse_offsets(report.sources[0].endOffset)
    return all(end.get(name, 0) >= offset for name, offset in ends.items())


class NewReports:
    """A query's progress reports as they come, each read from Spark once.

    ``query.recentProgress`` converts every report Spark keeps (up to 100, each a call into
    the JVM and a JSON parse) on every call: polled every 0.1 s while a replay runs, with 25
    reports kept that took 6 ms of this process's CPU and 16 ms in all a poll. This
    walks Spark's list from its newest report back to the last one it returned; a report is
    known by its batch and its trigger's start, since an idle trigger reports the next
    batch's id before that batch runs.
    """

    def __init__(self, query: Any):
        self._query = query
        self._last: tuple[int, str] | None = None

    def __call__(self) -> list[Any]:
        """The reports since the last call, oldest first."""
        # Late: PySpark loads with the session (daemon.spark.session), not with this module.
        from pyspark.sql.streaming.listener import StreamingQueryProgress

        kept = self._query._jsq.recentProgress()
        new = []
        for index in range(len(kept) - 1, -1, -1):
            report = StreamingQueryProgress.fromJson(json.loads(kept[index].json()))
            if (report.batchId, report.timestamp) == self._last:
                break
            new.append(report)
        if new:
            self._last = (new[0].batchId, new[0].timestamp)
        return new[::-1]


def spark_progress(query: Any) -> Consumed:
    """How far a micro-batch ``query`` has read, by its progress reports."""
    new_reports = NewReports(query)
    seen: set[int] = set()
    at: dict[str, int] = {}

    def consumed() -> tuple[dict[str, int], int]:
        nonlocal at
        reports = new_reports()
        seen.update(report.batchId for report in reports if report.numInputRows)
        if reports and reports[-1].sources:
            at = parse_offsets(reports[-1].sources[0].endOffset)
        return at, len(seen)

    return consumed


class TaskReports:
    """A continuous query's task reports: where its committed sub-batches read to.

    Give :attr:`address` to the query's output as its ``metrics_address``; :meth:`close`
    when done. Each of its ``leases`` reads every partition: the query has read what the
    lease that read least has, once every lease has reported.
    """

    def __init__(self, leases: int = 1) -> None:
        self._lock = threading.Lock()
        self._leases = leases
        self._at: dict[int, dict[str, int]] = {}
        self._sub_batches = 0
        self._socket = ReportSocket({BatchCounts.kind: self._heard})
        self.address = self._socket.address

    def _heard(self, report: BatchCounts) -> None:
        with self._lock:
            lease = self._at.setdefault(report.lease, {})
            for name, at in report.positions.items():
                lease[name] = max(lease.get(name, 0), at)
            self._sub_batches += report.sub_batches

    def consumed(self) -> tuple[dict[str, int], int]:
        """Where the task read to, and how many sub-batches read records (:data:`Consumed`)."""
        with self._lock:
            if len(self._at) < self._leases:
                return {}, self._sub_batches
            return least_read(self._at), self._sub_batches

    def close(self) -> None:
        """Stop listening."""
        self._socket.close()
