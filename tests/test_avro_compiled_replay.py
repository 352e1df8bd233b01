"""The switch that turns the compiled Avro reader and writer off, through the real engine:
a replay decodes and encodes with fastavro alone, and writes exactly what it writes with them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from daemon.formats.avro.codec import COMPILED_ENV
from daemon.pipeline.config import load_pipeline_file
from daemon.replay import replay

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def _replay(broker: Any) -> tuple[list[Any], list[Any]]:
    # Debezium envelopes, Avro keys and a lookup: decoding and encoding of every kind.
    file = load_pipeline_file(EXAMPLES / "customer-orders.toml")
    inputs = {
        "table": EXAMPLES / "data" / "customer-changes.jsonl",
        "stream": EXAMPLES / "data" / "orders.jsonl",
    }
    result = replay(file, inputs, max_batch=3, bootstrap_servers=broker.bootstrap_servers)
    return _same_topics(result.outputs), _same_topics(result.dead_letters)


def _same_topics(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The records, their source topic's name (new in every replay) left out."""
    return [
        {**r, "headers": {k: v for k, v in r["headers"].items() if k != "enrichd.source.topic"}}
        for r in records
    ]


def test_a_replay_with_the_compiled_codec_off_writes_what_it_writes_with_it(
    broker: Any, spark: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(COMPILED_ENV, raising=False)
    compiled = _replay(broker)
    monkeypatch.setenv(COMPILED_ENV, "0")  # read where the plan's codecs are made
    fastavro_only = _replay(broker)

    outputs = compiled[0]
    assert len(outputs) == 5  # the example's orders, each with its customer or none
    assert all("enrichd.source.offset" in r["headers"] for r in outputs)
    assert fastavro_only == compiled
