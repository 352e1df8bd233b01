"""Debezium change-data-capture tables (`envelope = "debezium"`) through replay, the real broker
and the Spark engine: the table side of `lookup` (the customer-orders example), both sides of
`table`, the one side of `comap`. Snapshot reads, inserts and updates set a row; a delete
(op "d", and the tombstone Debezium writes after it) removes it, routed by its Avro key."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from daemon.broker import EmbeddedBroker
from daemon.demos import latest_by_key
from daemon.formats.avro.codec import COMPILED_ENV
from daemon.model.config import load_pipeline_file
from daemon.replay import replay
from tests.kafka_helpers import replay_files

ROOT = Path(__file__).resolve().parents[2]
SCHEMAS = ROOT / "schemas"
EXAMPLE = ROOT / "examples" / "customer-orders.toml"
DATA = ROOT / "examples" / "data"


def test_orders_meet_each_customer_row_as_the_table_held_it(
    broker: EmbeddedBroker, spark: Any
) -> None:
    """The example: snapshot rows for Ada and Bob, Ada's update, Bob's delete (op "d" and the
    tombstone after it), Cy's insert, and orders in between (with the compiled Avro reader and
    writer; the flat-orders test below runs the same inputs with fastavro alone)."""
    result = replay(
        load_pipeline_file(EXAMPLE),
        {"table": DATA / "customer-changes.jsonl", "stream": DATA / "orders.jsonl"},
        bootstrap_servers=broker.bootstrap_servers,
    )
    customers = {r["key"]: r["value"]["customer"] for r in result.outputs}
    assert customers == {
        "o-1": {"id": 1, "name": "Ada", "tier": "gold"},  # a snapshot row
        "o-2": {"id": 2, "name": "Bob", "tier": "silver"},
        "o-3": {"id": 1, "name": "Ada", "tier": "platinum"},  # after her update
        "o-4": None,  # Bob was deleted before this order
        "o-5": {"id": 3, "name": "Cy", "tier": "bronze"},  # an insert
    }
    assert result.dead_letters == []


def test_the_flat_orders_example_writes_the_record_its_select_makes(
    broker: EmbeddedBroker, spark: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same inputs through ``examples/flat-orders.toml``: a select flattens each order
    and its customer's name and tier into one record (a spread, a path, a default for a
    missing customer, a constant, the Kafka timestamp), and each order's trace context goes
    on in its output (``tenant``, another header of o-1, does not: the policy is "trace").

    With the compiled Avro reader and writer switched off (``ENRICHD_AVRO_COMPILED=0``, read
    where the plan's codecs are made): fastavro alone gives the same customers as the compiled
    run above, with no replay of its own.
    """
    monkeypatch.setenv(COMPILED_ENV, "0")
    result = replay(
        load_pipeline_file(ROOT / "examples" / "flat-orders.toml"),
        {"table": DATA / "customer-changes.jsonl", "stream": DATA / "orders.jsonl"},
        bootstrap_servers=broker.bootstrap_servers,
    )
    orders = {
        json.loads(line)["key"]: json.loads(line)
        for line in (DATA / "orders.jsonl").read_text(encoding="utf-8").splitlines()
    }

    def flat(key: str, name: str | None, tier: str) -> dict[str, Any]:
        order = orders[key]
        return {
            **order["value"],
            "customer_name": name,
            "tier": tier,
            "channel": "web",
            "ordered_at": order["timestamp"],
        }

    assert {r["key"]: r["value"] for r in result.outputs} == {
        "o-1": flat("o-1", "Ada", "gold"),
        "o-2": flat("o-2", "Bob", "silver"),
        "o-3": flat("o-3", "Ada", "platinum"),
        "o-4": flat("o-4", None, "none"),  # Bob was deleted: no name, the default tier
        "o-5": flat("o-5", "Cy", "bronze"),
    }
    traces = {
        r["key"]: {n: v for n, v in r["headers"].items() if not n.startswith("enrichd.")}
        for r in result.outputs
    }
    assert traces == {
        key: {"traceparent": order["headers"]["traceparent"]} if "headers" in order else {}
        for key, order in orders.items()
    }
    assert result.dead_letters == []


def envelope(name: str, row: dict[str, Any], op_type: Any = "string") -> dict[str, Any]:
    """A Debezium envelope schema around the record schema ``row``."""
    return {
        "type": "record",
        "name": "Envelope",
        "namespace": f"shop.public.{name}",
        "fields": [
            {"name": "before", "type": ["null", row], "default": None},
            {"name": "after", "type": ["null", row["name"]], "default": None},
            {"name": "op", "type": op_type},
            {"name": "ts_ms", "type": ["null", "long"], "default": None},
        ],
    }


def key_schema(field: str) -> dict[str, Any]:
    return {"type": "record", "name": "Key", "fields": [{"name": field, "type": "long"}]}


CUSTOMER = {
    "type": "record",
    "name": "Value",
    "fields": [{"name": "id", "type": "long"}, {"name": "name", "type": "string"}],
}
SETTINGS = {
    "type": "record",
    "name": "Value",
    "fields": [{"name": "customer_id", "type": "long"}, {"name": "theme", "type": "string"}],
}


def change(
    key: dict[str, int], op: str | None, t: int, after: Any = None, before: Any = None
) -> dict[str, Any]:
    value = {"before": before, "after": after, "op": op, "ts_ms": t}
    return {"key": key, "value": value, "timestamp": t}


