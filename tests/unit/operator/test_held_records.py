"""Output values holding input records of an older schema, conformed to the current one."""

from __future__ import annotations

from pathlib import Path

import fastavro

from daemon.formats.avro.codec import AvroCodec, load_schema_file
from daemon.joiners.lookup import Lookup, LookupOptions
from daemon.operator.held_records import HeldRecords
from daemon.plugin.joiner import JoinerContext

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
