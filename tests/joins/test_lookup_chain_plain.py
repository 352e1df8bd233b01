"""A lookup of three plain tables (neither versioned nor revising) through the real engine.

A plain stage answers a key's orders from its state alone when the key gets no row in the
call (:meth:`daemon.plugin.Chain.reader`), beside the apply loop; a key that gets a row, or
has none in an ``inner`` stage, goes through the loop. Both must give what docs/semantics.md
says of an unversioned chain: each order joins, at every table, the latest row that arrived
before it (arrival order at every stage), whatever the micro-batches. The plain model below
says that in a few lines. One run in small micro-batches holds every case, each history in
its own key space:

- four histories where some orders are for a customer whose region has no row until a third
  of the orders are in, so the region stage withdraws them (``inner``) and later answers them;
- one where some orders are for a product that never has a row: products are in ``left``
  mode with a ``default`` row, which answers them;
- one where some orders do not decode (a string that is not UTF-8 in a field the source does
  not read, so they reach the first stage): each is dead-lettered as ``UndecodableRecord``
  with its bytes and headers, and the other orders of its key in the call are answered.

The same run in continuous mode, in sub-batches of the same size, must write the same: there
one lease runs every operator, and answers an order at the next stage at once where that
stage's key only reads its row and the sub-batch brings no row for it
(:meth:`daemon.operator.chain_processor.ChainProcessor.read_on`).

Every record carries a ``record`` header naming it and its history's ``tenant``; under
``headers_from = "inputs"`` an answer carries the rows' headers, the last stage's first, then
the order's, each ``tenant`` pair once, at its last place (docs/semantics.md, Headers).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from daemon.broker import EmbeddedBroker
from daemon.formats.avro.codec import AvroCodec, load_schema_file
from tests.joins.shop_chain import SCHEMAS, Lines, merged, shop_inputs
from tests.joins.shop_pipeline import ShopPipeline
from tests.kafka_helpers import DEAD_LETTER_HEADERS, run_pipeline
from tests.state_helpers import run_continuous

KEYS = {"customers": ("order", "customer_id"), "regions": ("customer", "region_id"),
        "products": ("order", "product_id")}  # fmt: skip
"""Each table's lookup key: the field of the record so far and the field in it."""
FIELDS = {"customers": "customer", "regions": "region", "products": "product"}
NO_PRODUCT = {"id": "none", "title": "no such product", "price": 0, "since": 0}
"""The products table's ``default``: a product without a row."""
Header = tuple[str, bytes]
STACK = "__streams.errors.stacktrace"
"""A dead letter's stack trace: an undecodable record's decode raised."""


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


def with_unknown_product(lines: Lines, prefix: str) -> Lines:
    """``lines`` with every fourth order for a product that never has a row."""
    orders = [
        {**line, "value": {**line["value"], "product_id": f"{prefix}p-none"}} if n % 4 == 1
        else line
        for n, line in enumerate(lines["stream"])
    ]  # fmt: skip
    return {**lines, "stream": orders}


def with_undecodable_orders(lines: Lines) -> Lines:
    """``lines`` with every fifth order's bytes not a record: its id's last byte not UTF-8.

    The bytes keep their length, so the source, which reads only the customer and the time
    from them and steps over the id, routes the order to the first stage, whose decode fails.
    The order after each is for the same customer, so that the two meet in one call.
    """
    codec = AvroCodec(load_schema_file(SCHEMAS / "shop_order.avsc"))
    orders = []
    for n, line in enumerate(lines["stream"]):
        if n % 5 == 3:
            customer = orders[-1]["value"]["customer_id"]
            line = {**line, "value": {**line["value"], "customer_id": customer}}
        if n % 5 == 2:
            order_id = line["value"]["id"].encode()
            bad = codec.encode(line["value"]).replace(order_id, order_id[:-1] + b"\xff", 1)
            line = {**line, "bytes": bad}
        orders.append(line)
    return {**lines, "stream": orders}


def name_of(role: str, value: dict[str, Any]) -> str:
    """A record's name, unique in the run: its input and every field of its value."""
    return "/".join([role, *map(str, value.values())])


def headers_of(role: str, value: dict[str, Any]) -> list[Header]:
    """The headers a record is produced with: its name, then its history's tenant."""
    tenant = str(value["id"]).split("-", 1)[0]
    return [("record", name_of(role, value).encode()), ("tenant", tenant.encode())]


def merged_headers(*records: list[Header]) -> list[Header]:
    """The records' headers in order, a pair that occurs more than once at its last place."""
    pairs = [pair for headers in records for pair in headers]
    return [pair for n, pair in enumerate(pairs) if pair not in pairs[n + 1 :]]


