"""What a registered joiner offers, read from its class: roles, options, semantics.

How it works: a joiner's options are its pydantic ``Options`` model, so everything
``daemon plugins list``/``describe`` and ``daemon validate`` say about options is derived from
``model_fields``: the annotation gives the type (``Literal`` gives the choices, ``DurationMs``
shows as ``duration``), the field gives the default, whether it is required and its
description. Nothing is declared twice, so a plugin author documents an option once, in
``Field(description=...)``.

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
from daemon.plugin.host import RegisteredJoiner

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
    """

    name: str
    type: str
    required: bool
    default: Any
    description: str
    choices: tuple[Any, ...] | None = None

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
        return data


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
    )


__all__ = [
    "JoinerInfo",
    "OptionInfo",
    "describe_joiner",
    "describe_option",
    "format_duration_ms",
    "type_text",
]
