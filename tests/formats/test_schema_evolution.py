"""An input schema that evolves while records of the old one are held in state, across a restart.

The pipeline runs over records written with the schema ``Event`` version 1, and stops with
some of them in its state; it restarts with version 2 (a field ``tier`` added with a default,
the optional ``note`` removed, as a backward-compatible registry allows) in its input and
output schema files, and new records written with version 2 join the held ones. Every output
is written, the held records in version 2's shape (``tier`` at its default, no ``note``), and
nothing goes to the dead-letter topic: no ``UnencodableOutput``
(daemon/operator/held_records.py).

Through Spark for ``lookup`` (its table rows) only: the operator's part, conforming the fields
a joiner declares, is the same for every joiner, and each joiner that holds records is run
over the same inputs in plain Python (tests/unit/operator/test_held_records.py), where a
joiner that declared its fields wrongly would fail. Two query starts cost ~20 s a joiner.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

from daemon.formats.avro.codec import AvroCodec, parse_schema_text
from daemon.model.config import load_pipeline_file
from tests.evolution_cases import (
    CASES,
    V1_FIELDS,
    V2_FIELDS,
    Case,
    event_schema,
    event_value,
    output_schema,
)
from tests.kafka_helpers import In, client_conf, create_topic, produce, read_topic, run_pipeline


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


def test_records_held_in_state_are_written_in_the_new_schema_after_a_restart(
    broker: Any, spark: Any, tmp_path: Path
) -> None:
    name = "lookup"
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
            encoded = codecs[version].encode(event_value(role, ident, key, version))
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
