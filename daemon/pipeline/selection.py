"""A pipeline's ``select`` resolved against what its joiner writes: its picks, or what is wrong.

How it works: a joiner declares its main output value (:meth:`Joiner.writes`: each field,
and whether it holds an input's record, a field of one or a typed value), so with the inputs'
schemas every path into that value has an Avro type (:func:`value_shape`). :func:`resolve`
turns the ``[pipeline.select]`` entries into :class:`~daemon.model.selection.Pick` s,
spreads expanded, and says which paths lead nowhere; a start refuses those (a path to nothing
would write nulls), and ``daemon validate`` also checks the output schema against what each
field gets (:mod:`daemon.pipeline.select_checks`).

A joiner that declares nothing, or an input whose schema is not known here (a registry
subject, for ``daemon validate``), leaves the paths into it unchecked: they are read as they
come, and a spread into them cannot be expanded.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from daemon.formats.avro.codec import AvroCodec
from daemon.formats.avro.fits import named_types
from daemon.formats.kafka_keys import KafkaKeyCodec
from daemon.model.config import PipelineConfig
from daemon.model.envelope import row_schema
from daemon.model.keys import KAFKA_KEY
from daemon.model.selection import SPREAD, TIMESTAMP, Pick, SelectField, SelectFunction
from daemon.plugin.fields import Written
from daemon.plugin.joiner import Joiner


@dataclass(frozen=True)
class Typed:
    """What a path of the joiner's value holds: an Avro type and whether it may be null.

    Attributes:
        schema: the Avro type; None when not known here.
        named: the named types it may refer to.
        nullable: it may be null (the value's field is, or a union with null along the way).
        where: what the type comes from, in words, for the problems.
    """

    schema: Any
    named: dict[str, Any]
    nullable: bool = False
    where: str = ""


UNKNOWN = Typed(None, {})


@dataclass(frozen=True)
class ValueShape:
    """The joiner's main output value as a select sees it.

    Attributes:
        joiner: the joiner's name, for the problems.
        fields: each top-level field of the value and what it holds; None: the joiner
            declares nothing.
        key: the output's Kafka key (``kafka_key``): an input's key as it came, in that
            input's key format, or the text the joiner makes.
        key_role: the input whose Kafka key the output's key is (None: a text).
    """

    joiner: str
    fields: dict[str, Typed] | None
    key: Typed
    key_role: str | None = None


def value_shape(
    joiner: Joiner, schemas: Mapping[str, Any], key_types: Mapping[str, Typed]
) -> ValueShape:
    """What ``joiner`` writes to its main output, typed by its inputs' schemas.

    Args:
        joiner: the pipeline's joiner, made with its options and context.
        schemas: each role's record schema (the row of an envelope), or None where unknown.
        key_types: each role's Kafka key type (:func:`key_type`).
    """
    main = next((value for value in joiner.writes() if value.output is None), None)
    if main is None:
        return ValueShape(joiner.name, None, UNKNOWN)
    fields = {written.name: _written(written, schemas) for written in main.fields}
    if main.key_role is None:
        key = Typed("string", {}, where=f"the output's Kafka key ({main.key or 'a text'})")
    else:
        key = key_types.get(main.key_role, UNKNOWN)
    return ValueShape(joiner.name, fields, key, main.key_role)


def _written(written: Written, schemas: Mapping[str, Any]) -> Typed:
    """The type of one declared field of the value."""
    if written.avro is not None:
        schema, named, where = written.avro, {}, f"{written.doc}"
    else:
        role = written.role or ""
        found = schemas.get(role)
        if found is None:
            return Typed(None, {}, written.nullable)
        schema, named = found, named_types(found)
        where = f"the {role!r} input's record"
        if written.path is not None:
            typed = walk(Typed(found, named, where=where), tuple(written.path.split(".")), (role,))
            if isinstance(typed, str):
                return Typed(None, {}, written.nullable)  # reported with the options
            schema, where = typed.schema, f"{where}'s field {written.path!r}"
    if written.many:
        schema = {"type": "array", "items": schema}
    return Typed(schema, named, written.nullable, where)


def envelope_row(schema: Any) -> Any:
    """The row schema of an envelope schema, with the envelope's named types (None: no row)."""
    row = row_schema(schema)
    if row is None:
        return None
    return {**row, "__named_schemas": named_types(schema)}


def key_type(codec: KafkaKeyCodec | None, key_schema: Any = None) -> Typed:
    """A role's Kafka key type: its format's, or an Avro key's schema (None: unknown)."""
    key_format = "string" if codec is None else codec.key_format
    if key_format == "avro":
        schema = key_schema if codec is None or codec.avro is None else codec.avro.schema
        if schema is None:
            return UNKNOWN
        return Typed(schema, named_types(schema), where="the Kafka key's schema")
    if key_format == "json":
        return UNKNOWN  # any JSON value
    return Typed("bytes" if key_format == "bytes" else "string", {}, where="the Kafka key")


def walk(typed: Typed, steps: tuple[str, ...], above: tuple[str, ...] = ()) -> Typed | str:
    """The type at ``steps`` below ``typed``; or why there is none, in words.

    ``above``: the path to ``typed``, for the words. A union with null along the way makes
    the result nullable: a null record has null fields.
    """
    schema, named, nullable = typed.schema, typed.named, typed.nullable
    walked = list(above)
    for name in steps:
        if schema is None:
            return Typed(None, {}, nullable)
        schema, maybe_null = _resolved(schema, named)
        nullable = nullable or maybe_null
        at = ".".join(walked) or "the value"
        if not (isinstance(schema, dict) and schema.get("type") == "record"):
            return f"{at!r} is {_kind(schema)}, which has no field {name!r}"
        fields = {f["name"]: f["type"] for f in schema.get("fields", [])}
        if name not in fields:
            return (
                f"field {name!r} is not in the record at {at!r} ({typed.where}); its fields: "
                + ", ".join(fields)
            )
        schema = fields[name]
        walked.append(name)
    if schema is not None:
        schema, maybe_null = _resolved(schema, named)
        nullable = nullable or maybe_null
    return Typed(schema, named, nullable, typed.where)


def _resolved(schema: Any, named: dict[str, Any]) -> tuple[Any, bool]:
    """A type with names resolved and null dropped from a union: its one other branch."""
    if isinstance(schema, str):
        schema = named.get(schema, schema)
    if isinstance(schema, list):
        others = [named.get(b, b) if isinstance(b, str) else b for b in schema if b != "null"]
        nullable = len(others) < len(schema)
        return (others[0] if len(others) == 1 else others), nullable
    return schema, False


def _kind(schema: Any) -> str:
    if isinstance(schema, list):
        return "a union of " + " | ".join(_kind(branch).split(" ", 1)[-1] for branch in schema)
    kind = schema.get("type") if isinstance(schema, dict) else schema
    return f"an {kind}" if str(kind)[:1] in "aeiou" else f"a {kind}"


@dataclass(frozen=True)
class Resolved:
    """A select resolved against a value shape.

    Attributes:
        picks: the output fields, in order (spreads expanded where they can be).
        types: what each picked field holds, by its name (missing: not known here).
        entries: the entry each picked field comes from, by its name.
        problems: ``(entry, why)`` for each entry that cannot be resolved.
    """

    picks: list[Pick]
    types: dict[str, Typed]
    entries: dict[str, str]
    problems: list[tuple[str, str]]


def resolve(select: Mapping[str, SelectField], shape: ValueShape) -> Resolved:
    """Every entry of ``select`` as picks, each path checked against ``shape``."""
    picks: list[Pick] = []
    types: dict[str, Typed] = {}
    entries: dict[str, str] = {}
    problems: list[tuple[str, str]] = []

    def add(entry: str, pick: Pick, typed: Typed | None) -> None:
        if pick.name in entries:
            also = entries[pick.name]
            problems.append((entry, f"field {pick.name!r} is given twice (also by {also!r})"))
            return
        picks.append(pick)
        entries[pick.name] = entry
        if typed is not None:
            types[pick.name] = typed

    for entry, spec in select.items():
        if spec.path is None:
            add(entry, Pick(entry, "constant", constant=spec.value), None)
            continue
        if SPREAD in entry:
            spread = _spread(entry, spec.path, shape)
            if isinstance(spread, str):
                problems.append((entry, spread))
            else:
                for each, typed in spread:
                    add(entry, each, typed)
            continue
        pick = Pick.of(entry, spec.path, default=spec.default, has_default=spec.has_default)
        found = type_of(pick, shape)
        if isinstance(found, str):
            problems.append((entry, f"{spec.path!r}: {found}"))
        else:
            add(entry, pick, found)
    return Resolved(picks, types, entries, problems)


def type_of(pick: Pick, shape: ValueShape) -> Typed | str:
    """What a path pick holds; or why its path leads nowhere."""
    if pick.source == "timestamp":
        return Typed("long", {}, where="the output's Kafka timestamp")
    if pick.source == "kafka_key":
        if shape.fields is not None and shape.key_role is None and pick.steps:
            return (
                f"the output's Kafka key is a text joiner {shape.joiner!r} makes, with no "
                f"field {pick.steps[0]!r}"
            )
        return walk(shape.key, pick.steps, (KAFKA_KEY,))
    if shape.fields is None:
        return UNKNOWN
    head, *rest = pick.steps
    typed = shape.fields.get(head)
    if typed is None:
        return (
            f"joiner {shape.joiner!r} writes no field {head!r}; its value has "
            + ", ".join(shape.fields)
            + f", and a path may start with {KAFKA_KEY} or {TIMESTAMP}"
        )
    return walk(typed, tuple(rest), (head,))


def _spread(entry: str, path: str, shape: ValueShape) -> list[tuple[Pick, Typed]] | str:
    """The picks of a spread entry (``"customer_*" = "customer.*"``); or why it cannot be."""
    base = path[: -len(SPREAD)].rstrip(".")
    if base:
        pick = Pick.of(entry, base)
        typed = type_of(pick, shape)
        if isinstance(typed, str):
            return f"{path!r}: {typed}"
        schema, _ = _resolved(typed.schema, typed.named)
        if not (isinstance(schema, dict) and schema.get("type") == "record"):
            what = "not known here" if schema is None else _kind(schema)
            return f"{path!r}: {base!r} is {what}, so its fields cannot be listed; name them"
        names = [f["name"] for f in schema["fields"]]
        steps, source = pick.steps, pick.source
    else:
        if shape.fields is None:
            return (
                f"joiner {shape.joiner!r} does not declare what it writes, so its fields "
                "cannot be listed; name them"
            )
        names, steps, source = list(shape.fields), (), "value"
    spread = []
    for name in names:
        pick = Pick(entry.replace(SPREAD, name), source, (*steps, name))
        typed = type_of(pick, shape)
        spread.append((pick, UNKNOWN if isinstance(typed, str) else typed))
    return spread


def select_function(
    pipe: PipelineConfig,
    joiner: Joiner,
    codecs: Mapping[str, AvroCodec],
    key_codecs: Mapping[str, KafkaKeyCodec],
) -> tuple[SelectFunction | None, list[str]]:
    """A start's select: the pipeline's entries resolved with its codecs' schemas.

    Returns:
        The select (None when the pipeline has none) and the problems of its paths, one line
        each (``select.ENTRY: why``), which a start refuses.
    """
    if pipe.select is None:
        return None, []
    schemas = {
        role: envelope_row(codecs[role].schema) if spec.envelope else codecs[role].schema
        for role, spec in pipe.inputs.items()
    }
    key_types = {role: key_type(codec) for role, codec in key_codecs.items()}
    shape = value_shape(joiner, schemas, key_types)
    resolved = resolve(pipe.select, shape)
    problems = [f"select.{entry}: {why}" for entry, why in resolved.problems]
    reader = key_codecs.get(shape.key_role or "")
    read_key = None if reader is None else reader.decode
    return SelectFunction(resolved.picks, read_key), problems

