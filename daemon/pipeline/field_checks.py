"""``daemon validate``'s checks of the fields a joiner reads and writes, against the schemas.

How it works: each problem here is one that would send every record to the dead-letter
topic, not one a start would refuse. Options marked :class:`~daemon.plugin.fields.FieldOf`
name a field of an input's records (or of the main output's, for a second stage): the field
must be in that schema, and of the types the mark allows. The joiner's
:meth:`~daemon.plugin.joiner.Joiner.writes` says what it writes to each output: the output's
schema must hold it (:mod:`daemon.formats.avro.fits`), and its other fields need defaults;
with a ``select``, what the select makes of it (:mod:`daemon.pipeline.select_checks`). A
lookup of several tables reads each table's ``lookup_key`` from the record enriched so far:
past its first part (the stream's or an earlier table's field), each path must be a field of
that input's records, or no stream record would ever find a row of that table.

Schemas come from the pipeline's ``.avsc`` files; an input or output whose schema is a
registry subject alone is not checked here (the registry's own checks are
:mod:`daemon.formats.checks`'), and neither is a schema file that does not load (reported
there too). A joiner that declares nothing gets no checks.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from pydantic import BaseModel

from daemon.errors import SchemaError
from daemon.formats.avro.codec import load_schema_file
from daemon.formats.avro.fits import misfit, named_types
from daemon.formats.checks import missing_field, type_at
from daemon.model.config import InputConfig, OutputConfig, PipelineConfig
from daemon.model.envelope import row_schema
from daemon.plugin.fields import MAIN_OUTPUT, FieldOf, OutputValue, Written
from daemon.plugin.joiner import Joiner


class _Schema:
    """A record schema and where it came from, for the problems' words."""

    def __init__(self, schema: Any, source: str, named: dict[str, Any] | None = None) -> None:
        self.schema = schema
        self.named = named_types(schema) if named is None else named
        self.source = source


def field_problems(pipeline: PipelineConfig, where: str, joiner: Joiner) -> list[str]:
    """Every problem of the fields ``joiner`` reads and writes, one line each.

    Args:
        pipeline: the pipeline, whose schemas are checked.
        where: how problems name the pipeline (``FILE: pipeline[i] (NAME)``).
        joiner: the pipeline's joiner, made with its options and context.
    """
    records = {role: _input_schema(spec) for role, spec in pipeline.inputs.items()}
    records[MAIN_OUTPUT] = _schema_of(pipeline.output)
    problems = list(_option_problems(joiner.options, "options", records, where, joiner.name))
    problems += _lookup_key_problems(pipeline, joiner, records, where)
    for value in joiner.writes():
        if value.output is None and pipeline.select is not None:
            continue  # the select writes the main output: daemon.pipeline.select_checks
        spec = pipeline.output if value.output is None else pipeline.outputs.get(value.output)
        if spec is None:
            continue  # an output the pipeline does not configure: reported elsewhere
        at = f"{where}.output" if value.output is None else f"{where}.outputs.{value.output}"
        problems += _output_problems(value, _schema_of(spec), records, at, joiner.name)
    return problems


def _input_schema(spec: InputConfig) -> _Schema | None:
    found = _schema_of(spec)
    if found is None or spec.envelope is None:
        return found
    row = row_schema(found.schema)
    if row is None:
        return None  # not an envelope: reported by daemon.formats.checks
    return _Schema(row, f"the 'after' row of {found.source}", found.named)


def _schema_of(spec: InputConfig | OutputConfig) -> _Schema | None:
    if spec.schema_file is None:
        return None
    try:
        return _Schema(load_schema_file(spec.schema_file), str(spec.schema_file))
    except SchemaError:
        return None


def _option_problems(
    options: BaseModel, prefix: str, records: dict[str, _Schema | None], where: str, joiner: str
) -> Iterator[str]:
    """Problems of the options that name fields, nested option tables too."""
    for name, info in type(options).model_fields.items():
        value = getattr(options, name)
        at = f"{where}.{prefix}.{info.alias or name}"
        if isinstance(value, BaseModel):
            yield from _option_problems(
                value, f"{prefix}.{info.alias or name}", records, where, joiner
            )
            continue
        mark = next((m for m in info.metadata if isinstance(m, FieldOf)), None)
        if mark is None or value is None:
            continue
        paths = list(value) if isinstance(value, list | tuple) else [value]
        record = records.get(mark.role)
        if record is None:
            continue
        for path in paths:
            problem = _named_field_problem(str(path), mark, record, joiner)
            if problem is not None:
                yield f"{at}: {problem}"


