"""A lease of a lookup of several tables on the real broker: its operators chained in the task,
an attempt that died inside the long batch replaced by one that replays and goes on.

No Spark, as tests/continuous/test_long_batch_task.py: the task drives the operators' calls.
examples/orders-three-tables.toml's chain (customers, the customer's region, products, and
the numbering) over orders whose tables' rows arrive late, so that answers are revised;
everything is in Kafka before the task starts, read a few records a sub-batch. The first
attempt dies after its second sub-batch's commit; the second, with the state as of the long
batch's start (none), replays those two through every operator, output suppressed, and goes
on: the output, read ``read_committed``, is per order what the plain replay of the chain
writes, each answer once.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

from daemon.broker import EmbeddedBroker
from daemon.continuous.held_buckets import HeldBuckets
from daemon.continuous.lease import Lease
from daemon.continuous.operators import LeaseOperators
from daemon.continuous.task import LongBatchRun, LongBatchTask, wall_ms
from daemon.model.config import load_pipeline_file
from daemon.operator.chain_processor import ChainProcessor
from daemon.pipeline.plan import PipelinePlan, plan_pipeline
from daemon.sink.task_producer import forget_kept_clients
from daemon.testing import by_key
from tests.joins.shop_chain import (
    example_on_topics,
    plain_chain,
    produce_lines,
    shop_inputs,
    written_orders,
)
from tests.kafka_helpers import client_conf


class Crash(Exception):  # noqa: N818 - what the test does to the attempt
    """The first attempt ends here, after a commit."""


def _crash_after_two(sub: int) -> None:
    if sub == 1:
        raise Crash


def _attempt(
    plan: PipelinePlan, lease: Lease, after_commit: Callable[[int], None] | None = None
) -> LongBatchRun:
    """One attempt of ``lease``, every operator of the chain with no state held yet."""
    processors = [ChainProcessor(operator, plan.output, step) for operator, step in plan.chain]
    operators = LeaseOperators(processors, [HeldBuckets() for _ in processors])
    task = LongBatchTask(
        operators, plan.source, plan.output, lease, "query", after_commit=after_commit
    )
    return task.run()


def test_a_replaced_attempt_replays_the_chain_and_answers_each_order_once(
    broker: EmbeddedBroker, tmp_path: Path
) -> None:
    lines = shop_inputs(65)
    plain = plain_chain(lines, end=False)
    assert plain.metrics["customers.revisions"] > 0 and plain.metrics["products.revisions"] > 0
    path = example_on_topics(broker, tmp_path)
    produce_lines(broker, path, lines)
    file = load_pipeline_file(path)
    plan = plan_pipeline(file, file.pipeline[0], client_conf(broker.bootstrap_servers))
    plan = replace(plan, source=replace(plan.source, max_records_per_batch=7))
    starts = {f"{spec.topic}/0": 0 for spec in plan.source.inputs}
    assert len(plan.chain) == 4  # three tables and the numbering

    lease = Lease(batch=1, task=0, starts=starts, until_ms=wall_ms() + 30_000)
    try:
        with pytest.raises(Crash):
            _attempt(plan, lease, _crash_after_two)
        again = Lease(batch=1, task=0, starts=starts, until_ms=wall_ms() + 3_000)
        run = _attempt(plan, again)
    finally:
        forget_kept_clients()  # before the session's broker stops

    assert run.replayed == 2
    assert run.ends == {f"{spec.topic}/0": len(lines[spec.role]) for spec in plan.source.inputs}
    assert by_key(written_orders(broker, path)) == by_key(plain.outputs)
