"""The n-way workload's shop: its tables and orders on fresh topics, and its two pipelines.

The tables are the three of ``examples/orders-three-tables.toml``: customers (each in one of
:data:`REGIONS` regions), regions and products, every row valid from time 0 and produced
before every order (Kafka timestamps 1, 2, ...), so they are preloaded: the first
micro-batch reads them all. Then orders, keyed by order id, each by a customer and for a
product drawn at random from the tables' keys, so every order finds a row in every table.

The pipelines are the example's, pointed at these topics, unversioned and without
revisions (the plain lookup the ``lookup`` workload measures): *one table* enriches the
orders with their customer (``[pipeline.inputs.table]``, the one-table lookup of before),
*three tables* with their customer, the customer's region and their product (the chain of
``[[pipeline.options.tables]]``). Their output schemas are the example's less what they do
not write (:func:`output_schema`).
"""

from __future__ import annotations

import json
import random
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.enrichd import EnrichdResult, run_pipeline
from bench.twostream import produce as produce_records
from bench.workloads import REPO, SCHEMAS, codec, create_input_topics

EXAMPLE = REPO / "examples" / "orders-three-tables.toml"
REGIONS = 50
"""Regions in the regions table; each customer is in one, drawn at random."""
TABLES = ("customers", "regions", "products")
"""The example's tables, in the order of its chain (regions' key reads the customer's row)."""
FIELDS = {"customers": "customer", "regions": "region", "products": "product"}
"""The output field each table's row goes to."""


@dataclass(frozen=True)
class Shop:
    """How many rows each table has and how many orders follow them."""

    customers: int
    products: int
    orders: int
    seed: int = 7

    @property
    def table_rows(self) -> int:
        """Rows of the three tables together."""
        return self.customers + REGIONS + self.products


@dataclass(frozen=True)
class ShopTopics:
    """The topic names of one produced shop."""

    orders: str
    customers: str
    regions: str
    products: str

    @classmethod
    def fresh(cls) -> ShopTopics:
        """Names no earlier run used."""
        suffix = uuid.uuid4().hex[:8]
        return cls(*(f"shop-{name}-{suffix}" for name in ("orders", *TABLES)))

    def table(self, name: str) -> str:
        """The topic of table ``name`` (one of :data:`TABLES`)."""
        topic: str = getattr(self, name)
        return topic

    def tables(self, count: int) -> dict[str, str]:
        """The first ``count`` tables' topics by table name: one (customers) or all three."""
        return {name: self.table(name) for name in TABLES[:count]}

    def read(self, ends: dict[str, int], tables: int) -> dict[str, int]:
        """The partition ends of ``ends`` that a lookup of ``tables`` tables reads: the
        orders' and its tables' (one table: the customers')."""
        read = {self.orders, *self.tables(tables).values()}
        return {name: end for name, end in ends.items() if name.rpartition("/")[0] in read}


def region_id(i: int) -> str:
    """Region ``i``'s id, the regions table's key and a customer's ``region_id``."""
    return f"region-{i:02d}"


def customer_id(i: int) -> str:
    """Customer ``i``'s id, the customers table's key and an order's ``customer_id``."""
    return f"customer-{i:07d}"


def product_id(i: int) -> str:
    """Product ``i``'s id, the products table's key and an order's ``product_id``."""
    return f"product-{i:06d}"


def rows(shop: Shop, rng: random.Random) -> dict[str, list[dict[str, Any]]]:
    """Every table's rows, by table name; each keyed in Kafka by its ``id``."""
    return {
        "regions": [
            {"id": region_id(i), "name": f"Region {i}", "manager": f"m{i}", "since": 0}
            for i in range(REGIONS)
        ],
        "customers": [
            {
                "id": customer_id(i),
                "name": f"Customer {i}",
                "region_id": region_id(rng.randrange(REGIONS)),
                "since": 0,
            }
            for i in range(shop.customers)
        ],
        "products": [
            {"id": product_id(i), "title": f"Product {i}", "price": 100 + i % 900, "since": 0}
            for i in range(shop.products)
        ],
    }


def produce(conf: dict[str, str], topics: ShopTopics, shop: Shop) -> dict[str, int]:
    """Create the topics, produce the tables and then the orders; each partition's end.

    Raises:
        RuntimeError: a topic could not be created or a record delivered.
    """
    create_input_topics(conf, (topics.orders, *topics.tables(len(TABLES)).values()))
    return produce_records(conf, records(topics, shop))


