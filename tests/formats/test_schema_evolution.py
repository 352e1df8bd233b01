"""An input schema that evolves while records of the old one are held in state, across a restart.

For each joiner that holds input records (``comap``'s both sides, ``lookup``'s table rows,
``window``'s held records, ``asof``'s right history, ``table``'s both sides): the pipeline
runs over records written with the schema ``Event`` version 1, and stops with some of them in
its state; it restarts with version 2 (a field ``tier`` added with a default, the optional
``note`` removed, as a backward-compatible registry allows) in its input and output schema
files, and new records written with version 2 join the held ones. Every output is written,
the held records in version 2's shape (``tier`` at its default, no ``note``), and nothing
goes to the dead-letter topic: no ``UnencodableOutput`` (daemon/operator/held_records.py).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from daemon.formats.avro.codec import AvroCodec, parse_schema_text
from daemon.model.config import load_pipeline_file
from tests.kafka_helpers import In, client_conf, create_topic, produce, read_topic, run_pipeline

NAMESPACE = "enrichd.tests.evolution"
V1_FIELDS: list[dict[str, Any]] = [
    {"name": "id", "type": "long"},
    {"name": "k", "type": "long"},
    {"name": "v", "type": "string"},
    {"name": "note", "type": ["null", "string"], "default": None},
]
V2_FIELDS: list[dict[str, Any]] = [
    {"name": "id", "type": "long"},
    {"name": "k", "type": "long"},
    {"name": "v", "type": "string"},
    {"name": "tier", "type": "string", "default": "basic"},
]


def event_schema(fields: list[dict[str, Any]]) -> dict[str, Any]:
    return {"type": "record", "name": "Event", "namespace": NAMESPACE, "fields": fields}


def output_schema(fields: list[dict[str, Any]], sides: dict[str, bool], extra: list[Any]) -> Any:
    """An output record of one field per side (nullable or not) holding an ``Event``."""
    event: Any = event_schema(fields)
    out = []
    for name, nullable in sides.items():
        out.append({"name": name, "type": ["null", event] if nullable else event})
        event = f"{NAMESPACE}.Event"  # defined once, referred to after
    return {"type": "record", "name": "Out", "namespace": NAMESPACE, "fields": out + extra}


@dataclass(frozen=True)
class Case:
    """A joiner's pipeline: its roles, output sides, options, and what each phase writes."""

    joiner: str
    roles: tuple[str, str]
    sides: dict[str, bool]
    extra: list[Any]
    options: dict[str, Any]
    before: list[tuple[str, int, int, int]]
    """Phase 1, version 1 records: (role, id, key, Kafka timestamp)."""
    after: list[tuple[str, int, int, int]]
    """Phase 2, version 2 records."""
    held: Callable[[dict[str, Any]], dict[str, Any] | None]
    """From an output of phase 2, the held (version 1) record it carries, if any."""


CASES = {
    "comap": Case(
        "comap",
        ("one", "many"),
        {"one": False, "many": False},
        [{"name": "id", "type": "long"}],
        {"many_id": "id"},
        [("one", 1, 1, 1000), ("many", 10, 1, 1001)],
        [("one", 2, 1, 2000)],  # a one-side update fans out to the held many-side record
        lambda out: out["many"] if out["many"]["id"] == 10 else None,
    ),
    "lookup": Case(
        "lookup",
        ("stream", "table"),
        {"stream": False, "table": False},
        [],
        {},
        [("table", 1, 1, 1000)],
        [("stream", 20, 1, 2000)],  # joins the held table row
        lambda out: out["table"],
    ),
    "window": Case(
        "window",
        ("left", "right"),
        {"left": True, "right": True},
        [],
        {"window": "1h", "idle_timeout": "1h"},
        [("left", 1, 1, 1000)],
        [("right", 2, 1, 2000)],  # pairs with the held left record
        lambda out: out["left"],
    ),
    "asof": Case(
        "asof",
        ("left", "right"),
        {"left": False, "right": True},
        [{"name": "revision", "type": "int"}],
        {"rejoin_interval": "1h"},
        [("right", 1, 1, 1000)],
        [("left", 2, 1, 2000)],  # answered with the held right record
        lambda out: out["right"],
    ),
    "table": Case(
        "table",
        ("left", "right"),
        {"left": True, "right": True},
        [],
        {},
        [("left", 1, 1, 1000)],
        [("right", 2, 1, 2000)],  # joins the held left row
        lambda out: out["left"],
    ),
}


