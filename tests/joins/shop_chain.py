"""Orders and three tables' changelogs, random with late rows in every table, and their answer.

The inputs of examples/orders-three-tables.toml's pipeline (orders enriched from customers,
the customer's region and products), built so that answers are revised, and the plain replay
of the chain over them (tests/unit/joiners/chain_replay.py), which the engine's runs are to
equal per order.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from daemon.broker import EmbeddedBroker
from daemon.formats.avro.codec import AvroCodec, load_schema_file
from daemon.joiners.lookup import LookupOptions
from daemon.joiners.lookup_chain import ChainTable
from daemon.model.config import load_pipeline_file
from daemon.replay import replay
from daemon.testing import by_key
from tests.kafka_helpers import In, client_conf, create_topic, produce, read_topic
from tests.unit.joiners.chain_replay import ChainRun, ChainStream, run_chain

REVISING = LookupOptions(versioned=True, revisions=True)
TABLES = [
    ChainTable("customers", "customer", "order.customer_id", REVISING),
    ChainTable("regions", "region", "customer.region_id", REVISING),
    ChainTable("products", "product", "order.product_id", REVISING),
]
ROW_KEYS = {"customers": "id", "regions": "id", "products": "id"}
TIMES = {"stream": "at", "customers": "since", "regions": "since", "products": "since"}
Lines = dict[str, list[dict[str, Any]]]
"""Each role's records, ``{"key": ..., "value": ..., "timestamp": ...}`` as replay reads them."""
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "orders-three-tables.toml"
SCHEMAS = EXAMPLE.parents[1] / "schemas"
UNITS_PER_REGION = """
[pipeline.outputs.totals]
topic = "units-per-region"
schema = "../schemas/region_quantity.avsc"

[pipeline.options.aggregate]
group_by = "region.name"
op = "sum"
field = "order.quantity"
group_field = "region"
"""
"""Running totals for the example: units ordered per region name, following revisions."""


OUTPUT = AvroCodec(load_schema_file(SCHEMAS / "order_three_tables.avsc"))
INPUTS = {
    "stream": ("shop-orders", "shop_order"),
    "customers": ("shop-customers", "shop_customer"),
    "regions": ("shop-regions", "shop_region"),
    "products": ("shop-products", "shop_product"),
}
"""Each input's role, its topic in the example (and its recorded inputs' name), its schema."""


def example_on_topics(
    broker: EmbeddedBroker, folder: Path, changes: dict[str, str] | None = None
) -> Path:
    """The example pipeline on topics of its own (created, empty); its file.

    ``changes``: texts of the example replaced, each found once.
    """
    text = EXAMPLE.read_text().replace("../schemas", SCHEMAS.as_posix())
    for old, new in (changes or {}).items():
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    text = text.replace('"../state/orders-three-tables"', json.dumps(str(folder / "cp")))
    suffix = folder.name[-8:].replace("_", "-")
    topics = [topic for topic, _ in INPUTS.values()]
    for topic in (*topics, "orders-three-tables"):
        text = text.replace(f'topic = "{topic}"', f'topic = "{topic}-{suffix}"')
    text = text.replace(
        "[spark]", f'[kafka]\nbootstrap_servers = "{broker.bootstrap_servers}"\n\n[spark]'
    )
    path = folder / "pipeline.toml"
    path.write_text(text)
    conf = client_conf(broker.bootstrap_servers)
    for topic in topics:
        create_topic(conf, f"{topic}-{suffix}")
    return path


def produce_lines(broker: EmbeddedBroker, path: Path, lines: Lines) -> None:
    """Each role's ``lines`` produced to its input's topic in the pipeline file at ``path``."""
    (pipe,) = load_pipeline_file(path).pipeline
    conf = client_conf(broker.bootstrap_servers)
    for role, (_, schema) in INPUTS.items():
        codec = AvroCodec(load_schema_file(SCHEMAS / f"{schema}.avsc"))
        records = [
            In(codec.encode(line["value"]), line["key"].encode(), line["timestamp"])
            for line in lines.get(role, ())
        ]
        produce(conf, pipe.inputs[role].topic, records)