def plain_model(lines: Lines) -> dict[str, list[tuple[dict[str, Any], list[Header]]]]:
    """Each order's one answer and its headers: every table's latest row before it in arrival
    order, the last stage's headers first.

    ``inner`` at customers and regions: an order without a row there is not written; ``left``
    at products, with :data:`NO_PRODUCT` for a product without a row (whose headers are none).
    An order that does not decode (``"bytes"``) is not written either.
    """
    arrivals = sorted(
        ((line["timestamp"], role, line) for role, records in lines.items() for line in records),
        key=lambda item: item[0],
    )
    rows: dict[str, dict[str, Any]] = {table: {} for table in KEYS}
    answers: dict[str, list[tuple[dict[str, Any], list[Header]]]] = {}
    for _, role, line in arrivals:
        if role != "stream":
            rows[role][line["key"]] = line["value"]
            continue
        if "bytes" in line:
            continue
        answer: dict[str, Any] | None = {"order": line["value"]}
        carried = [headers_of("stream", line["value"])]
        for table, (field, key_field) in KEYS.items():
            assert answer is not None
            found = rows[table].get(answer[field][key_field])
            if found is None and table != "products":
                answer = None
                break
            answer[FIELDS[table]] = found or NO_PRODUCT
            carried.insert(0, headers_of(table, found) if found else [])
        if answer is not None:
            answers[line["key"]] = [(answer, merged_headers(*carried))]
    return answers


@pytest.mark.parametrize("mode", ["micro_batch", "continuous"])
def test_plain_tables_answer_each_order_with_the_rows_before_it(
    mode: str, broker: EmbeddedBroker, spark: Any, tmp_path: Path
) -> None:
    histories = [with_unknown_region(shop_inputs(seed, f"p{seed}-"), f"p{seed}-")
                 for seed in range(4)]  # fmt: skip
    histories.append(with_unknown_product(shop_inputs(4, "d4-"), "d4-"))
    histories.append(with_undecodable_orders(shop_inputs(5, "u5-")))
    lines = merged(histories)
    expected = plain_model(lines)
    far = [
        order for order, [(answer, _)] in expected.items() if answer["customer"]["name"] == "FAR"
    ]
    assert 0 < len(far) < 4 * 12  # orders for her before her region's row are not written
    assert len([order for order in expected if order.startswith("p")]) < 4 * 36
    defaulted = [
        order for order, [(answer, _)] in expected.items() if answer["product"] == NO_PRODUCT
    ]
    assert len(defaulted) == 9
    undecodable = [line for line in lines["stream"] if "bytes" in line]
    assert len(undecodable) == 7

    schema = json.loads((SCHEMAS / "order_three_tables.avsc").read_text(encoding="utf-8"))
    schema["fields"] = [f for f in schema["fields"] if f["name"] != "revision"]
    output = tmp_path / "plain_output.avsc"
    output.write_text(json.dumps(schema), encoding="utf-8")
    no_product = ", ".join(f"{name} = {json.dumps(value)}" for name, value in NO_PRODUCT.items())
    shop = ShopPipeline.on(
        broker,
        tmp_path,
        settings=(
            f'headers = "all"\nheaders_from = "inputs"\nmax_records_per_batch = 23\nmode = "{mode}"'
        ),
        output_schema=output,
        changes={
            '"order.customer_id"\nversioned = true\nrevisions = true': '"order.customer_id"',
            '"customer.region_id"\nversioned = true\nrevisions = true': '"customer.region_id"',
            '"order.product_id"\nversioned = true\nrevisions = true': (
                f'"order.product_id"\nmode = "left"\ndefault = {{ {no_product} }}'
            ),
        },
    )
    shop.produce(lines, headers=headers_of)
    if mode == "continuous":  # each sub-batch of 23 records reads its orders on where it can
        answers = sum(map(len, expected.values()))
        run_continuous(
            spark,
            shop.path,
            broker.bootstrap_servers,
            lambda: len(shop.written()) >= answers and len(shop.dead_letters()) >= 7,
        )
    else:
        assert len(run_pipeline(spark, shop.file())) >= sum(map(len, lines.values())) // 23

    written: dict[str, list[tuple[dict[str, Any], list[Header]]]] = {}
    for out in shop.written():
        carried = [pair for pair in out["header_list"] if not pair[0].startswith("enrichd.")]
        assert out["header_list"][: len(carried)] == carried  # enrichd's own come after
        written.setdefault(out["key"], []).append((out["value"], carried))
    assert written == expected

    letters = shop.dead_letters()
    dead = {letter.key: letter for letter in letters}
    assert len(letters) == len(undecodable)
    assert sorted(dead) == sorted(line["key"].encode() for line in undecodable)
    for line in undecodable:
        letter = dead[line["key"].encode()]
        assert letter.value == line["bytes"]
        # Its own headers first, as it had them; then enrichd's and KIP-1034's, saying why.
        assert letter.header_list[:2] == headers_of("stream", line["value"])
        assert {name for name, _ in letter.header_list[2:]} == {*DEAD_LETTER_HEADERS, STACK}
        assert letter.headers["enrichd.source.topic"] == f"shop-orders-{shop.suffix}".encode()
        assert letter.headers["enrichd.source.offset"] == str(lines["stream"].index(line)).encode()
        assert letter.headers["enrichd.error.class"] == b"UndecodableRecord"
        assert letter.headers["__streams.errors.exception"] == b"ValueError"
        assert b"UnicodeDecodeError" in letter.headers["enrichd.error.message"]