def pipeline_text(case: Case, folder: Path, topics: dict[str, str], version: str) -> str:
    lines = [
        '[spark]\nmaster = "local[2]"\n',
        f'[kafka]\nbootstrap_servers = "{topics["servers"]}"\n',
        "[[pipeline]]",
        f'name = "{topics["name"]}"',
        f'joiner = "{case.joiner}"',
        f'checkpoint = "{folder / "checkpoint"}"',
        f'dead_letter_topic = "{topics["dlq"]}"',
    ]
    for role in case.roles:
        lines += [
            f"[pipeline.inputs.{role}]",
            f'topic = "{topics[role]}"',
            f'schema = "{folder / f"event-{version}.avsc"}"',
            'key = "k"',
        ]
    lines += [
        "[pipeline.output]",
        f'topic = "{topics["output"]}"',
        f'schema = "{folder / f"out-{version}.avsc"}"',
        "[pipeline.options]",
        *(f"{name} = {json.dumps(value)}" for name, value in case.options.items()),
    ]
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("name", sorted(CASES))
def test_records_held_in_state_are_written_in_the_new_schema_after_a_restart(
    name: str, broker: Any, spark: Any, tmp_path: Path
) -> None:
    case = CASES[name]
    stem = f"{name}-{uuid.uuid4().hex[:8]}"
    topics = {
        "servers": broker.bootstrap_servers,
        "name": f"evolve-{stem}",
        "dlq": f"evolve-{stem}.dlq",
        "output": f"evolved-{stem}",
        **{role: f"{role}-{stem}" for role in case.roles},
    }
    conf = client_conf(broker.bootstrap_servers)
    for role in case.roles:
        create_topic(conf, topics[role])
    codecs = {}
    for version, fields in (("v1", V1_FIELDS), ("v2", V2_FIELDS)):
        event, out = event_schema(fields), output_schema(fields, case.sides, case.extra)
        (tmp_path / f"event-{version}.avsc").write_text(json.dumps(event))
        (tmp_path / f"out-{version}.avsc").write_text(json.dumps(out))
        codecs[version] = AvroCodec(parse_schema_text(json.dumps(event)))
    path = tmp_path / "pipeline.toml"

    def phase(version: str, records: list[tuple[str, int, int, int]]) -> None:
        for role, ident, key, at in records:
            value = {"id": ident, "k": key, "v": f"{role} {ident}"}
            value.update({"note": "old"} if version == "v1" else {"tier": "gold"})
            encoded = codecs[version].encode(value)
            produce(conf, topics[role], [In(encoded, str(ident).encode(), at)])
        path.write_text(pipeline_text(case, tmp_path, topics, version))
        assert run_pipeline(spark, load_pipeline_file(path))

    phase("v1", case.before)
    before = len(read_topic(conf, topics["output"]))
    phase("v2", case.after)

    written = read_topic(conf, topics["output"])[before:]
    out_v2 = AvroCodec(parse_schema_text((tmp_path / "out-v2.avsc").read_text()))
    outputs = [out_v2.decode(record.value) for record in written if record.value is not None]
    held = [found for out in outputs if (found := case.held(out)) is not None]
    assert held, outputs
    assert all(record["tier"] == "basic" and "note" not in record for record in held), held
    assert read_topic(conf, topics["dlq"]) == []
