"""``daemon state``, ``rescale`` and ``reset --keep-state`` of a lookup of several tables.

The example pipeline (examples/orders-three-tables.toml) runs through the real engine over
its recorded inputs, on the session's broker and Spark, and stops; ``daemon state`` then reads
each operator's state. A customer's key is held by the customers operator only, a region's
by the regions operator only: the operators are read in the order Spark numbers them. After
the end of input for every key, the numbering operator holds no order any more.

A rescale into other buckets, and a reset that keeps the state, move each operator's state
into its own operator of the new checkpoint, and a rescale into continuous mode into its own
map state of the lease: the pipeline, stopped three times, writes what the plain replay of
the chain writes over all its inputs at once (tests/joins/shop_chain.py).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from daemon.broker import EmbeddedBroker
from daemon.model.config import load_pipeline_file
from daemon.model.record_route import bucket_labels
from daemon.model.wire import END_OF_INPUT_HEADERS
from daemon.pipeline.checkpoint_shape import check_checkpoint
from daemon.testing import by_key
from tests.joins.shop_chain import (
    INPUTS,
    Lines,
    example_on_topics,
    merged,
    plain_chain,
    produce_lines,
    shop_inputs,
    written_orders,
)
from tests.kafka_helpers import In, client_conf, produce, read_topic, run_pipeline
from tests.state_helpers import daemon, run_continuous

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "orders-three-tables.toml"


def _example(broker: EmbeddedBroker, folder: Path, changes: dict[str, str] | None = None) -> Path:
    """The example pipeline on topics of its own, its recorded inputs produced; its file.

    ``changes``: texts of the example replaced, each found once.
    """
    path = example_on_topics(broker, folder, changes)
    produce_lines(broker, path, {role: _lines(topic) for role, (topic, _) in INPUTS.items()})
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
    newest = max(line["timestamp"] for data, _ in INPUTS.values() for line in _lines(data))
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


def test_a_rescale_and_a_reset_keeping_state_move_each_operators_state_into_its_own(
    broker: EmbeddedBroker, spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Orders and late rows of every table, in four parts: the first run in 8 buckets, a
    rescale into 4, the second run, a reset to the latest offsets keeping the state, the third
    run, a rescale into continuous mode, the fourth run, stopped as ``daemon run`` stops.
    Each part's late rows revise orders of the part before, which only the state kept for
    them at every stage and by the numbering can do; so the outputs equal, per order, the
    plain replay of the chain over all the inputs in one go. (One pipeline for the three
    commands: each query start costs seconds.)"""
    lines = shop_inputs(65)
    expected = by_key(plain_chain(lines, end=False).outputs)
    path = example_on_topics(broker, tmp_path)
    text = path.read_text()
    path.write_text(text.replace("[[pipeline]]\n", "[[pipeline]]\nstate_buckets = 8\n", 1))
    first, second, third, fourth = _parts(lines)

    produce_lines(broker, path, first)
    _run(spark, path)
    before = _keys(capsys, path)
    assert before["numbering"] > 0 and all(before.values()), before

    path.write_text(text.replace("[[pipeline]]\n", "[[pipeline]]\nstate_buckets = 4\n", 1))
    done = daemon(capsys, "rescale", str(path), "--yes")
    assert done.code == 0, done.err
    assert "from 8 buckets over" in done.out and "into 4 buckets over" in done.out
    assert "each of its 4 operators' into its own" in done.out
    seeded = json.loads(daemon(capsys, "state", str(path), "--summary").out)
    assert seeded["micro_batch"] is None  # read from the seed, before the next start
    moved = seeded["operators"]
    assert {name: found["keys"] for name, found in moved.items()} == before
    labels = {bucket["bucket"] for found in moved.values() for bucket in found["buckets"]}
    assert labels <= set(bucket_labels(4))

    produce_lines(broker, path, second)
    _run(spark, path)
    done = daemon(capsys, "reset", str(path), "--to", "latest", "--keep-state", "--yes")
    assert done.code == 0, done.err
    assert "state kept, each of its 4 operators' into its own" in done.out
    produce_lines(broker, path, third)
    _run(spark, path)
    before = _keys(capsys, path)

    path.write_text(
        text.replace(
            "[[pipeline]]\n",
            '[[pipeline]]\nstate_buckets = 4\nmode = "continuous"\nlong_batch = "10m"\n',
            1,
        )
    )
    done = daemon(capsys, "rescale", str(path), "--yes")
    assert done.code == 0, done.err
    assert "in micro-batch mode into 4 buckets over" in done.out
    assert "in continuous mode, 1 lease" in done.out
    assert "each of its 4 operators' into its own" in done.out
    produce_lines(broker, path, fourth)
    outputs = len(plain_chain(lines, end=False).outputs)
    run_continuous(
        spark, path, broker.bootstrap_servers, lambda: len(written_orders(broker, path)) >= outputs
    )
    after = _keys(capsys, path)  # each operator's, from the lease's map state of it
    assert set(after) == set(before) and all(after.values()), after

    written = written_orders(broker, path)
    assert by_key(written) == expected
    # The inputs revise across each stop: rows after it change orders answered before it.
    for stopped in ([first], [first, second], [first, second, third]):
        answered = by_key(plain_chain(merged(stopped), end=False).outputs)
        assert sum(len(expected[order]) > len(was) for order, was in answered.items()) == 2


def _run(spark: Any, path: Path) -> None:
    """Run the pipeline until it has read everything, as ``daemon run`` would start it."""
    file = load_pipeline_file(path)
    check_checkpoint(file.pipeline[0])
    assert run_pipeline(spark, file)


def _parts(lines: Lines) -> tuple[Lines, Lines, Lines, Lines]:
    """``lines`` cut into four parts by Kafka time: at the 10th, 25th and 32nd order.

    There, shop_inputs(65) has two orders each that rows of the next part revise.
    """
    first, second, third = (lines["stream"][at]["timestamp"] for at in (9, 24, 31))

    def between(low: int, high: int) -> Lines:
        return {
            role: [line for line in records if low <= line["timestamp"] < high]
            for role, records in lines.items()
        }

    return (
        between(0, first),
        between(first, second),
        between(second, third),
        between(third, 10**9),
    )
