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
customer deleted midway (her later answers withdrawn).
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
    files = _write(tmp_path, {**lines, "customers": _as_changes(lines["customers"])})

    result = replay(
        load_pipeline_file(path), files, bootstrap_servers=broker.bootstrap_servers, max_batch=23
    )

    assert result.dead_letters == []
    assert by_key(result.outputs) == expected