def written_orders(broker: EmbeddedBroker, path: Path) -> list[dict[str, Any]]:
    """What the pipeline wrote to its output so far, decoded."""
    (pipe,) = load_pipeline_file(path).pipeline
    return [
        {"key": (out.key or b"").decode(), "value": OUTPUT.decode(out.value or b"")}
        for out in read_topic(client_conf(broker.bootstrap_servers), pipe.output.topic)
    ]


def example_with(folder: Path, added: str = UNITS_PER_REGION, old: str = "", new: str = "") -> Path:
    """examples/orders-three-tables.toml with ``added`` at its end (and ``old`` made ``new``).

    Written to ``folder``, its schema paths made absolute.
    """
    text = EXAMPLE.read_text(encoding="utf-8")
    if old:
        assert old in text, old
        text = text.replace(old, new)
    path = folder / "orders-with-totals.toml"
    path.write_text((text + added).replace("../schemas", SCHEMAS.as_posix()), encoding="utf-8")
    return path


def derived_example(folder: Path, changes: dict[str, str]) -> Path:
    """examples/orders-three-tables.toml with each of ``changes`` made (each text found once).

    Written to ``folder``, its schema paths made absolute.
    """
    text = EXAMPLE.read_text(encoding="utf-8").replace("../schemas", SCHEMAS.as_posix())
    for old, new in changes.items():
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    path = folder / "pipeline.toml"
    path.write_text(text, encoding="utf-8")
    return path


def write_inputs(folder: Path, lines: Lines) -> dict[str, Path]:
    """Each role's lines as a replay input file in ``folder``, by role."""
    files = {}
    for role, records in lines.items():
        path = folder / f"{role}.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
        files[role] = path
    return files


