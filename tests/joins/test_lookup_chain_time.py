"""A grace on one table of a chain and a ``state_ttl`` on another, through the broker and Spark.

The three-table example (examples/orders-three-tables.toml) with customers held for a grace
of 40 ms (an order waits at its customer until her stream time is 40 ms past it) and
products as latest values with a ``state_ttl`` of 1 ms, in left mode: a micro-batch takes
some processing time, so a product row is seen only by the orders that reach the products
stage in its own micro-batch, after it, and is a tombstone (the default product) to every
later one. Customer rows arrive late, some within the grace (the held order's first answer
has them) and some past it (a revision), and orders arrive out of their time order. Many
such histories run at once in one replay, each in its own key space.

The plain model below says what each order's answers are, in processing order: each batch
of ``max_batch`` records in arrival order (the source cuts micro-batches so); the customer
stage of every key as docs/semantics.md says of a versioned table with a grace and
revisions; the answer a customer's row or an order lets out goes on at that record's place
in the arrival order and finds the product row current there, if that row came in the same
micro-batch. The engine's outputs per order must equal it, for two sizes of micro-batch.
"""

from __future__ import annotations

import random
from bisect import insort
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from daemon.model.config import load_pipeline_file
from daemon.replay import replay
from daemon.testing import by_key
from tests.joins.shop_chain import Lines, derived_example, write_inputs

GRACE = 40
NO_PRODUCT = {"id": "", "title": "none", "price": 0, "since": 0}
HISTORIES = 8


def _pipeline(folder: Path) -> Path:
    """The example with the customers' grace and the products' TTL (left mode, a default)."""
    return derived_example(
        folder,
        {
            'lookup_key = "order.customer_id"\nversioned = true\nrevisions = true': (
                'lookup_key = "order.customer_id"\nversioned = true\nrevisions = true\n'
                f'grace = "{GRACE}ms"\nidle_timeout = "1h"'
            ),
            'lookup_key = "order.product_id"\nversioned = true\nrevisions = true': (
                'lookup_key = "order.product_id"\nmode = "left"\nstate_ttl = "1ms"\n'
                'default = { id = "", title = "none", price = 0, since = 0 }'
            ),
        },
    )


def history(seed: int, prefix: str) -> list[tuple[str, dict[str, Any]]]:
    """One history's records in its own order: (role, value), every key starting ``prefix``.

    Regions and customers (from time 0) first; then orders, each often just after a row of
    its product, customer rows valid from up to 120 ms back (within the grace or past it),
    and lone product rows; last a row of each customer from far ahead, which lets out what
    her stage holds, as a key's end of input would.
    """
    rng = random.Random(seed)  # noqa: S311 - test data, not security
    regions = [f"{prefix}north", f"{prefix}south"]
    customers = [f"{prefix}c{n}" for n in range(3)]
    products = [f"{prefix}p{n}" for n in range(3)]
    records: list[tuple[str, dict[str, Any]]] = [
        ("regions", {"id": r, "name": r, "manager": "m", "since": 0}) for r in regions
    ]
    for cid in customers:
        records.append(("customers", _customer(cid, 0, rng.choice(regions))))
    at = 100
    for n in range(24):
        at += rng.randint(5, 25)
        product = rng.choice(products)
        if rng.random() < 0.6:
            records.append(("products", {"id": product, "title": product, "price": n, "since": 0}))
        order = {
            "id": f"{prefix}o{n}",
            "customer_id": rng.choice(customers),
            "product_id": product,
            "quantity": n,
            "at": at - rng.randint(0, 30),  # orders out of their time order
        }
        records.append(("stream", order))
        if rng.random() < 0.5:
            since = at - rng.randint(0, 120)
            records.append(
                ("customers", _customer(rng.choice(customers), since, rng.choice(regions)))
            )
        if rng.random() < 0.2:
            lone = rng.choice(products)
            records.append(("products", {"id": lone, "title": lone, "price": 100 + n, "since": 0}))
    for cid in customers:
        records.append(("customers", _customer(cid, 1_000_000, regions[0])))
    return records


def _customer(cid: str, since: int, region: str) -> dict[str, Any]:
    return {"id": cid, "name": f"{cid}@{since}", "region_id": region, "since": since}


