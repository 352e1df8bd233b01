"""A lookup of three plain tables (neither versioned nor revising) through the real engine.

A plain stage answers a key's orders from its state alone when the key gets no row in the
call (:meth:`daemon.plugin.Chain.reader`), beside the apply loop; a key that gets a row, or
has none in an ``inner`` stage, goes through the loop. Both must give what docs/semantics.md
says of an unversioned chain: each order joins, at every table, the latest row that arrived
before it (arrival order at every stage), whatever the micro-batches. The plain model below
says that in a few lines. Four histories run at once, each in its own key space, in small
micro-batches; in each, some orders are for a customer whose region has no row until a third
of the orders are in, so the region stage withdraws them (``inner``) and later answers them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from daemon.broker import EmbeddedBroker
from tests.joins.shop_chain import (
    SCHEMAS,
    Lines,
    derived_example,
    merged,
    replayed,
    shop_inputs,
)

KEYS = {"customers": ("order", "customer_id"), "regions": ("customer", "region_id"),
        "products": ("order", "product_id")}  # fmt: skip
"""Each table's lookup key: the field of the record so far and the field in it."""
FIELDS = {"customers": "customer", "regions": "region", "products": "product"}


def with_unknown_region(lines: Lines, prefix: str) -> Lines:
    """``lines`` with a customer in a region that gets its row a third of the way in.

    Every third order is hers; her region's row reaches Kafka with the thirteenth order's
    timestamp, so after it (the stream goes first at equal timestamps, as the model's
    stable sort has it).
    """
    where = f"{prefix}atlantis"
    customer = {"id": f"{prefix}c-far", "name": "FAR", "region_id": where, "since": 0}
    first = lines["customers"][0]["timestamp"]
    customers = [{"key": customer["id"], "value": customer, "timestamp": first}]
    orders = []
    for n, line in enumerate(lines["stream"]):
        if n % 3 == 0:
            line = {**line, "value": {**line["value"], "customer_id": customer["id"]}}
        orders.append(line)
    arrives = orders[12]["timestamp"]
    region = {"id": where, "name": "Atlantis", "manager": "m-far", "since": 0}
    regions = [{"key": where, "value": region, "timestamp": arrives}]
    return {
        "stream": orders,
        "customers": customers + lines["customers"],
        "regions": sorted(lines["regions"] + regions, key=lambda r: r["timestamp"]),
        "products": lines["products"],
    }


def plain_model(lines: Lines) -> dict[str, list[dict[str, Any]]]:
    """Each order's one answer: every table's latest row before it in arrival order.

    ``inner`` at every table: an order without a row at some table is not written.
    """
    arrivals = sorted(
        ((line["timestamp"], role, line) for role, records in lines.items() for line in records),
        key=lambda item: item[0],
    )
    rows: dict[str, dict[str, Any]] = {table: {} for table in KEYS}
    answers: dict[str, list[dict[str, Any]]] = {}
    for _, role, line in arrivals:
        if role != "stream":
            rows[role][line["key"]] = line["value"]
            continue
        answer: dict[str, Any] | None = {"order": line["value"]}
        for table, (field, key_field) in KEYS.items():
            assert answer is not None
            found = rows[table].get(answer[field][key_field])
            if found is None:
                answer = None
                break
            answer[FIELDS[table]] = found
        if answer is not None:
            answers[line["key"]] = [answer]
    return answers


def test_plain_tables_answer_each_order_with_the_rows_before_it(
    broker: EmbeddedBroker, spark: Any, tmp_path: Path
) -> None:
    lines = merged([with_unknown_region(shop_inputs(seed, f"p{seed}-"), f"p{seed}-")
                    for seed in range(4)])  # fmt: skip
    expected = plain_model(lines)
    far = [order for order, answers in expected.items() if answers[0]["customer"]["name"] == "FAR"]
    assert 0 < len(far) < 4 * 12  # orders for her before her region's row are not written
    assert len(expected) < 4 * 36

    schema = json.loads((SCHEMAS / "order_three_tables.avsc").read_text(encoding="utf-8"))
    schema["fields"] = [f for f in schema["fields"] if f["name"] != "revision"]
    output = tmp_path / "plain_output.avsc"
    output.write_text(json.dumps(schema), encoding="utf-8")
    pipeline = derived_example(
        tmp_path,
        {
            '"order.customer_id"\nversioned = true\nrevisions = true': '"order.customer_id"',
            '"customer.region_id"\nversioned = true\nrevisions = true': '"customer.region_id"',
            '"order.product_id"\nversioned = true\nrevisions = true': '"order.product_id"',
            f'"{SCHEMAS.as_posix()}/order_three_tables.avsc"': json.dumps(output.as_posix()),
        },
    )

    assert replayed(pipeline, lines, tmp_path, broker.bootstrap_servers, 23) == expected
