"""``daemon state`` of a lookup of several tables: each operator's state under its table.

The example pipeline (examples/orders-three-tables.toml) runs through the real engine over
its recorded inputs, on the session's broker and Spark, and stops; ``daemon state`` then reads
each operator's state. A customer's key is held by the customers operator only, a region's
by the regions operator only: the operators are read in the order Spark numbers them. After
the end of input for every key, the numbering operator holds no order any more.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from daemon.broker import EmbeddedBroker
from daemon.formats.avro.codec import AvroCodec, load_schema_file
from daemon.model.config import load_pipeline_file
from daemon.model.wire import END_OF_INPUT_HEADERS
from daemon.pipeline.checkpoint_shape import check_checkpoint
from tests.kafka_helpers import In, client_conf, create_topic, produce, read_topic, run_pipeline
from tests.state_helpers import daemon

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "orders-three-tables.toml"
INPUTS = {
    "shop-orders": ("shop_order", "shop-orders"),
    "shop-customers": ("shop_customer", "shop-customers"),
    "shop-regions": ("shop_region", "shop-regions"),
    "shop-products": ("shop_product", "shop-products"),
}


def _example(broker: EmbeddedBroker, folder: Path, changes: dict[str, str] | None = None) -> Path:
    """The example pipeline on topics of its own, its recorded inputs produced; its file.

    ``changes``: texts of the example replaced, each found once.
    """
    text = EXAMPLE.read_text().replace("../schemas", (ROOT / "schemas").as_posix())
    for old, new in (changes or {}).items():
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    text = text.replace('"../state/orders-three-tables"', json.dumps(str(folder / "cp")))
    suffix = folder.name[-8:].replace("_", "-")
    for topic in (*INPUTS, "orders-three-tables"):
        text = text.replace(f'topic = "{topic}"', f'topic = "{topic}-{suffix}"')
    text = text.replace(
        "[spark]", f'[kafka]\nbootstrap_servers = "{broker.bootstrap_servers}"\n\n[spark]'
    )
    path = folder / "pipeline.toml"
    path.write_text(text)
    conf = client_conf(broker.bootstrap_servers)
    for topic, (schema, data) in INPUTS.items():
        codec = AvroCodec(load_schema_file(ROOT / "schemas" / f"{schema}.avsc"))
        create_topic(conf, f"{topic}-{suffix}")
        records = [
            In(codec.encode(line["value"]), line["key"].encode(), line["timestamp"])
            for line in _lines(data)
        ]
        produce(conf, f"{topic}-{suffix}", records)
    return path


def _lines(data: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (ROOT / "examples" / "data" / f"{data}.jsonl").open()]


def test_state_shows_each_table_operators_keys(
    broker: EmbeddedBroker, spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Each table's keys expire by its own state_ttl, which its operator's state shows.
    ttls = {"customers": "1d", "products": "2d"}
    path = _example(
        broker,
        tmp_path,
        {
            f'input = "{table}"\nlookup_key = "order.{table[:-1]}_id"': (
                f'input = "{table}"\nlookup_key = "order.{table[:-1]}_id"\nstate_ttl = "{ttl}"'
            )
            for table, ttl in ttls.items()
        },
    )
    file = load_pipeline_file(path)
    check_checkpoint(file.pipeline[0])  # as a start does: daemon state reads the shape
    assert run_pipeline(spark, file)

    done = daemon(capsys, "state", str(path), "--key", "ada")
    assert done.code == 0, done.err
    operators = json.loads(done.out)["operators"]
    assert list(operators) == ["customers", "regions", "products", "numbering"]
    assert operators["customers"] is not None
    assert "south" in json.dumps(operators["customers"])  # her move, valid from 2500
    assert operators["regions"] is None and operators["products"] is None
    customer = operators["customers"]
    assert customer["expires_ms"] == customer["updated_ms"] + 86_400_000

    done = daemon(capsys, "state", str(path), "--key", "p1")
    product = json.loads(done.out)["operators"]["products"]
    assert product["expires_ms"] == product["updated_ms"] + 2 * 86_400_000

    done = daemon(capsys, "state", str(path), "--key", "north")
    operators = json.loads(done.out)["operators"]
    assert operators["regions"] is not None and "Noor" in json.dumps(operators["regions"])
    assert operators["customers"] is None and operators["products"] is None

    done = daemon(capsys, "state", str(path), "--summary")
    assert done.code == 0, done.err
    summary = json.loads(done.out)["operators"]
    assert set(summary) == {"customers", "regions", "products", "numbering"}


def test_after_the_end_of_input_for_every_key_the_numbering_holds_no_order(
    broker: EmbeddedBroker, spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _example(broker, tmp_path)
    file = load_pipeline_file(path)
    (pipe,) = file.pipeline
    check_checkpoint(pipe)
    assert run_pipeline(spark, file)
    # Each order is kept for revisions, at every stage and by the numbering.
    assert _keys(capsys, path) == {"customers": 2, "regions": 2, "products": 2, "numbering": 3}
    conf = client_conf(broker.bootstrap_servers)
    written = [(out.key, out.value) for out in read_topic(conf, pipe.output.topic)]
    assert len(written) == 6  # three answers and a revision by a late row of each table

    # The end of input for every join key, as `daemon replay` marks it: on the orders'
    # topic, keyed by the join key, after every record.
    keys = {line["key"] for data in ("shop-customers", "shop-regions", "shop-products")
            for line in _lines(data)}  # fmt: skip
    newest = max(line["timestamp"] for _, data in INPUTS.values() for line in _lines(data))
    markers = [In(None, key.encode(), newest, headers=END_OF_INPUT_HEADERS) for key in keys]
    produce(conf, pipe.inputs["stream"].topic, markers)
    assert run_pipeline(spark, file)

    # The stages dropped what they kept for each order and told the numbering, which forgot
    # every order. The stages keep their tables' rows, for records after the end, and each
    # key's end (every marker reaches every stage). Nothing more is written.
    assert _keys(capsys, path) == {"customers": 6, "regions": 6, "products": 6, "numbering": 0}
    assert [(out.key, out.value) for out in read_topic(conf, pipe.output.topic)] == written


def _keys(capsys: pytest.CaptureFixture[str], path: Path) -> dict[str, int]:
    """How many keys each operator's state holds, as ``daemon state --summary`` says."""
    done = daemon(capsys, "state", str(path), "--summary")
    assert done.code == 0, done.err
    return {name: found["keys"] for name, found in json.loads(done.out)["operators"].items()}
