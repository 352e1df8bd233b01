"""Orders and three tables' changelogs, random with late rows in every table, and their answer.

The inputs of examples/orders-three-tables.toml's pipeline (orders enriched from customers,
the customer's region and products), built so that answers are revised, and the plain replay
of the chain over them (tests/unit/joiners/chain_replay.py), which the engine's runs are to
equal per order.
"""

from __future__ import annotations

import random
from typing import Any

from daemon.joiners.lookup import LookupOptions
from daemon.joiners.lookup_chain import ChainTable
from tests.unit.joiners.chain_replay import ChainRun, ChainStream, run_chain

REVISING = LookupOptions(versioned=True, revisions=True)
TABLES = [
    ChainTable("customers", "customer", "order.customer_id", REVISING),
    ChainTable("regions", "region", "customer.region_id", REVISING),
    ChainTable("products", "product", "order.product_id", REVISING),
]
ROW_KEYS = {"customers": "id", "regions": "id", "products": "id"}
TIMES = {"stream": "at", "customers": "since", "regions": "since", "products": "since"}


def shop_inputs(seed: int) -> dict[str, list[dict[str, Any]]]:
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


def plain_chain(lines: dict[str, list[dict[str, Any]]]) -> ChainRun:
    """The chain's plain replay over ``lines``: what the engine is to write."""
    return run_chain(
        ChainStream("stream", "order", "at"), TABLES, lines, row_keys=ROW_KEYS, times=TIMES
    )
