"""A lookup of three tables stopped and started again on its checkpoint: every operator's state
is back, so late rows after the restart revise orders joined before it, once each.

The pipeline is examples/orders-three-tables.toml's (three chained operators and the
numbering one in one query) on the session's broker and Spark. Its inputs are
tests/joins/shop_chain.py's random orders and table changes, cut in two by Kafka timestamp
(near the middle, where a late row after the cut revises an order before it): the first
part is produced and the query runs until it has read it, then stops; the rest is
produced and a new query runs from the checkpoint. The output topic, read
``read_committed``, must hold per order exactly what the plain replay of the chain over all
the input writes: nothing lost, nothing twice, and the revisions that need the first run's
state.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from daemon.broker import EmbeddedBroker
from daemon.testing import by_key
from tests.joins.shop_chain import plain_chain, shop_inputs
from tests.joins.shop_pipeline import Lines, ShopPipeline
from tests.kafka_helpers import run_pipeline


def _cut(lines: Lines, at: int) -> tuple[Lines, Lines]:
    """The records before Kafka timestamp ``at``, and the rest."""
    first = {role: [r for r in rs if r["timestamp"] < at] for role, rs in lines.items()}
    rest = {role: [r for r in rs if r["timestamp"] >= at] for role, rs in lines.items()}
    return first, rest


def _cut_across_a_revision(lines: Lines) -> tuple[Lines, Lines]:
    """A cut nearest the middle after which a late row revises an order joined before it.

    Without one the test could not tell a restart that lost the operators' state.
    """
    expected = by_key(plain_chain(lines).outputs)
    times = sorted(r["timestamp"] for records in lines.values() for r in records)
    middle = len(times) // 2
    for at in sorted(times, key=lambda t: abs(times.index(t) - middle)):
        first, rest = _cut(lines, at)
        before = by_key(plain_chain(first).outputs)
        if any(len(expected[order]) > len(outputs) for order, outputs in before.items()):
            return first, rest
    raise AssertionError("no late row revises an order joined before it: other inputs needed")


def test_a_restarted_chain_revises_orders_joined_before_it_once_each(
    broker: EmbeddedBroker, spark: Any, tmp_path: Path
) -> None:
    lines = shop_inputs(65)
    first, rest = _cut_across_a_revision(lines)
    expected = by_key(plain_chain(lines).outputs)
    assert set(expected) - set(by_key(plain_chain(first).outputs))  # rest has orders too

    shop = ShopPipeline.on(broker, tmp_path)
    file = shop.file()

    shop.produce(first)
    assert run_pipeline(spark, file)
    shop.produce(rest)
    assert run_pipeline(spark, file)  # a new query, on the first one's checkpoint

    assert by_key(shop.written()) == expected
