"""The processor's side of a select: the output record it makes of the joiner's value, the
retractions of a revising lookup in the same shape, and what it cannot shape, dead-lettered.

Through the real broker and Spark: ``tests/formats/test_debezium.py`` (the flat-orders
example).
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from daemon.formats.avro.codec import AvroCodec, parse_schema_text
from daemon.formats.kafka_keys import KafkaKeyCodec
from daemon.joiners.lookup import Lookup
from daemon.model.selection import Pick, SelectFunction
from daemon.model.wire import OutputRow
from daemon.plugin.configured import configure
from tests.unit.operator.processor_calls import (
    INPUTS,
    call,
    click,
    codec,
    event,
    lookup_plan,
    plan_of,
    processor_on,
    region_update,
    window_plan,
)

FLAT = AvroCodec(
    parse_schema_text(
        json.dumps(
            {
                "type": "record",
                "name": "FlatClick",
                "fields": [
                    {"name": "click_id", "type": "string"},
                    {"name": "region", "type": "string"},
                    {"name": "revision", "type": "int", "default": 0},
                    {"name": "key", "type": "string"},
                    {"name": "at", "type": "long"},
                ],
            }
        )
    )
)
PICKS = [
    Pick.of("click_id", "click.id"),
    Pick.of("region", "region.region", default="UNKNOWN", has_default=True),
    Pick.of("key", "kafka_key"),
    Pick.of("at", "timestamp"),
]


def flat(row: tuple[Any, ...]) -> tuple[str, dict[str, Any]]:
    found = OutputRow._make(row)
    return found.topic, FLAT.decode(found.value or b"")


def test_the_output_is_the_record_the_select_makes() -> None:
    plan = replace(lookup_plan(), output_codec=FLAT, selects={None: SelectFunction(PICKS)})
    processor, _ = processor_on(plan)
    sent = call(processor, [click("bob", 1), region_update("ada", "north", 2), click("ada", 3)])
    assert [flat(row) for row in sent] == [
        ("out", {"click_id": "c1", "region": "UNKNOWN", "revision": 0, "key": "bob", "at": 1}),
        ("out", {"click_id": "c3", "region": "north", "revision": 0, "key": "ada", "at": 3}),
    ]


def test_a_revisions_retraction_is_shaped_as_its_answer_was() -> None:
    joiner = configure(
        Lookup,
        {
            "mode": "left",
            "versioned": True,
            "revisions": True,
            "aggregate": {"group_by": "region"},
        },
        pipeline="p",
        fields={"stream": "click", "table": "region"},
    )
    select = SelectFunction([*PICKS, Pick.of("revision", "revision")])
    plan = plan_of(joiner, {"stream": "click", "table": "user_region"}, "enriched_click", INPUTS)
    plan = replace(
        plan,
        output_codec=FLAT,
        outputs={"retractions": ("out.retractions", FLAT)},
        selects={None: select, "retractions": select},
    )
    processor, _ = processor_on(plan)
    first = call(processor, [region_update("ada", "north", 1), click("ada", 5)])
    assert [flat(row)[1]["region"] for row in first] == ["north"]
    revised = call(processor, [region_update("ada", "south", 3)])  # late: valid from 3
    assert [(topic, value["region"], value["revision"]) for topic, value in map(flat, revised)] == [
        ("out.retractions", "north", 0),
        ("out", "south", 1),
    ]


def test_a_value_the_select_cannot_shape_is_dead_lettered_with_the_reason() -> None:
    bad = SelectFunction([Pick.of("click_id", "click.id.first")])
    processor, _ = processor_on(replace(lookup_plan(), selects={None: bad}))
    (letter,) = map(OutputRow._make, call(processor, [click("ada", 3)]))
    assert (letter.topic, letter.error_class) == ("out.dlq", "UnencodableOutput")
    assert (letter.error_message or "").startswith("AttributeError: 'str' object")
    assert letter.value == codec("click").encode({"id": "c3", "user": "ada", "clicks": 1})


def test_the_key_a_select_reads_is_the_joiners_whatever_format_writes_it() -> None:
    """A window's join key, written as JSON: the select reads the key's text, not its JSON."""
    keyed = AvroCodec(
        parse_schema_text(
            '{"type": "record", "name": "Keyed", "fields": [{"name": "key", "type": "string"},'
            ' {"name": "v", "type": "string"}]}'
        )
    )
    plan = replace(
        window_plan(),
        output_codec=keyed,
        output_keys={None: KafkaKeyCodec("json")},
        selects={None: SelectFunction([Pick.of("key", "kafka_key"), Pick.of("v", "right.v")])},
    )
    processor, _ = processor_on(plan)
    (pair,) = map(OutputRow._make, call(processor, [event(0, 1, 1_000), event(1, 1, 1_500)]))
    assert pair.key == b'"1"'
    assert keyed.decode(pair.value or b"") == {"key": "1", "v": "e"}
