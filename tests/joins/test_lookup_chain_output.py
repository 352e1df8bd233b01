"""A lookup of three tables with a `select` and `headers = "all"`, through the real engine.

The example's pipeline (tests/joins/shop_pipeline.py) writes a flat record chosen by a
`select`: the order's id, its customer's and region's names, the region's manager, the
product's price and the revision. Every input record has a `tenant` header, an order's its
own and a table row's another, and each output must carry exactly its order's headers, as
docs/semantics.md's Headers says: a revision too, though a late table row caused it. The
values must equal the plain replay of the chain's answers with the select applied, per order.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from daemon.broker import EmbeddedBroker
from daemon.testing import by_key
from tests.joins.shop_chain import plain_chain, shop_inputs
from tests.joins.shop_pipeline import ShopPipeline
from tests.kafka_helpers import run_pipeline

SELECT = """
[pipeline.select]
order_id = "order.id"
customer = "customer.name"
region = "region.name"
manager = "region.manager"
price = "product.price"
revision = "revision"
"""
FLAT = {
    "type": "record",
    "name": "FlatShopOrder",
    "fields": [
        {"name": "order_id", "type": "string"},
        {"name": "customer", "type": "string"},
        {"name": "region", "type": "string"},
        {"name": "manager", "type": "string"},
        {"name": "price", "type": "long"},
        {"name": "revision", "type": "int"},
    ],
}


def _selected(answer: dict[str, Any] | None) -> dict[str, Any] | None:
    """The select applied to one of the plain chain's answers."""
    if answer is None:
        return None
    return {
        "order_id": answer["order"]["id"],
        "customer": answer["customer"]["name"],
        "region": answer["region"]["name"],
        "manager": answer["region"]["manager"],
        "price": answer["product"]["price"],
        "revision": answer["revision"],
    }


def _tenant(role: str, value: dict[str, Any]) -> list[tuple[str, bytes]]:
    """An order's own tenant header; a table row's names the row."""
    if role == "stream":
        return [("tenant", f"of-{value['id']}".encode())]
    return [("tenant", f"row-{role}-{value['id']}".encode())]


def test_a_chain_writes_the_selected_fields_with_its_orders_headers(
    broker: EmbeddedBroker, spark: Any, tmp_path: Path
) -> None:
    lines = shop_inputs(65)
    plain = by_key(plain_chain(lines).outputs)
    expected = {order: [_selected(a) for a in answers] for order, answers in plain.items()}
    assert any(len(answers) > 1 for answers in expected.values())  # revisions are written

    schema = tmp_path / "flat.avsc"
    schema.write_text(json.dumps(FLAT))
    shop = ShopPipeline.on(
        broker, tmp_path, settings='headers = "all"', tail=SELECT, output_schema=schema
    )
    shop.produce(lines, headers=_tenant)
    assert run_pipeline(spark, shop.file())

    written = shop.written()
    assert by_key(written) == expected
    carried = {(out["key"], out["headers"].get("tenant")) for out in written}
    assert carried == {(order, f"of-{order}".encode()) for order in expected}