def shop_inputs(seed: int, prefix: str = "", *, late_customer: bool = False) -> Lines:
    """Orders and the three tables' changelogs, each record with its own Kafka timestamp.

    Every key has a row from time 0 on, written first; then orders and table changes take
    turns at random. A change is valid from a time before the latest orders (``since`` up to
    60 ms back), so it reaches Kafka late for them; some customers change region. Every key
    and id starts with ``prefix``, so that several histories can share topics, each in its own
    key space. ``late_customer``: one more customer is ordered for from the start, but its
    first row (valid from time 0) reaches Kafka only after a third of the orders.
    """
    rng = random.Random(seed)  # noqa: S311 - test data, not security
    lines: dict[str, list[dict[str, Any]]] = {
        "stream": [],
        "customers": [],
        "regions": [],
        "products": [],
    }
    clock = iter(range(1, 10_000))

    def put(role: str, key: str, value: dict[str, Any]) -> None:
        lines[role].append({"key": key, "value": value, "timestamp": next(clock)})

    regions = [f"{prefix}{name}" for name in ("north", "south", "east")]
    products = [f"{prefix}p{n}" for n in range(3)]
    customers = {f"{prefix}c{n}": regions[n % 3] for n in range(4)}
    for name in regions:
        put("regions", name, {"id": name, "name": name.title(), "manager": "m0", "since": 0})
    for cid, where in customers.items():
        put("customers", cid, {"id": cid, "name": cid.upper(), "region_id": where, "since": 0})
    for pid in products:
        put("products", pid, {"id": pid, "title": pid, "price": 10, "since": 0})
    late = f"{prefix}c-late"
    ordered = [*customers, late] if late_customer else list(customers)
    at = 100
    for n in range(36):
        at += rng.randint(5, 15)
        if late_customer and n == 12:
            put("customers", late, {"id": late, "name": "LATE", "region_id": regions[0],
                                    "since": 0})  # fmt: skip
        order = {
            "id": f"{prefix}o{n}",
            "customer_id": rng.choice(ordered),
            "product_id": rng.choice(products),
            "quantity": n,
            "at": at,
        }
        put("stream", f"{prefix}o{n}", order)
        if n % 2 == 1:  # a late change of each table in turn
            since = at - rng.randint(1, 60)
            table = ("customers", "regions", "products")[(n // 2) % 3]
            if table == "customers":
                cid = rng.choice(list(customers))
                customers[cid] = rng.choice(regions)
                put(table, cid, {"id": cid, "name": f"{cid}-{n}", "region_id": customers[cid],
                                 "since": since})  # fmt: skip
            elif table == "regions":
                name = rng.choice(regions)
                put(table, name, {"id": name, "name": name.title(), "manager": f"m{n}",
                                  "since": since})  # fmt: skip
            else:
                pid = rng.choice(products)
                put(table, pid, {"id": pid, "title": pid, "price": 10 + n, "since": since})
    return lines


REGIONAL = [
    *TABLES[:2],
    ChainTable("products", "product", ("order.product_id", "customer.region_id"), REVISING),
]
"""The tables when products are priced per region: a product's row is found by the order's
product and the region of the order's customer, a key of two parts from two records."""
REGIONAL_ROW_KEYS = {**ROW_KEYS, "products": ["kafka_key.id", "kafka_key.region"]}
"""Each table's own key when products are keyed in Kafka by ``{"id": ..., "region": ...}``."""


def priced_by_region(lines: Lines, seed: int) -> Lines:
    """``lines`` with each product priced per region, keyed by a JSON ``{id, region}``.

    Each first product row becomes one row per region, each with its own price; each later
    change of a product applies to one region, chosen at random. The product in the first
    region is deleted (a tombstone, keyed as its rows) at the Kafka time of the middle order,
    just after it.
    """
    rng = random.Random(seed)  # noqa: S311 - test data, not security
    regions = list(dict.fromkeys(line["key"] for line in lines["regions"]))
    rows = []
    for line in lines["products"]:
        value = line["value"]
        first = value["since"] == 0
        for n, region in enumerate(regions if first else [rng.choice(regions)]):
            price = {**value, "price": value["price"] + 100 * n}
            key = {"id": value["id"], "region": region}
            rows.append({"key": key, "value": price, "timestamp": line["timestamp"]})
    middle = lines["stream"][len(lines["stream"]) // 2]
    gone = {"id": middle["value"]["product_id"], "region": regions[0]}
    rows.append({"key": gone, "value": None, "timestamp": middle["timestamp"]})
    rows.sort(key=lambda r: r["timestamp"])
    return {**lines, "products": rows}


def bootstrapped_late(lines: Lines, roles: tuple[str, ...]) -> Lines:
    """``lines`` with every record of ``roles`` produced after the last order, in its order.

    Their ``since`` stays: the rows are valid when the orders were placed, but reach Kafka
    only after them, as a table loaded after the events it describes.
    """
    last = max(line["timestamp"] for line in lines["stream"])
    return {
        role: [{**line, "timestamp": line["timestamp"] + last} for line in records]
        if role in roles
        else records
        for role, records in lines.items()
    }


def replayed(
    pipeline: Path, lines: Lines, folder: Path, servers: str, max_batch: int
) -> dict[str, list[Any]]:
    """The engine's outputs per key over ``lines``, in micro-batches of ``max_batch`` records.

    Checked on the way: no dead letter, and as many micro-batches as the cap makes.
    """
    result = replay(
        load_pipeline_file(pipeline),
        write_inputs(folder, lines),
        bootstrap_servers=servers,
        max_batch=max_batch,
    )
    assert result.dead_letters == []
    assert result.batches >= sum(map(len, lines.values())) // max_batch
    return by_key(result.outputs)


def merged(histories: list[Lines]) -> Lines:
    """Several histories' lines in one set of inputs, interleaved by Kafka timestamp."""
    return {
        role: sorted((r for h in histories for r in h[role]), key=lambda r: r["timestamp"])
        for role in histories[0]
    }


def plain_chain(
    lines: Lines,
    tables: list[ChainTable] = TABLES,
    row_keys: dict[str, Any] = ROW_KEYS,
    bootstrap: tuple[str, ...] = (),
    *,
    end: bool = True,
) -> ChainRun:
    """The chain's plain replay over ``lines``: what the engine is to write.

    ``tables`` and ``row_keys``: the chain and each table's own key (default: the example's);
    ``bootstrap``: the tables read first; ``end``: let every stage out at the end of input
    (as replay's end-of-input markers do), else stop after the last record.
    """
    return run_chain(
        ChainStream("stream", "order", "at"),
        tables,
        lines,
        row_keys=row_keys,
        times=TIMES,
        bootstrap=bootstrap,
        end=end,
    )
