"""What a registered joiner offers, read from its class: roles, options, semantics.

How it works: a joiner's options are its pydantic ``Options`` model, so everything
``daemon plugins list``/``describe`` and ``daemon validate`` say about options is derived from
``model_fields``: the annotation gives the type (``Literal`` gives the choices, ``DurationMs``
shows as ``duration``), the field gives the default, whether it is required and its
description. Nothing is declared twice, so a plugin author documents an option once, in
``Field(description=...)``. An option marked :class:`~daemon.plugin.fields.FieldOf` says
which input's field it names. What the joiner writes comes from its
:meth:`~daemon.plugin.joiner.Joiner.writes`, asked of a joiner made with its default
options (a required option stands as ``<name>``) and each role's field named after the role.

Example:
    >>> from daemon.plugin.host import registry
    >>> info = describe_joiner(registry().get("comap"))
    >>> [option.name for option in info.options]
    ['many_id', 'max_many_per_key', 'many_deleted_field', 'state_ttl']
"""

from __future__ import annotations

import inspect
import types
import typing
from dataclasses import dataclass
from typing import Any, Literal, get_args, get_origin

from pydantic.fields import FieldInfo
from pydantic_core import to_jsonable_python

from daemon.model.durations import DurationMs
from daemon.plugin.configured import configure
from daemon.plugin.fields import MAIN_OUTPUT, FieldOf, OutputValue
from daemon.plugin.host import RegisteredJoiner
from daemon.plugin.joiner import Joiner

# The validator object inside the DurationMs alias; pydantic keeps this very object in a
# field's metadata, which is how a duration option is told apart from a plain int.
_DURATION_MARK = get_args(DurationMs)[1]
_UNITS = (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1000))


@dataclass(frozen=True)
class OptionInfo:
    """One joiner option as users see it.

    Attributes:
        name: the key in ``[pipeline.options]``.
        type: the type in words, e.g. ``int``, ``duration | None``, ``"inner" | "left"``.
        required: whether the pipeline must set it.
        default: the default value (None when required or when the default is None).
        description: the ``Field(description=...)`` text, or "".
        choices: the allowed values of a ``Literal`` option, else None.
        field_of: the role whose records hold the field the option names
            (:class:`~daemon.plugin.fields.FieldOf`; ``output``: the main output's), else None.
    """

    name: str
    type: str
    required: bool
    default: Any
    description: str
    choices: tuple[Any, ...] | None = None
    field_of: str | None = None

    def type_and_field(self) -> str:
        """The type, and whose field the option names, e.g. ``str, a field of many``."""
        if self.field_of is None:
            return self.type
        whose = "the output" if self.field_of == MAIN_OUTPUT else self.field_of
        return f"{self.type}, a field of {whose}"

    def default_text(self) -> str:
        """Write the default as a user would write it in the pipeline file."""
        if self.required:
            return "(required)"
        if self.type.startswith("duration") and isinstance(self.default, int):
            return f'"{format_duration_ms(self.default)}"'
        if isinstance(self.default, str):
            return f'"{self.default}"'
        if isinstance(self.default, bool):
            return "true" if self.default else "false"
        return "none" if self.default is None else str(self.default)

    def to_json(self) -> dict[str, Any]:
        """Return a JSON-ready mapping (``choices`` only for Literal options)."""
        data: dict[str, Any] = {
            "type": self.type,
            "default": None if self.required else to_jsonable_python(self.default, fallback=str),
            "required": self.required,
            "description": self.description,
        }
        if self.choices is not None:
            data["choices"] = list(self.choices)
        if self.field_of is not None:
            data["field_of"] = self.field_of
        return data


@dataclass(frozen=True)
class OutputInfo:
    """What a joiner writes to one output, as users see it.

    Attributes:
        output: ``output`` for the main output, else the secondary output's name.
        key: what the Kafka key is.
        tombstones: when a tombstone is written instead.
        fields: each field's name, what it holds as a type, and in words.
    """

    output: str
    key: str
    tombstones: str
    fields: tuple[tuple[str, str, str], ...]

    def to_json(self) -> dict[str, Any]:
        """Return a JSON-ready mapping."""
        return {
            "output": self.output,
            "key": self.key,
            "tombstones": self.tombstones,
            "fields": [{"name": n, "type": t, "holds": d} for n, t, d in self.fields],
        }


@dataclass(frozen=True)
class JoinerInfo:
    """A registered joiner as users see it.

    Attributes:
        name: the name pipelines use.
        plugin: the entry-point name of the plugin that registered it.
        distribution: the installed distribution providing the plugin ("?" when unknown).
        version: that distribution's version.
        description: one line.
        implemented: False for a registered placeholder that pipelines may not use yet.
        roles: the input roles.
        options: the options, in declaration order.
        semantics: the semantics paragraphs.
        outputs: what it writes with its default options; empty when it does not declare it
            (:meth:`~daemon.plugin.joiner.Joiner.writes`).
        headers: whose headers an output carries under ``headers_from = "inputs"``, or
            that the joiner refuses it.
    """

    name: str
    plugin: str
    distribution: str
    version: str
    description: str
    implemented: bool
    roles: tuple[str, ...]
    options: tuple[OptionInfo, ...]
    semantics: str
    outputs: tuple[OutputInfo, ...] = ()
    headers: str = ""

    def option_names(self) -> list[str]:
        """Return the option names, in declaration order."""
        return [option.name for option in self.options]

    def to_json(self) -> dict[str, Any]:
        """Return a JSON-ready mapping; ``options`` maps each name to its details."""
        return {
            "name": self.name,
            "plugin": self.plugin,
            "distribution": self.distribution,
            "version": self.version,
            "description": self.description,
            "implemented": self.implemented,
            "roles": list(self.roles),
            "options": {option.name: option.to_json() for option in self.options},
            "semantics": self.semantics,
            "outputs": [output.to_json() for output in self.outputs],
            "headers": self.headers,
        }