def merged(histories: list[list[tuple[str, dict[str, Any]]]], seed: int) -> Lines:
    """The histories interleaved at random, each keeping its order; Kafka timestamps 1, 2, ..."""
    rng = random.Random(seed)  # noqa: S311 - test data, not security
    pending = [list(reversed(h)) for h in histories]
    lines: Lines = {"stream": [], "customers": [], "regions": [], "products": []}
    clock = 0
    while any(pending):
        role, value = rng.choice([p for p in pending if p]).pop()
        clock += 1
        lines[role].append({"key": value["id"], "value": value, "timestamp": clock})
    return lines


@dataclass
class _Customer:
    """A customer key's stage: stream time, versions, held orders, answers kept to revise."""

    stream_time: int | None = None
    versions: list[tuple[int, int, dict[str, Any]]] = field(default_factory=list)
    held: list[tuple[int, int, dict[str, Any]]] = field(default_factory=list)
    kept: dict[str, dict[str, Any]] = field(default_factory=dict)

    def as_of(self, at: int) -> dict[str, Any]:
        """The latest row from ``at`` or before; of rows from the same time, the last in."""
        return max((v for v in self.versions if v[0] <= at), key=lambda v: v[:2])[2]


def model(lines: Lines, max_batch: int, *, grace: int = GRACE, ttl: bool = True) -> dict[str, Any]:
    """Each order's answers, as the chain is to write them (see the module docstring).

    ``grace`` and ``ttl`` as given, to show that the data depends on both.
    """
    arrival = sorted(
        ((line["timestamp"], role, line["value"]) for role, rows in lines.items() for line in rows),
        key=lambda item: item[0],
    )
    regions = {line["value"]["id"]: line["value"] for line in lines["regions"]}
    customers: dict[str, _Customer] = {}
    products: dict[str, tuple[int, dict[str, Any]]] = {}  # the latest row and its batch
    answers: dict[str, list[dict[str, Any]]] = {}

    def answer(order: dict[str, Any], customer: dict[str, Any], batch: int) -> None:
        row = products.get(order["product_id"])
        product = row[1] if row is not None and (row[0] == batch or not ttl) else NO_PRODUCT
        written = answers.setdefault(order["id"], [])
        value = {"order": order, "customer": customer, "region": regions[customer["region_id"]]}
        written.append({**value, "product": product, "revision": len(written)})

    for place, (_, role, value) in enumerate(arrival):
        batch = place // max_batch
        if role == "products":
            products[value["id"]] = (batch, value)
            continue
        if role == "regions":
            continue
        key = value["id"] if role == "customers" else value["customer_id"]
        stage = customers.setdefault(key, _Customer())
        time = value["since"] if role == "customers" else value["at"]
        stage.stream_time = time if stage.stream_time is None else max(stage.stream_time, time)
        if role == "customers":
            stage.versions.append((time, place, value))
            for oid, kept in stage.kept.items():  # a late row revises the answers it changes
                now = stage.as_of(kept["at"])
                if kept["at"] >= time and now != answers[oid][-1]["customer"]:
                    answer(kept, now, batch)
        elif not stage.held and time <= stage.stream_time - grace:
            stage.kept[value["id"]] = value
            answer(value, stage.as_of(time), batch)
            continue
        else:
            insort(stage.held, (time, place, value), key=lambda held: held[:2])
        while stage.held and stage.held[0][0] <= stage.stream_time - grace:
            order = stage.held.pop(0)[2]
            stage.kept[order["id"]] = order
            answer(order, stage.as_of(order["at"]), batch)
    return answers


@pytest.fixture(scope="module")
def lines() -> Lines:
    return merged([history(seed, f"h{seed}-") for seed in range(HISTORIES)], 65)


@pytest.mark.parametrize("max_batch", [41, 131])
def test_a_grace_and_a_state_ttl_in_a_chain_answer_as_the_plain_model(
    lines: Lines, max_batch: int, broker: Any, spark: Any, tmp_path: Path
) -> None:
    expected = model(lines, max_batch)
    # The data tells: without the grace, or without the TTL, the answers would differ.
    assert model(lines, max_batch, grace=0) != expected
    assert model(lines, max_batch, ttl=False) != expected
    assert len(expected) == HISTORIES * 24
    assert any(len(values) > 1 for values in expected.values())  # late rows revise
    assert any(v[0]["product"] == NO_PRODUCT for v in expected.values())  # expired rows
    assert any(v[0]["product"] != NO_PRODUCT for v in expected.values())

    result = replay(
        load_pipeline_file(_pipeline(tmp_path)),
        write_inputs(tmp_path, lines),
        bootstrap_servers=broker.bootstrap_servers,
        max_batch=max_batch,
    )

    assert result.dead_letters == []
    assert by_key(result.outputs) == expected
