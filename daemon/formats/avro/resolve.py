"""A decoded value read again with a newer schema, as Avro's schema resolution reads old data.

Why: joiners keep decoded input records in their state (a lookup's table rows, a window's
held records). When an input's schema evolves while such records are held (a field added
with a default, an optional one removed) and the pipeline restarts with the new schema
file, the records decoded before still have the old fields; written into an output whose
nested record follows the new schema, they would fail its strict encoding. Avro resolves
data written with an older schema when it reads it: fields the reader's schema lacks are
skipped, fields it adds take their defaults. :func:`conform` does the same to a value that
was decoded already, with the reader's (the current) schema.

Example:
    >>> import fastavro
    >>> user = fastavro.parse_schema({"type": "record", "name": "User", "fields": [
    ...     {"name": "id", "type": "long"},
    ...     {"name": "email", "type": "string", "default": ""}]})
    >>> conform({"id": 7, "avatar": None}, user)  # decoded when User had an avatar
    {'id': 7, 'email': ''}
"""

from __future__ import annotations

from typing import Any

from daemon.formats.avro.fits import named_types

_PRIMITIVES = frozenset({"null", "boolean", "int", "long", "float", "double", "bytes", "string"})


def conform(value: Any, schema: Any, named: dict[str, Any] | None = None) -> Any:
    """``value`` as a reader with ``schema`` reads it (a new value; ``value`` is left as is).

    Records keep the fields of ``schema`` they have, in its order, each conformed to its
    type; a field they lack takes its default, if it has one (without one it stays missing,
    and the encoding that follows says so). A union conforms a record to its record branch
    that shares the most fields with it. Arrays and maps conform their items; anything else
    is returned as it is.

    Args:
        value: a decoded Avro value (dicts for records).
        schema: a schema parsed by fastavro, or a part of one.
        named: the named types ``schema`` may refer to; by default those it defines.
    """
    return _conform(value, schema, named_types(schema) if named is None else named)


def _conform(value: Any, schema: Any, named: dict[str, Any]) -> Any:
    if isinstance(schema, str) and schema not in _PRIMITIVES:
        schema = named.get(schema, schema)
    if isinstance(schema, list):
        return _conform_union(value, schema, named)
    if not isinstance(schema, dict):
        return value
    kind = schema.get("type")
    if isinstance(kind, (dict, list)) or (isinstance(kind, str) and kind in named):
        return _conform(value, kind, named)
    if kind in ("record", "error") and isinstance(value, dict):
        conformed = {}
        for field in schema.get("fields", []):
            name = field["name"]
            if name in value:
                conformed[name] = _conform(value[name], field["type"], named)
            elif "default" in field:
                conformed[name] = field["default"]
        return conformed
    if kind == "array" and isinstance(value, list):
        return [_conform(item, schema["items"], named) for item in value]
    if kind == "map" and isinstance(value, dict):
        return {key: _conform(item, schema["values"], named) for key, item in value.items()}
    return value


def _conform_union(value: Any, branches: list[Any], named: dict[str, Any]) -> Any:
    if not isinstance(value, dict):
        return value  # a primitive picks its branch by type when it is written
    records = []
    for branch in branches:
        found = named.get(branch, branch) if isinstance(branch, str) else branch
        if isinstance(found, dict) and found.get("type") in ("record", "error"):
            shared = len(value.keys() & {f["name"] for f in found.get("fields", [])})
            records.append((shared, found))
    if not records:
        return value  # a map, say: written as it is
    best = max(records, key=lambda found: found[0])[1]
    return _conform(value, best, named)