def records(topics: ShopTopics, shop: Shop) -> Iterator[tuple[str, str, bytes, int]]:
    """``(topic, key, value, timestamp)`` of every table row, then of every order, each a
    millisecond after the one before."""
    rng = random.Random(shop.seed)
    timestamp = 0
    for name, table in rows(shop, rng).items():
        encode = codec(f"shop_{FIELDS[name]}").encode
        for row in table:
            timestamp += 1
            yield topics.table(name), row["id"], encode(row), timestamp
    order = codec("shop_order").encode
    for i in range(shop.orders):
        timestamp += 1
        key = f"order-{i}"
        value = {
            "id": key,
            "customer_id": customer_id(rng.randrange(shop.customers)),
            "product_id": product_id(rng.randrange(shop.products)),
            "quantity": 1 + i % 5,
            "at": timestamp,
        }
        yield topics.orders, key, order(value), timestamp


def output_schema(tables: int) -> dict[str, Any]:
    """The output record of ``tables`` tables (1 or 3): the example's, without ``revision``
    and, with one table, without the region and the product."""
    example = json.loads((SCHEMAS / "order_three_tables.avsc").read_text(encoding="utf-8"))
    kept = {"order", *(FIELDS[name] for name in TABLES[:tables])}
    name = "OrderThreeTables" if tables == len(TABLES) else "OrderWithCustomer"
    fields = [f for f in example["fields"] if f["name"] in kept]
    return {**example, "name": name, "fields": fields}


def configure(
    servers: str,
    topics: ShopTopics,
    tables: int,
    folder: Path,
    max_records_per_batch: int,
) -> tuple[Any, Any]:
    """The example's pipeline file and pipeline over ``topics``, with ``tables`` tables.

    ``folder`` (fresh, removed by the caller) gets the checkpoint and the output schema.
    """
    from daemon.model.config import KafkaConfig, load_pipeline_file

    example = load_pipeline_file(EXAMPLE)
    file = example.model_copy(update={"kafka": KafkaConfig(bootstrap_servers=servers)})
    pipe = file.pipeline[0]
    schema = folder / "output.avsc"
    schema.write_text(json.dumps(output_schema(tables)), encoding="utf-8")
    suffix = uuid.uuid4().hex[:8]
    # The one-table lookup's table is the input named `table`; a chain's, each its own.
    roles = {"table": "customers"} if tables == 1 else {name: name for name in TABLES}
    inputs = {"stream": pipe.inputs["stream"].model_copy(update={"topic": topics.orders})}
    for role, name in roles.items():
        inputs[role] = pipe.inputs[name].model_copy(update={"topic": topics.table(name)})
    options: dict[str, Any] = {}
    if tables > 1:  # the example's chain, without versioned and revisions
        chain = [
            {"input": t["input"], "lookup_key": t["lookup_key"]} for t in pipe.options["tables"]
        ]
        options["tables"] = chain
    pipe = pipe.model_copy(
        update={
            "name": f"bench-shop-{tables}-{suffix}",
            "inputs": inputs,
            "output": pipe.output.model_copy(
                update={"topic": f"bench-shop-{tables}-{suffix}", "schema_file": schema}
            ),
            "options": options,
            "dead_letter_topic": f"bench-shop-{tables}-{suffix}.dlq",
            "checkpoint": folder / "checkpoint",
            "max_records_per_batch": max_records_per_batch,
            "trigger": 0,
        }
    )
    return file, pipe


def run_enrichd(
    servers: str,
    topics: ShopTopics,
    ends: dict[str, int],
    tables: int,
    max_records_per_batch: int,
    timeout_s: float = 3600.0,
) -> EnrichdResult:
    """The shop pipeline of ``tables`` tables over everything produced, from a fresh
    checkpoint, until it consumed to ``ends``.

    Only the topics it reads count as its input (:meth:`ShopTopics.read`).

    Raises:
        RuntimeError: the query failed or did not consume everything in ``timeout_s``.
    """
    mine = topics.read(ends, tables)
    with tempfile.TemporaryDirectory(prefix="enrichd-bench-") as tmp:
        file, pipe = configure(servers, topics, tables, Path(tmp), max_records_per_batch)
        return run_pipeline(file, pipe, mine, sum(mine.values()), timeout_s)
