"""A replay reads each progress report of its query once (:class:`daemon.consumed.NewReports`)."""

from __future__ import annotations

import json
import uuid
from typing import Any

from daemon.consumed import NewReports

QUERY = str(uuid.uuid4())


class JavaReport:
    """A report as py4j hands it over: ``json()`` is a call into the JVM, counted here."""

    calls = 0

    def __init__(self, batch: int, started: str, rows: int) -> None:
        self.text = json.dumps(
            {
                "id": QUERY,
                "runId": QUERY,
                "name": "q",
                "timestamp": started,
                "batchId": batch,
                "batchDuration": 1,
                "numInputRows": rows,
                "stateOperators": [],
                "sources": [],
                "sink": {"description": "sink", "numOutputRows": rows, "metrics": {}},
            }
        )

    def json(self) -> str:
        JavaReport.calls += 1
        return self.text


class Query:
    """Spark keeps the last ``keep`` reports; ``recentProgress()`` copies them."""

    def __init__(self, keep: int = 100) -> None:
        self.kept: list[JavaReport] = []
        self.keep = keep
        self._jsq = self

    def report(self, batch: int, started: str, rows: int = 1) -> None:
        self.kept = [*self.kept, JavaReport(batch, started, rows)][-self.keep :]

    def recentProgress(self) -> list[JavaReport]:  # noqa: N802 - Spark's name
        return list(self.kept)


def ids(reports: list[Any]) -> list[tuple[int, int]]:
    return [(report.batchId, report.numInputRows) for report in reports]


def test_each_report_is_returned_once_in_order_and_read_from_the_jvm_once_more_at_most() -> None:
    query = Query()
    new = NewReports(query)
    assert new() == []
    for batch in range(3):
        query.report(batch, f"t{batch}")
    JavaReport.calls = 0
    assert ids(new()) == [(0, 1), (1, 1), (2, 1)]
    assert JavaReport.calls == 3
    JavaReport.calls = 0
    assert new() == []
    assert JavaReport.calls == 1  # the newest, to see it was returned already
    query.report(3, "t3")
    assert ids(new()) == [(3, 1)]


def test_an_idle_report_does_not_hide_the_batch_that_then_runs_under_its_id() -> None:
    query = Query()
    new = NewReports(query)
    query.report(0, "t0")
    new()
    query.report(1, "t1", rows=0)  # idle: the next batch's id, no records
    assert ids(new()) == [(1, 0)]
    query.report(1, "t2", rows=5)  # batch 1 runs
    assert ids(new()) == [(1, 5)]


def test_reports_spark_dropped_between_two_calls_are_skipped_the_kept_ones_returned() -> None:
    query = Query(keep=2)
    new = NewReports(query)
    query.report(0, "t0")
    new()
    for batch in range(1, 5):
        query.report(batch, f"t{batch}")
    assert ids(new()) == [(3, 1), (4, 1)]
