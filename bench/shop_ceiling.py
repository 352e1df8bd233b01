"""The n-way workload's raw ceiling: the shop's lookups in plain dicts, one table or three.

confluent-kafka + fastavro + a dict per table + a batching producer (at-least-once), as the
``lookup`` workload's ceiling: a process reads its tables to their ends first (as a
GlobalKTable is bootstrapped), then its share of the order partitions, and produces one
enriched order per order, in the same output schema as enrichd's pipeline of as many tables
(:func:`bench.shop.output_schema`). With three tables an order takes three lookups, the
region's by its customer's ``region_id``.
"""

from __future__ import annotations

import io
import time
from typing import Any

import fastavro

from bench import ceiling
from bench.ceiling import LoopResult, RawResult
from bench.shop import FIELDS, TABLES, ShopTopics, output_schema
from bench.workloads import SCHEMAS


def _schema(name: str) -> Any:
    return fastavro.schema.load_schema(str(SCHEMAS / f"{name}.avsc"))


def shop_loop(
    conf: dict[str, str],
    tables: dict[str, str],
    order_parts: list[tuple[str, int]],
    ends: dict[str, int],
    output: str,
    go: Any = None,
) -> LoopResult:
    """Read ``tables`` (table name -> topic) into dicts, then enrich the orders of
    ``order_parts`` from each of them."""
    reader: Any = fastavro.schemaless_reader
    writer: Any = fastavro.schemaless_writer
    roles = {topic: name for name, topic in tables.items()}
    schemas = {name: _schema(f"shop_{FIELDS[name]}") for name in tables}
    order_schema = _schema("shop_order")
    enriched = fastavro.parse_schema(output_schema(len(tables)))
    rows: dict[str, dict[str, dict[str, Any]]] = {name: {} for name in tables}
    table_parts = sorted(p for topic in tables.values() for p in ceiling.partitions_of(ends, topic))
    consumer, producer = ceiling.consumer(conf), ceiling.producer(conf)
    if go is not None:
        go.wait()
    first = 0.0
    consumed = emitted = 0
    buffer = io.BytesIO()
    try:
        for messages in ceiling.read_to_ends(consumer, table_parts, ends):
            first = first or time.monotonic()
            for message in messages:
                name = roles[message.topic()]
                row = reader(io.BytesIO(message.value()), schemas[name], None)
                rows[name][row["id"]] = row
            consumed += len(messages)
        customers, regions, products = (rows.get(name, {}) for name in TABLES)
        for messages in ceiling.read_to_ends(consumer, order_parts, ends):
            first = first or time.monotonic()
            for message in messages:
                order = reader(io.BytesIO(message.value()), order_schema, None)
                customer = customers[order["customer_id"]]
                value = {"order": order, "customer": customer}
                if products:  # the three tables
                    value["region"] = regions[customer["region_id"]]
                    value["product"] = products[order["product_id"]]
                buffer.seek(0)
                buffer.truncate()
                writer(buffer, enriched, value)
                ceiling.send(producer, output, buffer.getvalue(), message.key())
            consumed += len(messages)
            emitted += len(messages)
            producer.poll(0)
        done = ceiling.delivered(producer)
    finally:
        consumer.close()
    return LoopResult(first, done, consumed, emitted)


def run_ceiling(
    conf: dict[str, str],
    topics: ShopTopics,
    ends: dict[str, int],
    tables: int,
    output: str,
    processes: int,
) -> RawResult:
    """The shop loop with the first ``tables`` tables in ``processes`` processes; each reads
    every table, and its share of the order partitions."""
    chain = topics.tables(tables)
    order_parts = ceiling.partitions_of(ends, topics.orders)
    shares = [(conf, chain, order_parts[i::processes], ends, output) for i in range(processes)]
    records = sum(topics.read(ends, tables).values())
    return ceiling.run_processes(shop_loop, shares, records)
