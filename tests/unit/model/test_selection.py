"""A select compiled into one function, and the ``[pipeline.select]`` entries a file may give."""

from __future__ import annotations

import pickle
from typing import Any

import pytest
from pydantic import ValidationError

from daemon.model.selection import (
    Pick,
    SelectField,
    SelectFunction,
    compile_select,
    select_entries,
)

VALUE = {
    "order": {"id": "o-1", "amount": 1200, "ship": {"city": "Oslo"}},
    "customer": None,
    "revision": 2,
}


def test_paths_flatten_and_rename_each_shared_prefix_read_once() -> None:
    shape = compile_select(
        [
            Pick.of("order_id", "order.id"),
            Pick.of("city", "order.ship.city"),
            Pick.of("order", "order"),
            Pick.of("n", "revision"),
        ]
    )
    assert shape(VALUE, None, 5) == {
        "order_id": "o-1",
        "city": "Oslo",
        "order": VALUE["order"],
        "n": 2,
    }


def test_a_null_along_a_path_is_null_or_the_default() -> None:
    shape = compile_select(
        [
            Pick.of("name", "customer.name"),
            Pick.of("tier", "customer.tier", default="none", has_default=True),
            Pick.of("missing", "order.coupon", default=0, has_default=True),
        ]
    )
    assert shape(VALUE, None, 5) == {"name": None, "tier": "none", "missing": 0}
    found = shape({"order": {}, "customer": {"name": "Ada", "tier": "gold"}}, None, 5)
    assert found == {"name": "Ada", "tier": "gold", "missing": 0}


def test_constants_the_kafka_key_and_the_timestamp() -> None:
    picks = [
        Pick("channel", "constant", constant="web"),
        Pick.of("key", "kafka_key"),
        Pick.of("at", "timestamp"),
    ]
    shape = compile_select(picks)
    assert shape(VALUE, b"o-1", 5) == {"channel": "web", "key": "o-1", "at": 5}
    assert shape(VALUE, "7", 6)["key"] == "7"
    # No input record timed it (a wake-up's output): the time of writing.
    assert shape(VALUE, None, None)["at"] > 1_700_000_000_000


def test_a_key_an_input_gave_is_read_in_its_key_format() -> None:
    read = {b"\x01": {"id": 7, "tenant": "acme"}}.__getitem__
    shape = compile_select([Pick.of("id", "kafka_key.id"), Pick.of("key", "kafka_key")], read)
    assert shape(VALUE, b"\x01", 5) == {"id": 7, "key": {"id": 7, "tenant": "acme"}}
    assert shape(VALUE, None, 5) == {"id": None, "key": None}  # a keyless stream record


def test_a_step_into_a_value_that_is_no_record_raises() -> None:
    # The operator dead-letters it as UnencodableOutput, with this reason.
    with pytest.raises(AttributeError):
        compile_select([Pick.of("x", "order.id.first")])(VALUE, None, 5)


def test_a_select_function_pickles_as_its_picks_and_compiles_where_it_runs() -> None:
    select = SelectFunction([Pick.of("order_id", "order.id")])
    assert select.shape(VALUE, None, 5) == {"order_id": "o-1"}
    again: SelectFunction = pickle.loads(pickle.dumps(select))  # noqa: S301 - our own bytes
    assert again.picks == select.picks
    assert again.shape(VALUE, None, 5) == {"order_id": "o-1"}


def test_pick_of_a_path_says_where_it_comes_from() -> None:
    assert Pick.of("a", "customer.name") == Pick("a", "value", ("customer", "name"))
    assert Pick.of("a", "kafka_key.id") == Pick("a", "kafka_key", ("id",))
    assert Pick.of("a", "timestamp") == Pick("a", "timestamp")
    # A field named timestamp inside the value is reached by its path.
    assert Pick.of("a", "timestamp.x") == Pick("a", "value", ("timestamp", "x"))


@pytest.mark.parametrize(
    "entry",
    [{"path": "a.b"}, {"path": "a", "default": None}, {"value": 3}, {"value": {"x": [1]}}],
)
def test_an_entry_is_a_path_with_an_optional_default_or_a_constant(entry: dict[str, Any]) -> None:
    assert SelectField.model_validate(entry).model_dump(exclude_unset=True) == entry


@pytest.mark.parametrize(
    ("entry", "why"),
    [
        ({}, "give a path"),
        ({"path": "a", "value": 1}, "give a path"),
        ({"value": 1, "default": 2}, "a constant has no default"),
        ({"path": "a..b"}, "is not a path"),
        ({"path": "a", "as": "b"}, "Extra inputs"),
    ],
)
def test_a_wrong_entry_says_what_an_entry_is(entry: dict[str, Any], why: str) -> None:
    with pytest.raises(ValidationError, match=why):
        SelectField.model_validate(entry)


def test_string_entries_are_paths_and_spreads_have_one_star_on_each_side() -> None:
    assert select_entries({"a": "x.y", "b": {"value": 1}, "c_*": "c.*", "*": "*"}) == {
        "a": {"path": "x.y"},
        "b": {"value": 1},
        "c_*": {"path": "c.*"},
        "*": {"path": "*"},
    }
    for wrong in (
        {"c_*": "c"},
        {"c": "c.*"},
        {"c_*_*": "c.*"},
        {"c_*": {"path": "c.*", "default": 1}},
        {"a": 3},
    ):
        with pytest.raises(ValueError, match="spread|neither a path"):
            select_entries(wrong)
    with pytest.raises(ValueError, match="a table"):
        select_entries({})
