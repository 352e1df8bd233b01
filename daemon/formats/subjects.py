"""Registry subjects by convention: Confluent's subject name strategies.

An input or output that uses the Schema Registry (see
:attr:`daemon.model.config._Serde.registry_value`) names its subject with ``subject`` (and its
key's with ``key_subject``), or leaves it to ``subject_name_strategy``, as Confluent's serializers
do:

- ``topic`` (TopicNameStrategy, the default): ``<topic>-value`` and ``<topic>-key``;
- ``record`` (RecordNameStrategy): the record's full name (``namespace.Name``);
- ``topic_record`` (TopicRecordNameStrategy): ``<topic>-<namespace.Name>``.

The record strategies take the record's name from the schema file (``schema``,
``key_schema``), as a serializer takes it from the record it writes.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from daemon.errors import ConfigError
from daemon.formats.avro.codec import load_schema_file

if TYPE_CHECKING:
    from daemon.model.config import InputConfig, OutputConfig, SubjectNameStrategy

Part = Literal["key", "value"]


def value_subject(spec: InputConfig | OutputConfig) -> str | None:
    """The registry subject of the values of ``spec``'s topic; None: plain Avro, no registry.

    Raises:
        ConfigError: a record strategy without the schema file that names the record.
        SchemaError: that schema file is missing or invalid.
    """
    if not spec.registry_value:
        return None
    if spec.subject is not None:
        return spec.subject
    return subject_name(
        spec.subject_name_strategy or "topic", spec.topic, "value", spec.schema_file
    )


def key_subject(spec: InputConfig | OutputConfig) -> str | None:
    """The registry subject of the Avro keys of ``spec``'s topic; None: no registry for keys.

    Raises:
        ConfigError: a record strategy without the key schema file that names the record.
        SchemaError: that schema file is missing or invalid.
    """
    if not spec.registry_key:
        return None
    if spec.key_subject is not None:
        return spec.key_subject
    return subject_name(spec.subject_name_strategy or "topic", spec.topic, "key", spec.key_schema)


def pinned_subjects(spec: InputConfig | OutputConfig) -> dict[str, Any]:
    """Settings that name ``spec``'s subjects outright, whatever its topic is later called.

    For a copy of ``spec`` on another topic (replay's fresh topics) that must still use the
    subjects of the topic it stands for.
    """
    pinned: dict[str, Any] = {}
    if spec.registry_value:
        pinned.update(subject=value_subject(spec), subject_name_strategy=None)
    if spec.registry_key:
        pinned.update(key_subject=key_subject(spec), subject_name_strategy=None)
    return pinned


def subject_name(strategy: SubjectNameStrategy, topic: str, part: Part, schema: Path | None) -> str:
    """The subject of a topic's keys or values under ``strategy``.

    Raises:
        ConfigError: a record strategy without the schema file that names the record, or a
            schema that is not a record.
        SchemaError: the schema file is missing or invalid.
    """
    if strategy == "topic":
        return f"{topic}-{part}"
    setting = "schema" if part == "value" else "key_schema"
    if schema is None:
        subject = "subject" if part == "value" else "key_subject"
        raise ConfigError(
            f'subject_name_strategy = "{strategy}" names the {part} subject after its record: '
            f"give `{setting}` (the record's .avsc file) or `{subject}`"
        )
    parsed = load_schema_file(schema)
    if not isinstance(parsed, dict) or parsed.get("type") != "record":
        raise ConfigError(
            f'subject_name_strategy = "{strategy}" needs a record schema; {setting} {schema} '
            "is not one"
        )
    name = str(parsed["name"])  # fastavro gives the full name, namespace included
    return name if strategy == "record" else f"{topic}-{name}"
