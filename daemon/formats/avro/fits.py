"""Whether the values of one Avro type can be written as another.

``daemon validate`` checks with it that an output schema holds what a joiner writes there.

How it works: the values a joiner writes come from its inputs, decoded with their schemas
(or are of a type it declares), and enrichd encodes output strictly: a record must have
every field of its schema but those with a default, and no field the schema lacks. So an
input record fits an output record type when each of its fields is in the output record and
fits that field's type, and each output field it lacks has a default; numbers widen (an
``int`` fits a ``long``, a ``float`` a ``double``), an enum fits a ``string`` or an enum
with all of its symbols, a union fits when each of its branches does, and a value fits a
union when it fits one branch. Logical types are compared by the type underneath.

Example:
    >>> user = {"type": "record", "name": "User", "fields": [{"name": "id", "type": "int"}]}
    >>> wider = {"type": "record", "name": "View",
    ...          "fields": [{"name": "id", "type": "long"},
    ...                     {"name": "seen", "type": "boolean", "default": False}]}
    >>> misfit(user, {}, wider, {}) is None
    True
    >>> misfit(wider, {}, user, {})
    "field 'id': a long does not fit an int"
"""

from __future__ import annotations

from typing import Any

_PRIMITIVES = frozenset({"null", "boolean", "int", "long", "float", "double", "bytes", "string"})
_WIDER = {
    "int": {"long", "float", "double"},
    "long": {"float", "double"},
    "float": {"double"},
    "fixed": {"bytes"},
}
"""The types a value of each type is also written as (besides its own)."""


def named_types(schema: Any) -> dict[str, Any]:
    """The named types of a schema parsed by fastavro, by full name (empty for others)."""
    return dict(schema.get("__named_schemas", {})) if isinstance(schema, dict) else {}


def misfit(
    source: Any, source_named: dict[str, Any], target: Any, target_named: dict[str, Any]
) -> str | None:
    """Why values of Avro type ``source`` cannot be written as ``target``; None if they can.

    Args:
        source: the type of the values (a parsed schema or a part of one).
        source_named: the named types ``source`` may refer to (:func:`named_types`).
        target: the type they are written as.
        target_named: the named types ``target`` may refer to.
    """
    return _Fit(source_named, target_named).misfit(source, target, set())


class _Fit:
    def __init__(self, source_named: dict[str, Any], target_named: dict[str, Any]) -> None:
        self.source_named = source_named
        self.target_named = target_named

    def misfit(self, source: Any, target: Any, seen: set[tuple[str, str]]) -> str | None:
        source = _resolved(source, self.source_named)
        target = _resolved(target, self.target_named)
        if isinstance(source, list):
            for branch in source:
                why = self.misfit(branch, target, seen)
                if why is not None:
                    return why
            return None
        if isinstance(target, list):
            reasons = [self.misfit(source, branch, seen) for branch in target]
            if any(why is None for why in reasons):
                return None
            # The branch of the same kind says best why it does not fit; else the kinds.
            same = [why for branch, why in zip(target, reasons, strict=True)
                    if _kind(_resolved(branch, self.target_named)) == _kind(source)]  # fmt: skip
            if same:
                return same[0]
            if _kind(source) == "null":
                return f"it may be null, which {_text(target)} cannot hold; add \"null\" to it"
            return f"{_article(source)} does not fit {_text(target)}"
        kind, into = _kind(source), _kind(target)
        if kind == "record" and into == "record":
            pair = (str(source.get("name")), str(target.get("name")))
            if pair in seen:  # a recursive type: checked further up
                return None
            return self.record(source, target, seen | {pair})
        if kind == "array" and into == "array":
            return _inside("items", self.misfit(source["items"], target["items"], seen))
        if kind == "map" and into == "map":
            return _inside("values", self.misfit(source["values"], target["values"], seen))
        if kind == "enum" and into == "enum":
            missing = [s for s in source["symbols"] if s not in target["symbols"]]
            if missing:
                return f"enum symbol {missing[0]!r} is not in {_text(target)}"
            return None
        if kind == "enum" and into == "string":
            return None
        if kind == "fixed" and into == "fixed" and source.get("size") != target.get("size"):
            return f"a fixed of {source.get('size')} bytes does not fit one of {target.get('size')}"
        if kind == into or into in _WIDER.get(kind, ()):
            return None
        if kind == "null":
            where = _article(target)
            return f'it may be null, which {where} cannot hold; make it a union with "null"'
        return f"{_article(source)} does not fit {_article(target)}"

    def record(
        self, source: dict[str, Any], target: dict[str, Any], seen: set[tuple[str, str]]
    ) -> str | None:
        into = {f["name"]: f for f in target.get("fields", [])}
        have = {f["name"]: f for f in source.get("fields", [])}
        for name, written in have.items():
            if name not in into:
                return f"field {name!r} is not in {_text(target)}"
            why = self.misfit(written["type"], into[name]["type"], seen)
            if why is not None:
                return _inside(f"field {name!r}", why)
        for name, field in into.items():
            if name not in have and "default" not in field:
                return f"{_text(target)} has field {name!r}, which has no default and no value"
        return None


def _resolved(schema: Any, named: dict[str, Any]) -> Any:
    if isinstance(schema, str) and schema not in _PRIMITIVES:
        return named.get(schema, schema)
    return schema


def _kind(schema: Any) -> str:
    if isinstance(schema, str):
        return schema
    if isinstance(schema, dict):
        return str(schema.get("type"))
    return "union"


def _text(schema: Any) -> str:
    kind = _kind(schema)
    if isinstance(schema, dict) and "name" in schema:
        return f"{kind} {str(schema['name']).rsplit('.', 1)[-1]}"
    if isinstance(schema, list):
        return " | ".join(_text(branch) for branch in schema)
    return kind


def _article(schema: Any) -> str:
    text = _text(schema)
    return f"an {text}" if text[:1] in "aeiou" else f"a {text}"


def _inside(where: str, why: str | None) -> str | None:
    return None if why is None else f"{where}: {why}"
