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
for it; and so must a history whose customers table is a Debezium changelog with Avro keys, a
customer deleted midway (her later answers withdrawn); one whose products are priced per
region, found by a key of two parts from two records (the order's product, its customer's
region) in a table keyed by JSON Kafka keys; and one whose customers and products tables
bootstrap, their rows reaching Kafka after every order.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from daemon.model.config import Mode, load_pipeline_file
from daemon.replay import replay
from daemon.testing import by_key
from tests.joins.shop_chain import (
    REGIONAL,
    REGIONAL_ROW_KEYS,
    Lines,
    bootstrapped_late,
    derived_example,
    merged,
    plain_chain,
    priced_by_region,
    replayed,
    shop_inputs,
    write_inputs,
)

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "orders-three-tables.toml"


@pytest.fixture(scope="module")
def lines() -> dict[str, list[dict[str, Any]]]:
    return shop_inputs(65)


@pytest.mark.parametrize(
    ("max_batch", "mode"), [(None, "micro_batch"), (17, "micro_batch"), (17, "continuous")]
)
def test_three_tables_in_one_query_answer_as_the_plain_chain(
    lines: dict[str, list[dict[str, Any]]],
    max_batch: int | None,
    mode: Mode,
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

    file = load_pipeline_file(EXAMPLE)
    pipe = file.pipeline[0].model_copy(update={"mode": mode})
    result = replay(
        file.model_copy(update={"pipeline": [pipe]}),
        write_inputs(tmp_path, lines),
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

    assert replayed(EXAMPLE, lines, tmp_path, broker.bootstrap_servers, 29) == expected


CUSTOMER_CHANGE = {
    "type": "record",
    "name": "Envelope",
    "namespace": "shop.public.customers",
    "fields": [
        {
            "name": "before",
            "type": [
                "null",
                {
                    "type": "record",
                    "name": "Value",
                    "fields": [
                        {"name": "id", "type": "string"},
                        {"name": "name", "type": "string"},
                        {"name": "region_id", "type": "string"},
                        {"name": "since", "type": "long"},
                    ],
                },
            ],
            "default": None,
        },
        {"name": "after", "type": ["null", "Value"], "default": None},
        {"name": "op", "type": "string"},
    ],
}
CUSTOMER_KEY = {"type": "record", "name": "Key", "fields": [{"name": "id", "type": "string"}]}


def _as_changes(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A customers changelog as Debezium writes it: events keyed by the Avro key ``{id}``.

    A row is an insert or an update; a tombstone is a delete event and the tombstone after it.
    """
    changes = []
    for row in rows:
        key = {"id": row["key"]}
        if row["value"] is None:
            delete = {"before": None, "after": None, "op": "d"}
            changes.append({"key": key, "value": delete, "timestamp": row["timestamp"]})
            changes.append({"key": key, "value": None, "timestamp": row["timestamp"]})
        else:
            change = {"before": None, "after": row["value"], "op": "u"}
            changes.append({"key": key, "value": change, "timestamp": row["timestamp"]})
    return changes


def test_a_debezium_table_with_avro_keys_answers_as_its_rows_do(
    broker: Any, spark: Any, tmp_path: Path
) -> None:
    lines = shop_inputs(7, late_customer=True)
    # A customer is deleted midway: its later orders lose her, earlier answers are withdrawn.
    gone = lines["customers"][1]["key"]
    middle = lines["stream"][len(lines["stream"]) // 2]["timestamp"]
    deleted = {"key": gone, "value": None, "timestamp": middle}
    lines["customers"] = sorted([*lines["customers"], deleted], key=lambda r: r["timestamp"])
    for record in lines["stream"]:
        record["timestamp"] += 1 if record["timestamp"] >= middle else 0  # the delete first
    plain = plain_chain(lines)
    expected = by_key(plain.outputs)
    assert any(value is None for values in expected.values() for value in values)

    text = EXAMPLE.read_text().replace("../schemas", (ROOT / "schemas").as_posix())
    (tmp_path / "change.avsc").write_text(json.dumps(CUSTOMER_CHANGE))
    (tmp_path / "key.avsc").write_text(json.dumps(CUSTOMER_KEY))
    text = text.replace(
        f'schema = "{(ROOT / "schemas").as_posix()}/shop_customer.avsc"',
        f'schema = "{tmp_path / "change.avsc"}"\nenvelope = "debezium"\nkey_format = "avro"\n'
        f'key_schema = "{tmp_path / "key.avsc"}"',
    )
    path = tmp_path / "pipeline.toml"
    path.write_text(text)
    files = write_inputs(tmp_path, {**lines, "customers": _as_changes(lines["customers"])})

    result = replay(
        load_pipeline_file(path), files, bootstrap_servers=broker.bootstrap_servers, max_batch=23
    )

    assert result.dead_letters == []
    assert by_key(result.outputs) == expected


def test_a_composite_key_from_two_records_finds_the_price_in_the_customers_region(
    broker: Any, spark: Any, tmp_path: Path
) -> None:
    # Products priced per region, keyed in Kafka by {"id", "region"}: an order's product row is
    # found by its product and its customer's region, so a customer who moves region late
    # revises the order's price too; late price changes of one region and a delete besides.
    lines = priced_by_region(shop_inputs(3), 3)
    plain = plain_chain(lines, REGIONAL, REGIONAL_ROW_KEYS)
    expected = by_key(plain.outputs)
    assert plain.metrics["products.revisions"] > 0
    assert plain.metrics["customers.revisions"] > 0
    assert any(value is None for values in expected.values() for value in values)
    # An order whose answers change region and price: the key's parts come from two records.
    assert any(
        len({(v["customer"]["region_id"], v["product"]["price"]) for v in values if v}) > 1
        and len({v["product"]["id"] for v in values if v}) == 1
        for values in expected.values()
    )
    assert plain.dead_letters == []
    path = derived_example(
        tmp_path,
        {
            'shop_product.avsc"\nkey = "id"': (
                'shop_product.avsc"\nkey_format = "json"\n'
                'key = ["kafka_key.id", "kafka_key.region"]'
            ),
            'lookup_key = "order.product_id"': (
                'lookup_key = ["order.product_id", "customer.region_id"]'
            ),
        },
    )

    result = replay(
        load_pipeline_file(path),
        write_inputs(tmp_path, lines),
        bootstrap_servers=broker.bootstrap_servers,
        max_batch=19,
    )

    assert result.dead_letters == []
    assert by_key(result.outputs) == expected


def _as_of(rows: list[dict[str, Any]], key: str, at: int) -> dict[str, Any] | None:
    """The row of ``key`` valid at ``at`` (no tombstones here): the latest ``since`` up to
    ``at``, of ties the last in."""
    found = None
    for row in rows:
        value = row["value"]
        if row["key"] == key and value["since"] <= at:
            if found is None or value["since"] >= found["since"]:
                found = value
    return found


def test_tables_that_bootstrap_answer_orders_that_reached_kafka_before_their_rows(
    broker: Any, spark: Any, tmp_path: Path
) -> None:
    # Customers and products reach Kafka after every order (a table loaded after the events
    # it describes); both bootstrap, so a new query reads them first. Regions do not: their
    # late rows still revise.
    booted = ("customers", "products")
    lines: Lines = bootstrapped_late(shop_inputs(11), booted)
    unbooted = plain_chain(lines)  # without bootstrap every order waits for its rows
    assert unbooted.metrics["customers.unmatched"] == len(lines["stream"])
    plain = plain_chain(lines, bootstrap=booted)
    expected = by_key(plain.outputs)
    # With it, each order is answered at once with the rows valid at its time: its first
    # answer is revision 0 with its customer and product as of the order, and only regions
    # revise.
    for order in lines["stream"]:
        value = order["value"]
        first = expected[order["key"]][0]
        assert first["revision"] == 0
        assert first["customer"] == _as_of(lines["customers"], value["customer_id"], value["at"])
        assert first["product"] == _as_of(lines["products"], value["product_id"], value["at"])
    assert plain.metrics.get("customers.revisions", 0) == 0
    assert plain.metrics.get("products.revisions", 0) == 0
    assert plain.metrics["regions.revisions"] > 0
    path = derived_example(
        tmp_path,
        {
            f'input = "{role}"\nlookup_key = "order.{field}_id"': (
                f'input = "{role}"\nlookup_key = "order.{field}_id"\nbootstrap = true'
            )
            for role, field in (("customers", "customer"), ("products", "product"))
        },
    )

    result = replay(
        load_pipeline_file(path),
        write_inputs(tmp_path, lines),
        bootstrap_servers=broker.bootstrap_servers,
        max_batch=13,
    )

    assert result.dead_letters == []
    assert by_key(result.outputs) == expected
