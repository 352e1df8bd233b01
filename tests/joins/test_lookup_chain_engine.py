"""A lookup of three tables through `daemon replay`, the real broker and the real Spark engine.

Orders are enriched from customers (by ``order.customer_id``), the customer's region (by
``customer.region_id``) and products (by ``order.product_id``), as
examples/orders-three-tables.toml says: three chained operators and the numbering one in one
query. Every table has rows that reach Kafka after orders they are valid for (late rows),
so answers are revised, and a customer moves region late, so a region row's revisions
follow her. The engine's outputs must equal, per order, the plain replay of the chain
(tests/unit/joiners/chain_replay.py, itself checked against plain models there), in one
micro-batch and in micro-batches of a few records; and so must six such histories run at once,
each in its own key space, half of them with a customer whose first row arrives after orders
for it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from daemon.model.config import load_pipeline_file
from daemon.replay import replay
from daemon.testing import by_key
from tests.joins.shop_chain import merged, plain_chain, shop_inputs

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "orders-three-tables.toml"


def _write(tmp: Path, lines: dict[str, list[dict[str, Any]]]) -> dict[str, Path]:
    files = {}
    for role, records in lines.items():
        path = tmp / f"{role}.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
        files[role] = path
    return files


@pytest.fixture(scope="module")
def lines() -> dict[str, list[dict[str, Any]]]:
    return shop_inputs(65)


@pytest.mark.parametrize("max_batch", [None, 17])
def test_three_tables_in_one_query_answer_as_the_plain_chain(
    lines: dict[str, list[dict[str, Any]]],
    max_batch: int | None,
    broker: Any,
    spark: Any,
    tmp_path: Path,
) -> None:
    plain = plain_chain(lines)
    expected = by_key(plain.outputs)
    # The data revises: late rows of every table change answers, so the test can fail.
    assert plain.metrics["customers.revisions"] > 0
    assert plain.metrics["regions.revisions"] > 0
    assert plain.metrics["products.revisions"] > 0
    assert plain.dead_letters == []
    assert len(expected) == 36

    result = replay(
        load_pipeline_file(EXAMPLE),
        _write(tmp_path, lines),
        bootstrap_servers=broker.bootstrap_servers,
        max_batch=max_batch,
    )

    assert result.dead_letters == []
    assert by_key(result.outputs) == expected
    if max_batch is not None:
        assert result.batches >= sum(map(len, lines.values())) // max_batch


def test_six_histories_at_once_answer_as_the_plain_chain_in_small_batches(
    broker: Any, spark: Any, tmp_path: Path
) -> None:
    lines = merged(
        [shop_inputs(seed, f"h{seed}-", late_customer=seed % 2 == 1) for seed in range(6)]
    )
    plain = plain_chain(lines)
    expected = by_key(plain.outputs)
    # Orders for a customer without a row yet wait for it: its late first row answers them.
    assert plain.metrics["customers.unmatched"] > 0
    assert all(plain.metrics[f"{table}.revisions"] > 0 for table in ("customers", "regions"))
    assert len(expected) == 6 * 36

    result = replay(
        load_pipeline_file(EXAMPLE),
        _write(tmp_path, lines),
        bootstrap_servers=broker.bootstrap_servers,
        max_batch=29,
    )

    assert result.dead_letters == []
    assert by_key(result.outputs) == expected
    assert result.batches >= sum(map(len, lines.values())) // 29
