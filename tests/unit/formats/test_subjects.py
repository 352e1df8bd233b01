"""Subjects by Confluent's naming strategies (daemon/formats/subjects.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from daemon.errors import ConfigError
from daemon.formats.subjects import key_subject, value_subject
from daemon.model.config import InputConfig, OutputConfig

SCHEMAS = Path(__file__).resolve().parents[3] / "schemas"
USER = SCHEMAS / "user.avsc"  # enrichd.examples.User
KEY = SCHEMAS / "customer_key.avsc"  # shop.public.customers.Key


def spec(**settings: Any) -> InputConfig:
    return InputConfig.model_validate({"topic": "users", "key": "id", **settings})


def test_no_schema_and_no_subject_is_the_topic_name_strategy() -> None:
    assert value_subject(spec()) == "users-value"
    assert key_subject(spec(key_format="avro")) == "users-key"
    assert key_subject(spec()) is None  # text keys have no schema


def test_a_schema_file_alone_is_plain_avro() -> None:
    assert value_subject(spec(schema=str(USER))) is None
    assert key_subject(spec(key_format="avro", key_schema=str(KEY))) is None


@pytest.mark.parametrize(
    ("strategy", "value", "key"),
    [
        ("topic", "users-value", "users-key"),
        ("record", "enrichd.examples.User", "shop.public.customers.Key"),
        ("topic_record", "users-enrichd.examples.User", "users-shop.public.customers.Key"),
    ],
)
def test_each_strategy_names_subjects_as_confluent_does(
    strategy: str, value: str, key: str
) -> None:
    named = spec(
        schema=str(USER),
        key_format="avro",
        key_schema=str(KEY),
        subject_name_strategy=strategy,
    )
    assert (value_subject(named), key_subject(named)) == (value, key)


def test_explicit_subjects_win() -> None:
    named = spec(subject="people", key_format="avro", key_subject="people-ids")
    assert (value_subject(named), key_subject(named)) == ("people", "people-ids")


def test_a_record_strategy_needs_the_file_that_names_the_record() -> None:
    with pytest.raises(ConfigError, match="give `schema` .* or `subject`"):
        value_subject(spec(subject_name_strategy="record"))
    with pytest.raises(ConfigError, match="give `key_schema`"):
        key_subject(spec(subject_name_strategy="topic_record", key_format="avro"))


def test_auto_register_puts_an_output_schema_file_under_its_subject() -> None:
    output = OutputConfig.model_validate(
        {"topic": "views", "schema": str(USER), "auto_register": True}
    )
    assert value_subject(output) == "views-value"
