"""A lookup of three tables stopped and started again on its checkpoint: every operator's state
is back, so late rows after the restart revise orders joined before it, once each.

The pipeline is examples/orders-three-tables.toml's (three chained operators and the
numbering one in one query) on the session's broker and Spark. Its inputs are
tests/joins/shop_chain.py's random orders and table changes, cut in two by Kafka timestamp
(near the middle, where a late row after the cut revises an order before it): the first
part is produced and the query runs until it has read it, then stops; the rest is
produced and a new query runs from the checkpoint. The output topic, read
``read_committed``, must hold per order exactly what the plain replay of the chain over all
the input writes: nothing lost, nothing twice, and the revisions that need the first run's
state.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from daemon.broker import EmbeddedBroker
from daemon.formats.avro.codec import AvroCodec, load_schema_file
from daemon.model.config import load_pipeline_file
from daemon.testing import by_key
from tests.joins.shop_chain import plain_chain, shop_inputs
from tests.kafka_helpers import In, client_conf, create_topic, produce, read_topic, run_pipeline

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "orders-three-tables.toml"
TOPICS = {"stream": "shop-orders", "customers": "shop-customers", "regions": "shop-regions",
          "products": "shop-products"}  # fmt: skip
SCHEMAS = {"stream": "shop_order", "customers": "shop_customer", "regions": "shop_region",
           "products": "shop_product"}  # fmt: skip
Lines = dict[str, list[dict[str, Any]]]


def _pipeline_file(broker: EmbeddedBroker, tmp_path: Path) -> Path:
    """The example on this broker, with its own topics and a checkpoint in ``tmp_path``."""
    text = EXAMPLE.read_text().replace("../schemas", (ROOT / "schemas").as_posix())
    text = text.replace('"../state/orders-three-tables"', json.dumps(str(tmp_path / "cp")))
    suffix = tmp_path.name[-8:].replace("_", "-")
    for topic in [*TOPICS.values(), "orders-three-tables"]:
        text = text.replace(f'topic = "{topic}"', f'topic = "{topic}-{suffix}"')
    text = text.replace(
        "[spark]", f'[kafka]\nbootstrap_servers = "{broker.bootstrap_servers}"\n\n[spark]'
    )
    path = tmp_path / "pipeline.toml"
    path.write_text(text)
    return path


def _cut(lines: Lines, at: int) -> tuple[Lines, Lines]:
    """The records before Kafka timestamp ``at``, and the rest."""
    first = {role: [r for r in rs if r["timestamp"] < at] for role, rs in lines.items()}
    rest = {role: [r for r in rs if r["timestamp"] >= at] for role, rs in lines.items()}
    return first, rest


def _cut_across_a_revision(lines: Lines) -> tuple[Lines, Lines]:
    """A cut nearest the middle after which a late row revises an order joined before it.

    Without one the test could not tell a restart that lost the operators' state.
    """
    expected = by_key(plain_chain(lines).outputs)
    times = sorted(r["timestamp"] for records in lines.values() for r in records)
    middle = len(times) // 2
    for at in sorted(times, key=lambda t: abs(times.index(t) - middle)):
        first, rest = _cut(lines, at)
        before = by_key(plain_chain(first).outputs)
        if any(len(expected[order]) > len(outputs) for order, outputs in before.items()):
            return first, rest
    raise AssertionError("no late row revises an order joined before it: other inputs needed")


def _produce(conf: dict[str, str], suffix: str, lines: Lines) -> None:
    for role, records in lines.items():
        codec = AvroCodec(load_schema_file(ROOT / "schemas" / f"{SCHEMAS[role]}.avsc"))
        produce(
            conf,
            f"{TOPICS[role]}-{suffix}",
            [In(codec.encode(r["value"]), r["key"].encode(), r["timestamp"]) for r in records],
        )


def test_a_restarted_chain_revises_orders_joined_before_it_once_each(
    broker: EmbeddedBroker, spark: Any, tmp_path: Path
) -> None:
    lines = shop_inputs(65)
    first, rest = _cut_across_a_revision(lines)
    expected = by_key(plain_chain(lines).outputs)
    assert set(expected) - set(by_key(plain_chain(first).outputs))  # rest has orders too

    path = _pipeline_file(broker, tmp_path)
    suffix = tmp_path.name[-8:].replace("_", "-")
    conf = client_conf(broker.bootstrap_servers)
    for topic in TOPICS.values():
        create_topic(conf, f"{topic}-{suffix}")
    file = load_pipeline_file(path)

    _produce(conf, suffix, first)
    assert run_pipeline(spark, file)
    _produce(conf, suffix, rest)
    assert run_pipeline(spark, file)  # a new query, on the first one's checkpoint

    codec = AvroCodec(load_schema_file(ROOT / "schemas" / "order_three_tables.avsc"))
    written = [
        {
            "key": None if out.key is None else out.key.decode(),
            "value": None if out.value is None else codec.decode(out.value),
        }
        for out in read_topic(conf, f"orders-three-tables-{suffix}")
    ]
    assert by_key(written) == expected
