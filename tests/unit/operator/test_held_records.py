"""Output values holding input records of an older schema, conformed to the current one."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import fastavro
import pytest

from daemon.formats.avro.codec import AvroCodec, load_schema_file
from daemon.joiners.lookup import Lookup, LookupOptions
from daemon.operator.held_records import HeldRecords
from daemon.plugin.host import registry
from daemon.plugin.joiner import JoinerContext
from daemon.testing import JoinerHarness
from tests.evolution_cases import CASES, V2_FIELDS, event_schema, event_value, output_schema

SCHEMAS = Path(__file__).resolve().parents[3] / "schemas"
REGION_V2 = fastavro.parse_schema(
    {
        "type": "record",
        "name": "UserRegion",
        "namespace": "enrichd.examples",
        "fields": [
            {"name": "user", "type": "string"},
            {"name": "region", "type": "string"},
            {"name": "country", "type": "string", "default": "?"},
        ],
    }
)


def held() -> HeldRecords:
    joiner = Lookup(LookupOptions(), JoinerContext("p", {"stream": "click", "table": "region"}))
    codecs = {
        "stream": AvroCodec(load_schema_file(SCHEMAS / "click.avsc")),
        "table": AvroCodec(REGION_V2),
    }
    return HeldRecords(joiner, codecs)


def test_the_fields_holding_records_are_conformed_to_their_inputs_schemas() -> None:
    click = {"id": "c1", "user": "ada", "clicks": 1}
    value = {"click": click, "region": {"user": "ada", "region": "eu", "zone": "z"}}
    conformed = held().conformed(value, None)
    assert conformed == {
        "click": click,
        "region": {"user": "ada", "region": "eu", "country": "?"},
    }
    assert value["region"] == {"user": "ada", "region": "eu", "zone": "z"}  # left as it was


def test_a_null_side_needs_nothing_and_an_undeclared_output_is_the_main_ones_shape() -> None:
    assert held().conformed({"click": None, "region": None}, None) is None
    retraction = {"click": {"id": "c1", "user": None, "clicks": 1}, "region": {"user": "a"}}
    assert held().conformed(retraction, "retractions") is not None


def test_a_held_record_for_a_dead_letter_is_encoded_with_the_current_schema() -> None:
    codec = AvroCodec(REGION_V2)
    old = {"user": "ada", "region": "eu"}
    assert codec.decode(held().encoded("table", old, codec))["country"] == "?"
    unknown = held().encoded("nowhere", {"user": 1}, codec)  # no schema known: as JSON
    assert unknown == b'{"user": 1}'


@pytest.mark.parametrize("name", sorted(CASES))
def test_each_joiner_that_holds_records_says_where_so_they_are_written_in_the_new_schema(
    name: str,
) -> None:
    """Per joiner, in plain Python: its records held from version 1 make outputs that
    version 2's output schema refuses as they are; :class:`HeldRecords`, from the fields the
    joiner declares (:meth:`Joiner.writes`), conforms them so that they encode. The
    operator does this when an encoding fails (tests/formats/test_schema_evolution.py runs
    it through Spark across a restart)."""
    case = CASES[name]
    harness = JoinerHarness(
        registry().get(case.joiner).cls,
        keys=dict.fromkeys(case.roles, "k"),
        options=case.options,
        fields={role: role for role in case.roles},
    )
    for version, records in (("v1", case.before), ("v2", case.after)):
        before = len(harness.run.outputs)
        inputs: dict[str, list[dict[str, Any]]] = {}
        for role, ident, key, at in records:
            value = event_value(role, ident, key, version)
            inputs.setdefault(role, []).append({"key": ident, "value": value, "timestamp": at})
        harness.feed(inputs)
    outputs = [emit for emit in harness.run.outputs[before:] if emit.value is not None]
    out_v2 = AvroCodec(fastavro.parse_schema(output_schema(V2_FIELDS, case.sides, case.extra)))
    event_v2 = AvroCodec(fastavro.parse_schema(event_schema(V2_FIELDS)))
    conformer = HeldRecords(harness.joiner, dict.fromkeys(case.roles, event_v2))
    held = []
    for emit in outputs:
        with pytest.raises(ValueError):
            out_v2.encode(emit.value)
        conformed = conformer.conformed(emit.value, emit.output)
        assert conformed is not None, emit.value
        found = case.held(out_v2.decode(out_v2.encode(conformed)))
        if found is not None:
            held.append(found)
    assert held, outputs
    assert all(record["tier"] == "basic" and "note" not in record for record in held), held