def format_duration_ms(ms: int) -> str:
    """Write milliseconds in the largest duration unit that divides them evenly."""
    for unit, size in _UNITS:
        if ms and ms % size == 0:
            return f"{ms // size}{unit}"
    return f"{ms}ms"


def type_text(annotation: Any, metadata: list[Any] | tuple[Any, ...] = ()) -> str:
    """Describe a pydantic field annotation in the words of the pipeline file.

    Args:
        annotation: the field's annotation (pydantic strips a top-level ``Annotated``).
        metadata: the field's metadata, where a top-level ``Annotated``'s extras end up.

    Returns:
        E.g. ``str``, ``duration | None``, ``"inner" | "left"``, ``list[str]``.
    """
    if any(item is _DURATION_MARK for item in metadata):
        return "duration"
    origin = get_origin(annotation)
    if origin is typing.Annotated:
        base, *extras = get_args(annotation)
        return type_text(base, extras)
    if origin is Literal:
        return " | ".join(_literal_text(value) for value in get_args(annotation))
    if origin in (typing.Union, types.UnionType):
        return " | ".join(type_text(arg) for arg in get_args(annotation))
    if annotation is type(None):
        return "None"
    if origin is not None:
        args = ", ".join(type_text(arg) for arg in get_args(annotation))
        return f"{getattr(origin, '__name__', str(origin))}[{args}]"
    return getattr(annotation, "__name__", str(annotation))


def _literal_text(value: Any) -> str:
    return f'"{value}"' if isinstance(value, str) else str(value)


def _choices(annotation: Any) -> tuple[Any, ...] | None:
    """Find the Literal values of an annotation, through ``Optional`` and ``Annotated``."""
    origin = get_origin(annotation)
    if origin is Literal:
        return get_args(annotation)
    if origin is typing.Annotated:
        return _choices(get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        found = [c for arg in get_args(annotation) if (c := _choices(arg)) is not None]
        return tuple(value for choices in found for value in choices) if found else None
    return None


def describe_option(name: str, field: FieldInfo) -> OptionInfo:
    """One option's user-facing description, from its pydantic field."""
    required = field.is_required()
    default = None if required else field.get_default(call_default_factory=True)
    return OptionInfo(
        name=field.alias or name,
        type=type_text(field.annotation, field.metadata),
        required=required,
        default=default,
        description=field.description or "",
        choices=_choices(field.annotation),
        field_of=next((m.role for m in field.metadata if isinstance(m, FieldOf)), None),
    )


def default_outputs(registered: RegisteredJoiner) -> tuple[OutputInfo, ...]:
    """What the joiner writes with its default options (see the module docstring)."""
    cls = registered.cls
    placeholders = {
        name: f"<{field.alias or name}>"
        for name, field in cls.Options.model_fields.items()
        if field.is_required()
    }
    try:
        # Not validated: a placeholder stands where a required option's value would be.
        options = cls.Options.model_construct(None, **placeholders)
        joiner = configure(cls, options, pipeline="PIPELINE")
        values: tuple[OutputValue, ...] = tuple(joiner.writes())
    except Exception:  # a joiner that needs real options to say: nothing to show
        return ()
    return tuple(
        OutputInfo(
            output=value.output or MAIN_OUTPUT,
            key=value.key,
            tombstones=value.tombstones,
            fields=tuple((f.name, f.type_text(), f.doc) for f in value.fields),
        )
        for value in values
    )


def describe_joiner(registered: RegisteredJoiner) -> JoinerInfo:
    """Everything users are told about a registered joiner."""
    cls = registered.cls
    return JoinerInfo(
        name=cls.name,
        plugin=registered.plugin.name,
        distribution=registered.plugin.distribution,
        version=registered.plugin.version,
        description=cls.description,
        implemented=bool(cls.implemented),
        roles=tuple(cls.roles),
        options=tuple(
            describe_option(name, field) for name, field in cls.Options.model_fields.items()
        ),
        # cleandoc: class docstrings keep their source indentation on Python < 3.13.
        semantics=inspect.cleandoc(cls.semantics()),
        outputs=default_outputs(registered),
        headers=inputs_headers(cls),
    )


def inputs_headers(cls: type[Joiner]) -> str:
    """Whose headers the joiner's outputs carry under ``headers_from = "inputs"``."""
    if not cls.merges_headers:
        return (
            'one record\'s headers per output: a pipeline with headers_from = "inputs" is refused'
        )
    whose = cls.inputs_headers or "every input record that made it, the record it is about last"
    return f'with headers_from = "inputs": {whose}'


__all__ = [
    "JoinerInfo",
    "OptionInfo",
    "OutputInfo",
    "default_outputs",
    "describe_joiner",
    "describe_option",
    "inputs_headers",
    "format_duration_ms",
    "type_text",
]
