"""``daemon validate``'s checks of one input's or output's schemas, keys, envelope and subjects.

Without the network: the schema files load and are records; the key's and event time's
fields are in the value's schema (in the row of a Debezium envelope); a part taken from a
field of the Kafka key has a key format with fields, and is in the key schema; a subject
that a strategy names after its record has the schema file that names it; a registry is
configured wherever one is needed.

With a :class:`RegistryCheck` (``[schema_registry]`` set and no ``--offline``), also what a
start would ask the registry: each subject that gives a schema is registered (and its
schema then has the key's and time's fields), each output schema file is registered under
its subject, or with ``auto_register`` is compatible with it. The first failure to use the
registry at all (refused credentials, no answer) is reported once, and the checks that need
it stop there.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from fastavro.types import Schema

from daemon.errors import ConfigError, SchemaError, SchemaRegistryUnavailableError
from daemon.formats.avro.codec import load_schema_file, record_fields
from daemon.formats.serdes import compatibility_problems, latest_schema, registry_client, schema_id
from daemon.formats.subjects import key_subject, value_subject
from daemon.model.config import InputConfig, OutputConfig, PipelineFile
from daemon.model.envelope import row_schema
from daemon.model.keys import key_parts

if TYPE_CHECKING:
    from daemon.model.keys import KeyPart

Spec = InputConfig | OutputConfig


class RegistryCheck:
    """The registry of a pipeline file, as ``daemon validate`` asks it.

    Raises (on construction):
        ConfigError: the client does not take ``[schema_registry]``'s settings.
    """

    def __init__(self, file: PipelineFile) -> None:

        self.client, self.url, _ = registry_client(file, "")
        self.unavailable: str | None = None
        """Why the registry cannot be used, once a request said so."""
        self.reported = False

    def ask(self, where: str, call: Any, *args: Any) -> tuple[Any, list[str]]:
        """``call(self.client, *args)`` and the problems it raised, reported at ``where``.

        Returns ``(None, [])`` once the registry is known to be unusable (reported once).
        """
        if self.unavailable is not None:
            return None, []
        try:
            return call(self.client, self.url, *args), []
        except SchemaRegistryUnavailableError as exc:
            self.unavailable = str(exc)
            return None, [f"{where}: {exc}"]
        except ConfigError as exc:
            return None, [f"{where}: {exc}"]


def serde_problems(
    parsed: PipelineFile, spec: Spec, where: str, registry: RegistryCheck | None
) -> list[str]:
    """Every problem of one input's or output's serdes, one line each (see the module doc)."""
    problems = _needs_a_registry(parsed, spec, where)
    if problems:
        registry = None
    schema = _load(spec.schema_file, f"{where}.schema", problems)
    _load(spec.writer_schema, f"{where}.writer_schema", problems)
    key_schema = _load(spec.key_schema, f"{where}.key_schema", problems)
    source = str(spec.schema_file)
    subjects = {}
    for part, name_of, setting in (
        ("value", value_subject, "subject_name_strategy"),
        ("key", key_subject, "subject_name_strategy"),
    ):
        try:
            subjects[part] = name_of(spec)
        except SchemaError:
            continue  # the schema file's own problem, reported above
        except ConfigError as exc:
            problems.append(f"{where}.{setting}: {exc}")
    if registry is not None:
        value = subjects.get("value")
        if value is not None:
            fetched = _registered(registry, spec, value, spec.schema_file, where, problems)
            if fetched is not None:
                schema, source = fetched, f"subject {value!r}"
        key = subjects.get("key")
        if key is not None:
            fetched = _registered(registry, spec, key, spec.key_schema, where, problems)
            key_schema = fetched if fetched is not None else key_schema
    if schema is not None and not record_fields(schema):
        problems.append(f"{where}.schema: {source}: not an Avro record schema")
    elif schema is not None and isinstance(spec, InputConfig):
        problems += _field_problems(spec, schema, source, where)
    if isinstance(spec, InputConfig):
        problems += _kafka_key_problems(spec, key_schema, where)
    return problems


def _needs_a_registry(parsed: PipelineFile, spec: Spec, where: str) -> list[str]:
    if parsed.schema_registry is not None:
        return []
    problems = []
    if spec.subject is not None:
        problems.append(
            f"{where}.subject: a subject needs a [schema_registry] section with its url; "
            "add one or give `schema` (an .avsc file) instead"
        )
    elif spec.registry_value:
        why = (
            "no `schema`: the schema comes from the registry subject "
            f"'{spec.topic}-value' (or the one `subject_name_strategy` names)"
            if spec.schema_file is None
            else "`subject_name_strategy` and `auto_register` name a registry subject"
        )
        problems.append(f"{where}: {why}, which needs a [schema_registry] section")
    if spec.registry_key:
        problems.append(
            f'{where}.key_format: an "avro" key without `key_schema` (or with `key_subject`) '
            "is read with a registry subject, which needs a [schema_registry] section; add "
            "one or give `key_schema` (an .avsc file)"
        )
    return problems


def _load(path: Path | None, where: str, problems: list[str]) -> Schema | None:
    if path is None:
        return None
    try:
        return load_schema_file(path)
    except SchemaError as exc:
        problems.append(f"{where}: {exc}")
        return None


def _registered(
    registry: RegistryCheck,
    spec: Spec,
    subject: str,
    schema_file: Path | None,
    where: str,
    problems: list[str],
) -> Schema | None:
    """Check ``subject`` as a start would use it; the schema it gives, if it gives one."""
    if schema_file is None:
        latest, found = registry.ask(where, latest_schema, subject)
        problems += found
        return latest  # type: ignore[no-any-return]
    if not isinstance(spec, OutputConfig):
        return None  # an input's schema file is its reader schema: no subject is read
    if spec.auto_register:
        reasons, found = registry.ask(where, compatibility_problems, subject, schema_file)
        problems += found + [f"{where}: {reason}" for reason in reasons or []]
        return None

    def lookup(client: Any, url: str) -> int:
        return schema_id(client, url, subject, schema_file, register=False)

    _, found = registry.ask(where, lookup)
    problems += found
    return None


def _field_problems(spec: InputConfig, schema: Schema, source: str, where: str) -> list[str]:
    """The key's and event time's value fields, in the value's record (or envelope's row)."""
    row = schema
    if spec.envelope is not None:
        row = row_schema(schema)
        if row is None:
            return [
                f"{where}.envelope: {source} is not a Debezium envelope (a record with an `op` "
                "field and an `after` record); give the envelope's schema"
            ]
        source = f"the 'after' row of {source}"
    problems = []
    named = schema.get("__named_schemas", {}) if isinstance(schema, dict) else {}
    value_parts = [part.path for part in key_parts(spec.key) if not part.from_kafka_key]
    for attribute, paths in (("key", value_parts), ("time", [spec.time] if spec.time else [])):
        for path in paths:
            missing = missing_field(row, path, named)
            if missing is not None:
                name, fields = missing
                problems.append(
                    f"{where}.{attribute}: field {name!r} is not in schema {source}; "
                    f"its fields: {', '.join(fields)}"
                )
    return problems


def _kafka_key_problems(spec: InputConfig, key_schema: Schema | None, where: str) -> list[str]:
    problems = []
    for part in key_parts(spec.key):
        if not part.from_kafka_key:
            continue
        if part.path and spec.key_format in ("string", "bytes"):
            problems.append(
                f"{where}.key: {part.name!r} names a field of the Kafka key, which needs "
                f'key_format = "avro" or "json" (key_format is "{spec.key_format}")'
            )
        elif key_schema is not None:
            problems += _key_schema_problems(part, key_schema, where)
    return problems


def _key_schema_problems(part: KeyPart, key_schema: Schema, where: str) -> list[str]:
    fields = record_fields(key_schema)
    if not part.path:
        if fields:
            return [
                f"{where}.key: the Kafka key is a record ({', '.join(fields)}); name its "
                f"field, e.g. 'kafka_key.{fields[0]}'"
            ]
        return []
    named = key_schema.get("__named_schemas", {}) if isinstance(key_schema, dict) else {}
    missing = missing_field(key_schema, part.path, named)
    if missing is None:
        return []
    name, known = missing
    return [
        f"{where}.key: field {name!r} is not in the key schema; its fields: "
        + (", ".join(known) or "none: the key is one value; use 'kafka_key'")
    ]


def missing_field(
    schema: Any, path: str, named: dict[str, Any]
) -> tuple[str, tuple[str, ...]] | None:
    """The first name of dotted ``path`` not in its record, with that record's fields; None."""
    found = _walk(schema, path, named)
    return None if isinstance(found, _Found) else found


