"""A lookup of three tables through `daemon replay`, the real broker and the real Spark engine.

Orders are enriched from customers (by ``order.customer_id``), the customer's region (by
``customer.region_id``) and products (by ``order.product_id``), as
examples/orders-three-tables.toml says: three chained operators and the numbering one in one
query. Every table has rows that reach Kafka after orders they are valid for (late rows),
so answers are revised, and a customer moves region late, so a region row's revisions
follow her. The engine's outputs must equal, per order, the plain replay of the chain
(tests/unit/joiners/chain_replay.py, itself checked against plain models there), in one
micro-batch and in micro-batches of a few records.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

from daemon.joiners.lookup import LookupOptions
from daemon.joiners.lookup_chain import ChainTable
from daemon.model.config import load_pipeline_file
from daemon.replay import replay
from daemon.testing import by_key
from tests.unit.joiners.chain_replay import ChainRun, ChainStream, run_chain

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "orders-three-tables.toml"
REVISING = LookupOptions(versioned=True, revisions=True)
TABLES = [
    ChainTable("customers", "customer", "order.customer_id", REVISING),
    ChainTable("regions", "region", "customer.region_id", REVISING),
    ChainTable("products", "product", "order.product_id", REVISING),
]
ROW_KEYS = {"customers": "id", "regions": "id", "products": "id"}
TIMES = {"stream": "at", "customers": "since", "regions": "since", "products": "since"}


def _inputs(seed: int) -> dict[str, list[dict[str, Any]]]:
    """Orders and the three tables' changelogs, each record with its own Kafka timestamp.

    Every key has a row from time 0 on, written first; then orders and table changes take
    turns at random. A change is valid from a time before the latest orders (``since`` up to
    60 ms back), so it reaches Kafka late for them; some customers change region.
    """
    rng = random.Random(seed)  # noqa: S311 - test data, not security
    lines: dict[str, list[dict[str, Any]]] = {
        "stream": [],
        "customers": [],
        "regions": [],
        "products": [],
    }
    clock = iter(range(1, 10_000))

    def put(role: str, key: str, value: dict[str, Any]) -> None:
        lines[role].append({"key": key, "value": value, "timestamp": next(clock)})

    regions = ["north", "south", "east"]
    customers = {f"c{n}": regions[n % 3] for n in range(4)}
    for name in regions:
        put("regions", name, {"id": name, "name": name.title(), "manager": "m0", "since": 0})
    for cid, where in customers.items():
        put("customers", cid, {"id": cid, "name": cid.upper(), "region_id": where, "since": 0})
    for pid in ("p0", "p1", "p2"):
        put("products", pid, {"id": pid, "title": pid, "price": 10, "since": 0})
    at = 100
    for n in range(36):
        at += rng.randint(5, 15)
        order = {
            "id": f"o{n}",
            "customer_id": rng.choice(list(customers)),
            "product_id": rng.choice(["p0", "p1", "p2"]),
            "quantity": n,
            "at": at,
        }
        put("stream", f"o{n}", order)
        if n % 2 == 1:  # a late change of each table in turn
            since = at - rng.randint(1, 60)
            table = ("customers", "regions", "products")[(n // 2) % 3]
            if table == "customers":
                cid = rng.choice(list(customers))
                customers[cid] = rng.choice(regions)
                put(table, cid, {"id": cid, "name": f"{cid}-{n}", "region_id": customers[cid],
                                 "since": since})  # fmt: skip
            elif table == "regions":
                name = rng.choice(regions)
                put(table, name, {"id": name, "name": name.title(), "manager": f"m{n}",
                                  "since": since})  # fmt: skip
            else:
                pid = rng.choice(["p0", "p1", "p2"])
                put(table, pid, {"id": pid, "title": pid, "price": 10 + n, "since": since})
    return lines


def _write(tmp: Path, lines: dict[str, list[dict[str, Any]]]) -> dict[str, Path]:
    files = {}
    for role, records in lines.items():
        path = tmp / f"{role}.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
        files[role] = path
    return files


def _plain(lines: dict[str, list[dict[str, Any]]]) -> ChainRun:
    return run_chain(
        ChainStream("stream", "order", "at"), TABLES, lines, row_keys=ROW_KEYS, times=TIMES
    )


@pytest.fixture(scope="module")
def lines() -> dict[str, list[dict[str, Any]]]:
    return _inputs(65)


@pytest.mark.parametrize("max_batch", [None, 17])
def test_three_tables_in_one_query_answer_as_the_plain_chain(
    lines: dict[str, list[dict[str, Any]]],
    max_batch: int | None,
    broker: Any,
    spark: Any,
    tmp_path: Path,
) -> None:
    plain = _plain(lines)
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
