"""Kafka keys in each key format, composite join keys, and keys from the Kafka key, through the
real broker and Spark engine; Avro keys and values with Confluent framing through the test
registry (tests/registry.py), subjects by TopicNameStrategy."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import fastavro
import pytest

from daemon.broker import EmbeddedBroker
from daemon.demos import latest_by_key
from daemon.errors import ReplayInputError
from daemon.formats.avro.codec import AvroCodec, parse_schema_text
from daemon.formats.kafka_keys import KafkaKeyCodec
from daemon.model.config import load_pipeline_file, parse_pipeline_file
from daemon.pipeline.plan import plan_pipeline
from daemon.replay import read_input_file, replay
from tests.kafka_helpers import (
    In,
    client_conf,
    create_topic,
    produce,
    read_topic,
    replay_files,
    run_pipeline,
)
from tests.registry import RegistryServer

ROOT = Path(__file__).resolve().parents[2]
TENANTS = ROOT / "examples" / "tenant-page-views.toml"
DATA = ROOT / "examples" / "data"

CUSTOMER = {
    "type": "record",
    "name": "Customer",
    "namespace": "enrichd.tests",
    "fields": [{"name": "id", "type": "long"}, {"name": "name", "type": "string"}],
}
CUSTOMER_KEY = {
    "type": "record",
    "name": "CustomerKey",
    "namespace": "enrichd.tests",
    "fields": [{"name": "id", "type": "long"}],
}
ACCOUNT = {
    "type": "record",
    "name": "Account",
    "namespace": "enrichd.tests",
    "fields": [{"name": "customer_id", "type": "long"}, {"name": "plan", "type": "string"}],
}
CUSTOMER_ACCOUNT = {
    "type": "record",
    "name": "CustomerAccount",
    "namespace": "enrichd.tests",
    "fields": [
        {"name": "left", "type": ["null", CUSTOMER], "default": None},
        {"name": "right", "type": ["null", ACCOUNT], "default": None},
    ],
}


@pytest.fixture
def registry() -> Any:
    with RegistryServer() as server:
        yield server


def write_json(path: Path, data: Any) -> Path:
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def framed(server: RegistryServer, subject: str, schema: dict[str, Any]) -> AvroCodec:
    """A writer of ``schema`` in Confluent framing, registered under ``subject``."""
    text = json.dumps(schema)
    return AvroCodec(
        parse_schema_text(text), registry_url=server.url, schema_id=server.add(subject, text)
    )


def test_avro_keys_by_topic_name_strategy_route_tombstones_and_write_avro_output_keys(
    registry: RegistryServer, broker: EmbeddedBroker, spark: Any, tmp_path: Path, fresh_topic: Any
) -> None:
    """Customers with Confluent-framed Avro keys {id} and values, subjects `<topic>-key` and
    `<topic>-value`, joined (`table`) with accounts keyed by a value field. A customer's
    tombstone reaches its state through its decoded Avro key and retracts the join; the
    output registers its schemas (`auto_register`) and writes Avro keys; a key that is not
    Avro goes to the dead-letter topic as UndecodableKey."""
    customers, accounts, out = fresh_topic("customers"), fresh_topic("accounts"), fresh_topic("o")
    conf = client_conf(broker.bootstrap_servers)
    for topic in (customers, accounts):
        create_topic(conf, topic)
    key_writer = framed(registry, f"{customers}-key", CUSTOMER_KEY)
    customer_writer = framed(registry, f"{customers}-value", CUSTOMER)
    account_writer = framed(registry, f"{accounts}-value", ACCOUNT)
    joined = write_json(tmp_path / "joined.avsc", CUSTOMER_ACCOUNT)
    long_key = write_json(tmp_path / "long.avsc", "long")
    file = parse_pipeline_file(
        tmp_path / "p.toml",
        {
            "kafka": {"bootstrap_servers": broker.bootstrap_servers},
            "schema_registry": {"url": registry.url, "basic.auth.user.info": registry.user_info},
            "pipeline": [
                {
                    "name": out,
                    "joiner": "table",
                    "checkpoint": str(tmp_path / "checkpoint"),
                    "inputs": {
                        "left": {"topic": customers, "key": "kafka_key.id", "key_format": "avro"},
                        "right": {"topic": accounts, "key": "customer_id"},
                    },
                    "output": {
                        "topic": out,
                        "schema": str(joined),
                        "key_format": "avro",
                        "key_schema": str(long_key),
                        "auto_register": True,
                    },
                }
            ],
        },
    )
    ada, bob = {"id": 1, "name": "ada"}, {"id": 2, "name": "bob"}
    produce(
        conf,
        customers,
        [
            In(customer_writer.encode(ada), key_writer.encode({"id": 1}), 1),
            In(customer_writer.encode(bob), key_writer.encode({"id": 2}), 2),
            In(None, key_writer.encode({"id": 2}), 5),  # bob is deleted
            In(customer_writer.encode(ada), b"not avro", 6),
        ],
    )
    produce(
        conf,
        accounts,
        [
            In(account_writer.encode({"customer_id": 1, "plan": "pro"}), b"a1", 3),
            In(account_writer.encode({"customer_id": 2, "plan": "free"}), b"a2", 4),
        ],
    )

    run_pipeline(spark, file)

    reading = {"registry_url": registry.url, "registry_settings": registry.client_settings()}
    keys = KafkaKeyCodec("avro", AvroCodec(fastavro.parse_schema("long"), **reading))
    written = read_topic(conf, out)
    assert all(r.key is not None and r.key[0] == 0 for r in written)  # Confluent framing
    values = AvroCodec(parse_schema_text(json.dumps(CUSTOMER_ACCOUNT)), **reading)
    latest = {
        keys.decode(r.key or b""): None if r.value is None else values.decode(r.value)
        for r in written
    }
    assert latest == {1: {"left": ada, "right": {"customer_id": 1, "plan": "pro"}}, 2: None}
    assert {f"{out}-value", f"{out}-key"} <= set(registry.registry.subjects)
    (dead,) = read_topic(conf, f"{out}.dlq")
    assert dead.headers["enrichd.error.class"] == b"UndecodableKey"
    assert dead.headers["enrichd.error.message"].startswith(b"key_format 'avro': ")
    assert dead.key == b"not avro"  # the original bytes, kept


def test_a_composite_key_from_value_fields_and_json_key_fields(
    broker: EmbeddedBroker, spark: Any
) -> None:
    """The tenant-page-views example: users are (tenant, user_id), from the JSON Kafka key of
    the users table and from two fields of each page view. The same user_id in two tenants
    is two users; a tombstone keyed by the JSON key deletes; a view without its user_id goes
    to the dead-letter topic as MissingKey."""
    result = replay(
        load_pipeline_file(TENANTS),
        {"table": DATA / "tenant-users.jsonl", "stream": DATA / "page-views.jsonl"},
        bootstrap_servers=broker.bootstrap_servers,
    )
    users = {record["key"]: record["value"]["user"] for record in result.outputs}
    assert users == {
        "v1": {"name": "Ada", "plan": "pro"},
        "v2": {"name": "Hank", "plan": "free"},  # globex's user 7, not acme's
        "v4": None,  # acme's user 7 was deleted by the tombstone at 4000
    }
    (dead,) = result.dead_letters
    assert dead["headers"]["enrichd.error.class"] == "MissingKey"
    assert dead["headers"]["enrichd.error.message"] == "no join key field 'user_id'"
    assert dead["key"] == "v3"


DEVICE = {
    "type": "record",
    "name": "Device",
    "namespace": "enrichd.tests",
    "fields": [{"name": "model", "type": "string"}],
}
VISIT = {
    "type": "record",
    "name": "Visit",
    "namespace": "enrichd.tests",
    "fields": [{"name": "page", "type": "string"}],
}
DEVICE_VISIT = {
    "type": "record",
    "name": "DeviceVisit",
    "namespace": "enrichd.tests",
    "fields": [
        {"name": "stream", "type": ["null", VISIT], "default": None},
        {"name": "table", "type": ["null", DEVICE], "default": None},
    ],
}


def test_whole_kafka_keys_as_bytes_and_as_text(
    broker: EmbeddedBroker, spark: Any, tmp_path: Path
) -> None:
    """A devices table keyed by the device id's raw bytes (`key_format = "bytes"`), looked up
    by visits keyed by the id in hex text (`key = "kafka_key"`, text keys): a bytes key's
    text is its hex digits, so they meet; the table's tombstone deletes by its bytes key."""
    device = "0a0bff"  # in replay files a bytes key is written as hex
    result = replay_files(
        tmp_path,
        broker,
        {
            "name": "visits",
            "joiner": "lookup",
            "checkpoint": str(tmp_path / "checkpoint"),
            "inputs": {
                "stream": {"topic": "visits", "schema": "{visit}", "key": "kafka_key"},
                "table": {
                    "topic": "devices",
                    "schema": "{device}",
                    "key": "kafka_key",
                    "key_format": "bytes",
                },
            },
            "output": {"topic": "device-visits", "schema": "{out}"},
            "options": {"mode": "left"},
        },
        {"device": DEVICE, "visit": VISIT, "out": DEVICE_VISIT},
        {
            "table": [
                {"key": device, "value": {"model": "phone"}, "timestamp": 1},
                {"key": device, "value": None, "timestamp": 3},
            ],
            "stream": [
                {"key": device, "value": {"page": page}, "timestamp": t}
                for page, t in (("/a", 2), ("/b", 4))
            ],
        },
    )

    pages = {r["value"]["stream"]["page"]: r["value"]["table"] for r in result.outputs}
    assert pages == {"/a": {"model": "phone"}, "/b": None}
    assert {r["key"] for r in result.outputs} == {device}  # the visits' own text keys
    assert result.dead_letters == []
    assert latest_by_key(result.outputs)[device] == {"stream": {"page": "/b"}, "table": None}


