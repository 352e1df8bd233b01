"""The n-way workload's shop without a broker: its rows, its output records and the topics a
lookup reads (``bench/shop.py``). ``tests/bench/test_bench_smoke.py`` runs the workload."""

from __future__ import annotations

import io
import random
from typing import Any

import fastavro

from bench.shop import REGIONS, TABLES, Shop, ShopTopics, output_schema, rows


def test_every_customer_is_in_a_region_the_regions_table_has() -> None:
    rng = random.Random(1)  # noqa: S311 - test data, not security
    tables = rows(Shop(customers=30, products=5, orders=0), rng)

    regions = {row["id"] for row in tables["regions"]}
    assert len(regions) == REGIONS
    assert {row["region_id"] for row in tables["customers"]} <= regions
    assert [len(tables[name]) for name in TABLES] == [30, REGIONS, 5]


def test_the_output_record_has_the_order_and_a_field_per_table_and_no_revision() -> None:
    one, three = output_schema(1), output_schema(3)
    assert [f["name"] for f in one["fields"]] == ["order", "customer"]
    assert [f["name"] for f in three["fields"]] == ["order", "customer", "region", "product"]
    order = {"id": "o", "customer_id": "c", "product_id": "p", "quantity": 1, "at": 5}
    customer = {"id": "c", "name": "C", "region_id": "r", "since": 0}
    buffer = io.BytesIO()
    writer: Any = fastavro.schemaless_writer
    writer(buffer, fastavro.parse_schema(one), {"order": order, "customer": customer})
    assert buffer.getvalue()


def test_a_lookup_reads_the_orders_and_its_own_tables_only() -> None:
    topics = ShopTopics("o", "c", "r", "p")
    ends = {f"{topic}/{partition}": 10 for topic in "ocrp" for partition in (0, 1)}

    assert set(topics.read(ends, 1)) == {"o/0", "o/1", "c/0", "c/1"}
    assert sum(topics.read(ends, 3).values()) == 80
