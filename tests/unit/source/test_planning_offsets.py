"""The source plans the same ends as the same offsets, whatever order it found them in.

Spark compares a source's offsets as JSON text to decide whether a batch has new data: the
same ends in another order made it run a batch that read nothing (a partition whose Fetch
had not answered yet was looked up last).
"""

from __future__ import annotations

import json

from pyspark.sql.streaming.datasource import ReadAllAvailable

from daemon.model.wire import CLOCK
from daemon.source.planning import SourcePlanner
from daemon.source.spec import SourceSpec


def planned_json(ends: dict[str, int], wake_ms: int = 0) -> str:
    spec = SourceSpec(inputs=(), client_conf={}, max_records_per_batch=10, wake_ms=wake_ms)
    planner = SourcePlanner(spec)
    planner._log_ends = lambda start: ends  # type: ignore[method-assign]  # no broker
    return json.dumps(planner.latest_offsets({}, ReadAllAvailable()))


def test_the_same_ends_found_in_another_order_plan_the_same_offsets() -> None:
    found = {"users/0": 1, "users/1": 1, "tweets/0": 5, "tweets/1": 7}
    late_users = {"tweets/0": 5, "tweets/1": 7, "users/0": 1, "users/1": 1}
    assert planned_json(found) == planned_json(late_users)


def test_the_clock_comes_after_the_partitions() -> None:
    planned = json.loads(planned_json({"b/0": 2, "a/0": 1}, wake_ms=60_000))
    assert list(planned) == ["a/0", "b/0", CLOCK]