def _lookup_key_problems(
    pipeline: PipelineConfig, joiner: Joiner, records: dict[str, _Schema | None], where: str
) -> Iterator[str]:
    """A chain's ``lookup_key`` paths that name no field of the record they read.

    Such a key is null for every stream record: each gets the table's no-row answer (in
    ``inner`` mode, none at all), with no dead letter to say why.
    """
    chain = joiner.chain()
    if chain is None:
        return
    roles = {pipeline.field_of(role): role for role in pipeline.inputs}
    for stage in chain.stages:
        for path in stage.paths:
            head, _, rest = path.partition(".")
            role = roles.get(head)
            record = records.get(role) if role is not None else None
            if record is None or not rest:
                continue  # an unknown head is the joiner's to refuse; a schema not known here
            missing = missing_field(record.schema, rest, record.named)
            if missing is not None:
                name, known = missing
                yield (
                    f"{where}.options.tables ({stage.table}): lookup_key {path!r}: field "
                    f"{name!r} is not in the {role!r} input's schema {record.source}, so no "
                    f"stream record would find a row of {stage.table!r}; its fields: "
                    f"{', '.join(known) or 'none'}"
                )


def _named_field_problem(path: str, mark: FieldOf, record: _Schema, joiner: str) -> str | None:
    whose = "output" if mark.role == MAIN_OUTPUT else f"{mark.role!r} input"
    missing = missing_field(record.schema, path, record.named)
    if missing is not None:
        name, known = missing
        return (
            f"field {name!r} is not in the {whose}'s schema {record.source}, so joiner "
            f"{joiner!r} would dead-letter every record; its fields: {', '.join(known) or 'none'}"
        )
    if mark.types:
        found = type_at(record.schema, path, record.named)
        kinds = _kinds(found, record.named)
        if not kinds <= set(mark.types):
            return (
                f"field {path!r} of {record.source} is {' | '.join(sorted(kinds))}; joiner "
                f"{joiner!r} needs {' or '.join(mark.types)} there"
            )
    return None


def _kinds(schema: Any, named: dict[str, Any]) -> set[str]:
    """The Avro types of a field's values, a union's null left out."""
    if isinstance(schema, str):
        schema = named.get(schema, schema)
    if isinstance(schema, list):
        return {kind for branch in schema if branch != "null" for kind in _kinds(branch, named)}
    if isinstance(schema, dict):
        return {str(schema.get("type"))}
    return {str(schema)}


def _output_problems(
    value: OutputValue,
    output: _Schema | None,
    records: dict[str, _Schema | None],
    at: str,
    joiner: str,
) -> Iterator[str]:
    """Whether an output's schema holds what the joiner writes there; one line a problem."""
    if output is None:
        return
    fields = {f["name"]: f for f in output.schema.get("fields", [])}
    for written in value.fields:
        if written.name not in fields:
            yield (
                f"{at}.schema: {output.source} has no field {written.name!r}, where joiner "
                f"{joiner!r} writes {written.doc}; add it"
            )
            continue
        source = _written_type(written, records)
        if source is None:
            continue  # the input's schema is not known here
        schema, named = source
        why = misfit(schema, named, fields[written.name]["type"], output.named)
        if why is not None:
            yield (
                f"{at}.schema: field {written.name!r} of {output.source} cannot hold "
                f"{written.doc} ({written.type_text()}): {why}"
            )
    for name, field in fields.items():
        if name not in value.names and "default" not in field:
            yield (
                f"{at}.schema: field {name!r} of {output.source} has no default, and joiner "
                f"{joiner!r} does not write it (it writes {', '.join(value.names)}); give it "
                "a default or remove it"
            )


def _written_type(
    written: Written, records: dict[str, _Schema | None]
) -> tuple[Any, dict[str, Any]] | None:
    """The Avro type of what a written field holds, with the named types it refers to."""
    if written.avro is not None:
        schema, named = written.avro, {}
    else:
        record = records.get(written.role or "")
        if record is None:
            return None
        schema, named = record.schema, record.named
        if written.path is not None:
            schema = type_at(record.schema, written.path, record.named)
            if schema is None:
                return None  # an option naming a missing field: reported with the options
    if written.many:
        schema = {"type": "array", "items": schema}
    if written.nullable:
        schema = ["null", *(schema if isinstance(schema, list) else [schema])]
    return schema, named