def type_at(schema: Any, path: str, named: dict[str, Any] | None = None) -> Any:
    """The Avro type of the field at dotted ``path`` of a record schema; None if absent.

    ``named``: the named types it may refer to; by default those fastavro parsed with it.
    """
    if named is None:
        named = schema.get("__named_schemas", {}) if isinstance(schema, dict) else {}
    found = _walk(schema, path, named)
    return found.type if isinstance(found, _Found) else None


class _Found:
    def __init__(self, type_: Any) -> None:
        self.type = type_


def _walk(schema: Any, path: str, named: dict[str, Any]) -> _Found | tuple[str, tuple[str, ...]]:
    current = schema
    for name in path.split("."):
        current = _record_of(current, named)
        fields = {} if current is None else {f["name"]: f["type"] for f in current["fields"]}
        if name not in fields:
            return name, tuple(fields)
        current = fields[name]
    return _Found(current)


def _record_of(schema: Any, named: dict[str, Any]) -> dict[str, Any] | None:
    """The record a field's type is: itself, by name, or the record branch of a union."""
    if isinstance(schema, str):
        schema = named.get(schema)
    if isinstance(schema, list):
        records = [_record_of(branch, named) for branch in schema if branch != "null"]
        return records[0] if len(records) == 1 else None
    if isinstance(schema, dict) and schema.get("type") == "record":
        return schema
    return None
