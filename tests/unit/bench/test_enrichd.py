"""What the benchmark reads of the service it runs: the worker cache's loads, from /metrics,
at the address the service logs."""

from __future__ import annotations

import logging

from prometheus_client import generate_latest

from bench import enrichd
from bench.enrichd import cache_line, loads_in
from daemon.model.reports import BatchCounts
from daemon.service.observability import Metrics, PipelineView


def test_the_cache_loads_of_every_stage_are_read_from_the_services_metrics() -> None:
    metrics = Metrics()
    for name, loads in (("views", {"hit": 30, "miss": 10}), ("views.totals", {"miss": 2})):
        view = PipelineView(name=name, inputs={}, outputs={}, dead_letter_topic="dlq")
        metrics.batch_written(view, BatchCounts(name, 1, state_cache=loads))
    assert loads_in(generate_latest(metrics.registry).decode()) == {"hit": 30, "miss": 12}


def test_the_report_says_how_often_a_workers_copy_served() -> None:
    (line,) = cache_line({"hit": 30, "miss": 12})
    assert line.startswith("- State cache: 30 of 42 loads of stored buckets (71%) found")
    assert cache_line({}) == []  # a run that loaded no stored bucket says nothing


def test_the_service_endpoints_address_is_heard_from_its_monitors_line_and_only_meanwhile() -> None:
    logger = logging.getLogger("enrichd.operations")
    level = logger.level
    endpoint = enrichd._Endpoint()
    with endpoint.heard():
        logger.info("ready: %s", "views")
        logger.info(
            "serving /healthz, /livez, /readyz and /metrics at %s", "http://127.0.0.1:41234"
        )
    assert endpoint.url == "http://127.0.0.1:41234"
    assert (logger.level, endpoint in logger.handlers) == (level, False)