def test_a_table_join_of_two_cdc_tables_and_events_that_are_no_changes(
    broker: EmbeddedBroker, spark: Any, tmp_path: Path
) -> None:
    """`table` over two Debezium tables keyed by customer: updates on either side re-join;
    deleting a customer retracts the join (routed by the Avro key {id} to the join key
    `id`), deleting one that never joined emits nothing. A value without `op` and a truncate
    go to the dead-letter topic as InvalidEnvelope, saying why."""
    cdc = {
        "topic": "customers",
        "schema": "{customers}",
        "envelope": "debezium",
        "key": "id",
        "key_format": "avro",
        "key_schema": "{customer_key}",
    }
    settings = {**cdc, "topic": "settings", "schema": "{settings}", "key": "customer_id"}
    settings["key_schema"] = "{settings_key}"
    joined = {
        "type": "record",
        "name": "Joined",
        "fields": [
            {"name": "left", "type": ["null", {**CUSTOMER, "name": "Customer"}], "default": None},
            {"name": "right", "type": ["null", {**SETTINGS, "name": "Settings"}], "default": None},
        ],
    }
    ada, bob = {"id": 1, "name": "Ada"}, {"id": 2, "name": "Bob"}
    dark, light = {"customer_id": 1, "theme": "dark"}, {"customer_id": 1, "theme": "light"}
    result = replay_files(
        tmp_path,
        broker,
        {
            "name": "customer-settings",
            "joiner": "table",
            "checkpoint": str(tmp_path / "checkpoint"),
            "inputs": {"left": cdc, "right": settings},
            "output": {"topic": "customer-settings", "schema": "{joined}"},
        },
        {
            # op optional here, so that a value without one can be written at all
            "customers": envelope("customers", CUSTOMER, ["null", "string"]),
            "settings": envelope("settings", SETTINGS),
            "customer_key": key_schema("id"),
            "settings_key": key_schema("customer_id"),
            "joined": joined,
        },
        {
            "left": [
                change({"id": 1}, "r", 1, after=ada),
                change({"id": 2}, "r", 1, after=bob),
                change({"id": 2}, "d", 4, before=bob),  # never joined: nothing to retract
                change({"id": 1}, None, 5, after=ada),  # no op: no change event
                change({"id": 1}, "d", 7, before=ada),
                {"key": {"id": 1}, "value": None, "timestamp": 7},  # Debezium's tombstone
                change({"id": 3}, "t", 8),  # a truncate names no row
            ],
            "right": [
                change({"customer_id": 1}, "r", 2, after=dark),
                change({"customer_id": 1}, "u", 6, after=light, before=dark),
            ],
        },
    )
    values = [(r["key"], r["value"]) for r in result.outputs]
    assert values == [
        ("1", {"left": ada, "right": dark}),
        ("1", {"left": ada, "right": light}),
        ("1", None),  # Ada's delete retracts the join
    ]
    reasons = sorted(
        (d["headers"]["enrichd.error.class"], d["headers"]["enrichd.error.message"])
        for d in result.dead_letters
    )
    assert [kind for kind, _ in reasons] == ["InvalidEnvelope", "InvalidEnvelope"]
    assert "no 'op' field" in reasons[0][1] or "no 'op' field" in reasons[1][1]
    assert any("truncate" in message for _, message in reasons)


def test_the_one_side_of_comap_from_a_cdc_table(
    broker: EmbeddedBroker, spark: Any, tmp_path: Path
) -> None:
    """Users from a Debezium table on comap's one side: a snapshot row joins the tweets, an
    update fans out to every stored tweet, a delete emits a view tombstone per tweet."""
    user = {
        "type": "record",
        "name": "Value",
        "fields": [{"name": "id", "type": "long"}, {"name": "name", "type": "string"}],
    }
    view = {
        "type": "record",
        "name": "View",
        "fields": [
            {"name": "id", "type": "long"},
            {"name": "tweet", "type": ["null", json.loads((SCHEMAS / "tweet.avsc").read_text())]},
            {"name": "author", "type": ["null", {**user, "name": "Author"}]},
        ],
    }
    ada, renamed = {"id": 1, "name": "ada"}, {"id": 1, "name": "Ada L."}
    result = replay_files(
        tmp_path,
        broker,
        {
            "name": "cdc-views",
            "joiner": "comap",
            "checkpoint": str(tmp_path / "checkpoint"),
            "inputs": {
                "one": {
                    "topic": "users",
                    "schema": "{users}",
                    "envelope": "debezium",
                    "key": "kafka_key.id",
                    "key_format": "avro",
                    "key_schema": "{user_key}",
                    "field": "author",
                },
                "many": {
                    "topic": "tweets",
                    "schema": str(SCHEMAS / "tweet.avsc"),
                    "key": "author_id",
                    "field": "tweet",
                },
            },
            "output": {"topic": "cdc-views", "schema": "{view}"},
            "options": {"many_id": "id"},
        },
        {"users": envelope("users", user), "user_key": key_schema("id"), "view": view},
        {
            "one": [
                change({"id": 1}, "r", 1, after=ada),
                change({"id": 1}, "u", 4, after=renamed, before=ada),
                change({"id": 1}, "d", 6, before=renamed),
            ],
            "many": [
                {"key": 10, "value": {"id": 10, "author_id": 1, "content": "a"}, "timestamp": 2},
                {"key": 11, "value": {"id": 11, "author_id": 1, "content": "b"}, "timestamp": 3},
            ],
        },
    )
    by_tweet: dict[str, list[Any]] = {}
    for record in result.outputs:
        author = None if record["value"] is None else record["value"]["author"]["name"]
        by_tweet.setdefault(record["key"], []).append(author)
    assert by_tweet == {"10": ["ada", "Ada L.", None], "11": ["ada", "Ada L.", None]}
    assert latest_by_key(result.outputs) == {"10": None, "11": None}
    assert result.dead_letters == []
