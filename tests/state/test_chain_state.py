"""``daemon state`` of a lookup of several tables: each operator's state under its table.

The example pipeline (examples/orders-three-tables.toml) runs through the real engine over
its recorded inputs, on the session's broker and Spark, and stops; ``daemon state`` then reads
each operator's state. A customer's key is held by the customers operator only, a region's
by the regions operator only: the operators are read in the order Spark numbers them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from daemon.broker import EmbeddedBroker
from daemon.formats.avro.codec import AvroCodec, load_schema_file
from daemon.model.config import load_pipeline_file
from daemon.pipeline.checkpoint_shape import check_checkpoint
from tests.kafka_helpers import In, client_conf, create_topic, produce, run_pipeline
from tests.state_helpers import daemon

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "orders-three-tables.toml"
INPUTS = {
    "shop-orders": ("shop_order", "shop-orders"),
    "shop-customers": ("shop_customer", "shop-customers"),
    "shop-regions": ("shop_region", "shop-regions"),
    "shop-products": ("shop_product", "shop-products"),
}


def test_state_shows_each_table_operators_keys(
    broker: EmbeddedBroker, spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = EXAMPLE.read_text().replace("../schemas", (ROOT / "schemas").as_posix())
    text = text.replace('"../state/orders-three-tables"', json.dumps(str(tmp_path / "cp")))
    suffix = tmp_path.name[-8:].replace("_", "-")
    for topic in INPUTS:
        text = text.replace(f'topic = "{topic}"', f'topic = "{topic}-{suffix}"')
    text = text.replace(
        "[spark]", f'[kafka]\nbootstrap_servers = "{broker.bootstrap_servers}"\n\n[spark]'
    )
    path = tmp_path / "pipeline.toml"
    path.write_text(text)
    conf = client_conf(broker.bootstrap_servers)
    for topic, (schema, data) in INPUTS.items():
        codec = AvroCodec(load_schema_file(ROOT / "schemas" / f"{schema}.avsc"))
        lines = [json.loads(line) for line in (ROOT / "examples" / "data" / f"{data}.jsonl").open()]
        create_topic(conf, f"{topic}-{suffix}")
        records = [
            In(codec.encode(line["value"]), line["key"].encode(), line["timestamp"])
            for line in lines
        ]
        produce(conf, f"{topic}-{suffix}", records)

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

    done = daemon(capsys, "state", str(path), "--key", "north")
    operators = json.loads(done.out)["operators"]
    assert operators["regions"] is not None and "Noor" in json.dumps(operators["regions"])
    assert operators["customers"] is None and operators["products"] is None

    done = daemon(capsys, "state", str(path), "--summary")
    assert done.code == 0, done.err
    summary = json.loads(done.out)["operators"]
    assert set(summary) == {"customers", "regions", "products", "numbering"}
