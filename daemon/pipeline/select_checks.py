"""``daemon validate``'s checks of a pipeline's ``select``: its paths, and the output schema.

How it works: the select's entries are resolved against the joiner's value, typed by the
inputs' ``.avsc`` files (:mod:`daemon.pipeline.selection`): a path that leads nowhere is a
problem. Then the output schema must hold the record the select makes, as the joiner's own
value is checked without one (:mod:`daemon.pipeline.field_checks`): every field the select
names is in the schema and can hold what it gets there (a path that may be null needs a
union with null, or a ``default``), a constant or a default is a value of its field's type,
and every field the select does not name has a default. Each problem is one line, naming the
entry (``select.customer_name``), or the select for a field it leaves out.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import fastavro
from fastavro.validation import validate

from daemon.errors import SchemaError
from daemon.formats.avro.codec import load_schema_file
from daemon.formats.avro.fits import misfit, named_types
from daemon.formats.kafka_keys import KafkaKeyCodec
from daemon.model.config import InputConfig, OutputConfig, PipelineConfig
from daemon.pipeline.selection import Typed, envelope_row, key_type, resolve, value_shape
from daemon.plugin.joiner import Joiner


def select_problems(pipeline: PipelineConfig, where: str, joiner: Joiner) -> list[str]:
    """Every problem of the pipeline's ``select``, one line each (none without a select).

    Args:
        pipeline: the pipeline, whose schema files are read.
        where: how problems name the pipeline (``FILE: pipeline[i] (NAME)``).
        joiner: the pipeline's joiner, made with its options and context.
    """
    if pipeline.select is None:
        return []
    schemas = {role: _input_schema(spec) for role, spec in pipeline.inputs.items()}
    key_types = {role: _key_type(spec) for role, spec in pipeline.inputs.items()}
    resolved = resolve(pipeline.select, value_shape(joiner, schemas, key_types))
    problems = [f"{where}.select.{entry}: {why}" for entry, why in resolved.problems]
    output = _load(pipeline.output)
    if output is None:
        return problems  # a registry subject, or a file reported elsewhere
    source = str(pipeline.output.schema_file)
    named = named_types(output)
    fields = {f["name"]: f for f in output.get("fields", [])}
    for pick in resolved.picks:
        at = f"{where}.select.{resolved.entries[pick.name]}"
        if pick.name not in fields:
            problems.append(
                f"{at}: {source} has no field {pick.name!r}; add it, or name the entry after "
                f"one of its fields: {', '.join(fields)}"
            )
            continue
        target = fields[pick.name]["type"]
        if pick.source == "constant":
            problems += _value_problems(at, "the constant", pick.constant, pick.name, target, named)
            continue
        if pick.has_default:
            problems += _value_problems(at, "the default", pick.default, pick.name, target, named)
        typed = resolved.types.get(pick.name)
        if typed is not None and typed.schema is not None:
            why = misfit(_written(typed, pick.has_default), typed.named, target, named)
            if why is not None:
                path = ".".join(pick.steps) or pick.source
                problems.append(
                    f"{at}: field {pick.name!r} of {source} cannot hold {path!r} "
                    f"({_described(typed, pick.has_default)}): {why}"
                    + ("; or give the entry a default" if "null" in why else "")
                )
    # An entry whose path was reported names its field all the same: one line a mistake.
    given = set(resolved.entries) | {entry for entry, _ in resolved.problems}
    problems += [
        f"{where}.select: field {name!r} of {source} has no default, and no entry of the "
        "select names it; add one, or give the field a default"
        for name, field in fields.items()
        if name not in given and "default" not in field
    ]
    return problems


def _written(typed: Typed, defaulted: bool) -> Any:
    """The type written from a path: a union with null where it may be null (no default)."""
    if typed.nullable and not defaulted:
        return ["null", *(typed.schema if isinstance(typed.schema, list) else [typed.schema])]
    return typed.schema


def _described(typed: Typed, defaulted: bool) -> str:
    schema = typed.schema
    kind = schema.get("name", schema.get("type")) if isinstance(schema, dict) else schema
    text = " | ".join(map(str, kind)) if isinstance(kind, list) else str(kind)
    return f"{text} | null" if typed.nullable and not defaulted else text


def _value_problems(
    at: str, what: str, value: Any, name: str, target: Any, named: dict[str, Any]
) -> Iterator[str]:
    """Whether ``value`` is a value of ``target``, the output field ``name``'s type."""
    expanded = fastavro.parse_schema(target, named_schemas=dict(named), expand=True)
    if not validate(value, expanded, raise_errors=False):
        yield f"{at}: {what} {value!r} is not a value of field {name!r} ({_type_text(target)})"


def _type_text(schema: Any) -> str:
    if isinstance(schema, list):
        return " | ".join(_type_text(branch) for branch in schema)
    if isinstance(schema, dict):
        return str(schema.get("name", schema.get("type")))
    return str(schema)


def _input_schema(spec: InputConfig) -> Any:
    schema = _load(spec)
    if schema is None or spec.envelope is None:
        return schema
    return envelope_row(schema)  # None when no envelope: reported by daemon.formats.checks


def _key_type(spec: InputConfig) -> Typed:
    key_schema = None
    if spec.key_format == "avro" and spec.key_schema is not None:
        try:
            key_schema = load_schema_file(spec.key_schema)
        except SchemaError:
            pass  # reported by daemon.formats.checks
    return key_type(KafkaKeyCodec(spec.key_format), key_schema)


def _load(spec: InputConfig | OutputConfig) -> Any:
    if spec.schema_file is None:
        return None
    try:
        return load_schema_file(spec.schema_file)
    except SchemaError:
        return None
