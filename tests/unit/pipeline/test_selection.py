"""A select resolved against what each joiner writes: every built-in's value (a plugin's
own fields: the example plugin's tests), spreads, and the paths that lead nowhere (a start
refuses them)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from daemon.formats.avro.codec import AvroCodec, load_schema_file
from daemon.formats.kafka_keys import KafkaKeyCodec
from daemon.joiners.asof import AsOf
from daemon.joiners.comap import CoMap
from daemon.joiners.lookup import Lookup
from daemon.joiners.table import Table
from daemon.joiners.window import Window
from daemon.model.selection import Pick, SelectField
from daemon.pipeline.selection import Typed, key_type, resolve, value_shape
from daemon.plugin import Joiner, JoinerContext, JoinerOptions
from daemon.plugin.configured import configure
from tests.unit.pipeline.test_field_checks import Quiet

SCHEMAS = Path(__file__).resolve().parents[3] / "schemas"


def schema(name: str) -> Any:
    return load_schema_file(SCHEMAS / f"{name}.avsc")


def select(**entries: Any) -> dict[str, SelectField]:
    return {
        name: SelectField.model_validate({"path": e} if isinstance(e, str) else e)
        for name, e in entries.items()
    }


def kinds(types: dict[str, Typed]) -> dict[str, tuple[Any, bool]]:
    """Each picked field's Avro type (a record by its name) and whether it may be null."""
    return {
        name: (t.schema.get("name") if isinstance(t.schema, dict) else t.schema, t.nullable)
        for name, t in types.items()
    }


def test_lookup_a_field_of_each_side_the_revision_and_the_stream_records_kafka_key() -> None:
    joiner = configure(
        Lookup,
        {"mode": "left", "versioned": True, "revisions": True},
        pipeline="p",
        fields={"stream": "click", "table": "region"},
    )
    key = KafkaKeyCodec("avro", AvroCodec(schema("customer_key")))
    shape = value_shape(
        joiner,
        {"stream": schema("timed_click"), "table": schema("region_change")},
        {"stream": key_type(key), "table": key_type(None)},
    )
    resolved = resolve(
        select(
            click_id="click.id",
            region="region.region",
            fallback={"path": "region.region", "default": "UNKNOWN"},
            revision="revision",
            order="kafka_key.id",
            at="timestamp",
        ),
        shape,
    )
    assert resolved.problems == []
    assert kinds(resolved.types) == {
        "click_id": ("string", False),
        "region": ("string", True),  # the table side is null in left mode
        "fallback": ("string", True),  # nullable where read; the default fills it
        "revision": ("int", False),
        "order": ("long", False),
        "at": ("long", False),
    }
    assert resolved.picks[4] == Pick("order", "kafka_key", ("id",))


@pytest.mark.parametrize(
    ("joiner", "options", "schemas", "fields"),
    [
        (CoMap, {"many_id": "id"}, {"one": "user", "many": "tweet"}, ["id", "one", "many"]),
        (AsOf, {}, {"left": "recommendation", "right": "mood"}, ["left", "right", "revision"]),
        (Window, {"window": "1s"}, {"left": "left_event", "right": "right_event"}, None),
        (Table, {}, {"left": "user", "right": "user_region"}, None),
    ],
)
def test_every_built_in_joiners_value_spreads_whole(
    joiner: type[Joiner], options: dict[str, Any], schemas: dict[str, str], fields: Any
) -> None:
    made = configure(joiner, options, pipeline="p")
    shape = value_shape(made, {r: schema(s) for r, s in schemas.items()}, {})
    resolved = resolve(select(**{"*": "*"}), shape)
    assert resolved.problems == []
    assert [pick.name for pick in resolved.picks] == (fields or ["left", "right"])
    # A spread of each input's record under a prefix: one field per field of its schema.
    for role, name in schemas.items():
        spread = resolve(select(**{f"{role}_*": f"{role}.*"}), shape)
        assert [p.name for p in spread.picks] == [
            f"{role}_{f['name']}" for f in schema(name)["fields"]
        ]


def test_a_key_the_joiner_makes_is_text_without_fields() -> None:
    joiner = configure(CoMap, {"many_id": "id"}, pipeline="p")
    shape = value_shape(joiner, {"one": schema("user"), "many": schema("tweet")}, {})
    resolved = resolve(select(key="kafka_key", part="kafka_key.id"), shape)
    assert kinds(resolved.types) == {"key": ("string", False)}
    assert resolved.problems == [
        ("part", "'kafka_key.id': the output's Kafka key is a text joiner 'comap' makes, "
         "with no field 'id'"),
    ]  # fmt: skip


def test_paths_that_lead_nowhere_say_where_they_stop() -> None:
    joiner = configure(Lookup, {"mode": "left"}, pipeline="p", fields={"table": "region"})
    shape = value_shape(joiner, {"stream": schema("click"), "table": schema("user_region")}, {})
    resolved = resolve(
        select(
            a="regoin.region",
            b="region.regoin",
            c="stream.user.first",
            d="region",
            **{"x_*": "stream.user.*"},
        ),
        shape,
    )
    assert dict(resolved.problems) == {
        "a": "'regoin.region': joiner 'lookup' writes no field 'regoin'; its value has stream, "
        "region, and a path may start with kafka_key or timestamp",
        "b": "'region.regoin': field 'regoin' is not in the record at 'region' (the 'table' "
        "input's record); its fields: user, region",
        "c": "'stream.user.first': 'stream.user' is a string, which has no field 'first'",
        "x_*": "'stream.user.*': 'stream.user' is a string, so its fields cannot be listed; "
        "name them",
    }
    assert [p.name for p in resolved.picks] == ["d"]


def test_a_field_given_twice_is_a_problem() -> None:
    joiner = configure(Lookup, {}, pipeline="p")
    shape = value_shape(joiner, {"stream": schema("click"), "table": schema("user_region")}, {})
    resolved = resolve(select(**{"*": "stream.*"}, user="table.user"), shape)
    assert resolved.problems == [("user", "field 'user' is given twice (also by '*')")]


def test_a_joiner_that_declares_nothing_gets_its_paths_unchecked_and_no_spread() -> None:
    joiner = Quiet(JoinerOptions(), JoinerContext(pipeline="p", fields={}))
    shape = value_shape(joiner, {"left": schema("user")}, {})
    resolved = resolve(select(anything="whatever.it.writes", **{"*": "*"}), shape)
    assert [p.name for p in resolved.picks] == ["anything"]
    assert resolved.types["anything"].schema is None
    assert resolved.problems == [
        ("*", "joiner 'quiet' does not declare what it writes, so its fields cannot be listed; "
         "name them"),
    ]  # fmt: skip