TENANT_CLICK = {
    "type": "record",
    "name": "Click",
    "namespace": "enrichd.tests",
    "fields": [
        {"name": "tenant", "type": "string"},
        {"name": "user", "type": "long"},
        {"name": "at", "type": "long"},
    ],
}
SIGNUP = {
    "type": "record",
    "name": "Signup",
    "namespace": "enrichd.tests",
    "fields": [{"name": "plan", "type": "string"}, {"name": "at", "type": "long"}],
}
CLICK_SIGNUP = {
    "type": "record",
    "name": "ClickSignup",
    "namespace": "enrichd.tests",
    "fields": [
        {"name": "left", "type": ["null", TENANT_CLICK], "default": None},
        {"name": "right", "type": ["null", SIGNUP], "default": None},
    ],
}


def test_a_window_join_on_a_composite_key_from_value_and_json_key_writes_json_keys(
    broker: EmbeddedBroker, spark: Any, tmp_path: Path
) -> None:
    """`window` on (tenant, user): clicks name both in their value, signups in their JSON
    Kafka key. Only the same user of the same tenant pairs; the output's JSON key is the
    array of the parts. A signup key without its tenant, and one that is not an object, go
    to the dead-letter topic as MissingKey, naming what is missing."""

    def line(key: Any, value: dict[str, Any]) -> dict[str, Any]:
        return {"key": key, "value": value, "timestamp": value["at"]}

    acme = {"tenant": "acme", "user": 7, "at": 100}
    result = replay_files(
        tmp_path,
        broker,
        {
            "name": "clicks",
            "joiner": "window",
            "checkpoint": str(tmp_path / "checkpoint"),
            "inputs": {
                "left": {
                    "topic": "clicks",
                    "schema": "{click}",
                    "key": ["tenant", "user"],
                    "time": "at",
                },
                "right": {
                    "topic": "signups",
                    "schema": "{signup}",
                    "key": ["kafka_key.tenant", "kafka_key.user"],
                    "key_format": "json",
                    "time": "at",
                },
            },
            "output": {"topic": "click-signups", "schema": "{out}", "key_format": "json"},
            "options": {"window": "10ms", "grace": "5ms", "idle_timeout": "1h"},
        },
        {"click": TENANT_CLICK, "signup": SIGNUP, "out": CLICK_SIGNUP},
        {
            "left": [line("c1", acme), line("c2", {"tenant": "globex", "user": 7, "at": 101})],
            "right": [
                line({"tenant": "acme", "user": 7}, {"plan": "pro", "at": 103}),
                line({"tenant": "initech", "user": 7}, {"plan": "free", "at": 104}),
                line({"user": 7}, {"plan": "free", "at": 105}),  # no tenant
                line(7, {"plan": "free", "at": 106}),  # a JSON number, not an object
            ],
        },
    )

    assert [(r["key"], r["value"]) for r in result.outputs] == [
        (["acme", "7"], {"left": acme, "right": {"plan": "pro", "at": 103}})
    ]
    dead = sorted(
        (d["key"], d["headers"]["enrichd.error.class"], d["headers"]["enrichd.error.message"])
        for d in result.dead_letters
    )
    assert dead == [
        (
            "7",
            "MissingKey",
            "no join key field 'kafka_key.tenant': the Kafka key is one value, not a record",
        ),
        ('{"user":7}', "MissingKey", "no join key field 'kafka_key.tenant'"),
    ]


def test_a_replay_key_that_does_not_fit_its_key_format_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "devices.jsonl"
    path.write_text(json.dumps({"key": "zz", "value": {"model": "x"}, "timestamp": 1}) + "\n")
    codec = AvroCodec(fastavro.parse_schema(DEVICE))
    with pytest.raises(ReplayInputError) as caught:
        read_input_file(path, "table", codec, KafkaKeyCodec("bytes"))
    assert str(caught.value) == (
        f"{path}:1: \"key\" does not fit the 'table' key_format 'bytes': 'zz' is not hex digits"
    )


def test_inputs_whose_keys_have_different_numbers_of_parts_are_refused(
    broker: EmbeddedBroker, tmp_path: Path
) -> None:
    text = TENANTS.read_text().replace('key = ["tenant", "user_id"]', 'key = "user_id"')
    path = tmp_path / "p.toml"
    path.write_text(text.replace('"../', f'"{ROOT}/'))
    file = load_pipeline_file(path)
    with pytest.raises(Exception, match="different numbers of parts \\(stream 1, table 2\\)"):
        plan_pipeline(file, file.pipeline[0], client_conf(broker.bootstrap_servers))
