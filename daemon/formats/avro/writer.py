"""A fast Avro encoder: a parsed schema compiled into one Python function.

Why: encoding with fastavro's ``schemaless_writer`` was a large share of the joiner
operator's time. Most of it goes to choosing union branches, which fastavro does by
validating the value against each branch, and to per-call set-up. The compiled function
picks a branch by the value's Python type, several times faster. It is generated as source
text, with every nested type written inline, because a Python call per field (closures)
gave back much of the gain.

It is exact or it is not used. It accepts only the values each Avro type is commonly written
from, of exactly that Python type (``int`` for int and long, ``str`` for string and enum, a
``dict`` with no unknown keys for a record, ...), and raises for anything else
(:class:`Unwritable`, or e.g. a missing field's ``KeyError``);
:meth:`daemon.formats.avro.codec.AvroCodec.encode` then encodes with fastavro, whose bytes or error
stand, and counts the fallback. So for every value it accepts, its bytes are fastavro's (a
hypothesis test compares the two over the project's schemas). Schemas it cannot compile at
all (logical types other than the time ones on int and long, unions whose branches it cannot
tell apart by Python type, recursive types) give None, and fastavro encodes all their values.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from functools import cache
from typing import Any

from daemon.formats.avro.codegen import FunctionText

_TIME_LOGICAL_TYPES = {
    "date",
    "time-millis",
    "time-micros",
    "timestamp-millis",
    "timestamp-micros",
    "timestamp-nanos",
    "local-timestamp-millis",
    "local-timestamp-micros",
    "local-timestamp-nanos",
}
"""Logical types that fastavro writes an ``int`` value of as the plain int or long."""

_RANGES = {"int": (-(2**31), 2**31 - 1), "long": (-(2**63), 2**63 - 1)}
_PYTHON_TYPES: dict[str, str] = {
    "null": "NoneType",
    "boolean": "bool",
    "int": "int",
    "long": "int",
    "float": "float",
    "double": "float",
    "string": "str",
    "bytes": "bytes",
    "enum": "str",
    "fixed": "bytes",
    "record": "dict",
    "error": "dict",
    "map": "dict",
    "array": "list",
}
"""The Python type each Avro type is written from, by name in the generated code."""


class Unwritable(ValueError):  # noqa: N818 - not an error of the value, only not taken here
    """The compiled writer does not take this value: let fastavro encode it."""


class _Unsupported(Exception):  # noqa: N818
    """The schema has a node the compiled writer does not handle."""


DECLINES: tuple[type[Exception], ...] = (Unwritable, KeyError, UnicodeEncodeError, OverflowError)
"""What a compiled writer raises on a value it does not take: :class:`Unwritable` (a type or
range it does not write), ``KeyError`` (a missing field, an unknown enum symbol),
``UnicodeEncodeError`` (a string with a lone surrogate), ``OverflowError`` (a float too large
for Avro's 32-bit float). Anything else it raises is a bug."""


def compile_writer(schema: Any) -> Callable[[Any], bytes] | None:
    """An encoder of one value of the parsed ``schema``, or None if it cannot be compiled.

    For a value it does not take it raises :class:`Unwritable`, or what the generated code
    runs into first (a missing field's ``KeyError``, ...), without a wrapper call per value
    to translate it: :data:`DECLINES` lists them all, and the caller takes any other
    exception for a bug.
    """
    generator = _Generator(schema)
    try:
        generator.node(schema, "value", 1, set())
    except _Unsupported:
        return None
    return generator.define("write(value)", ["out = bytearray()"], ["return bytes(out)"])


def compile_field_writers(schema: Any) -> list[tuple[str, Callable[[Any], bytes]]] | None:
    """Each field of a record ``schema`` with an encoder of its own, in the schema's order.

    A record's Avro bytes are its fields' bytes one after another, so a caller that holds
    some fields' bytes already (a table's row, written for an earlier output) writes only
    the others and joins them. Each encoder is the code :func:`compile_writer` writes for
    that field, and declines alike; the caller must give every field (none is filled in
    from its default) and no other. None: ``schema`` is not a record, or
    :func:`compile_writer` cannot compile it.
    """
    if not isinstance(schema, dict) or schema.get("type") not in ("record", "error"):
        return None
    if compile_writer(schema) is None:
        return None
    named = schema.get("__named_schemas", {})
    writers = []
    for field in schema["fields"]:
        writer = compile_writer({"type": field["type"], "__named_schemas": named})
        if writer is None:  # cannot happen where the record compiles; checked all the same
            return None
        writers.append((field["name"], writer))
    return writers


_MISSING = object()


@cache
def _varint_tables() -> tuple[list[bytes], list[bytes]]:
    """The writer's varint pieces, built when the first schema is compiled, not at import.

    First, fourteen bits of a varint that goes on: two bytes, both with the continuation
    bit. Second, the last fourteen bits or fewer: one or two bytes, the last without it.
    """
    middle = [bytes(((n & 127) | 128, (n >> 7) | 128)) for n in range(1 << 14)]
    last = [bytes((n,)) if n < 128 else bytes(((n & 127) | 128, n >> 7)) for n in range(1 << 14)]
    return middle, last


class _Generator(FunctionText):
    """Writes the body of ``write(value)``, one schema node at a time."""

    def __init__(self, schema: Any) -> None:
        middle, last = _varint_tables()
        super().__init__(
            schema,
            {
                "NoneType": type(None),
                "Unwritable": Unwritable,
                "MISSING": _MISSING,
                "FLOAT": struct.Struct("<f").pack,
                "DOUBLE": struct.Struct("<d").pack,
                "MIDDLE": middle,
                "LAST": last,
            },
        )

    def node(
        self, schema: Any, var: str, depth: int, enclosing: set[str], *, typed: bool = False
    ) -> None:
        """Code that writes ``var`` as ``schema``; ``enclosing``: records being written.

        ``typed``: a union branch already chose ``var``'s Python type.
        """
        if isinstance(schema, list):
            return self.union(schema, var, depth, enclosing)
        if isinstance(schema, str):
            schema = {"type": schema}
        kind = schema["type"]
        if not isinstance(kind, str):
            return self.node(kind, var, depth, enclosing, typed=typed)
        logical = schema.get("logicalType")
        if logical is not None and not (logical in _TIME_LOGICAL_TYPES and kind in ("int", "long")):
            raise _Unsupported(logical)
        if kind not in _PYTHON_TYPES:
            if kind in enclosing or kind not in self.named:
                raise _Unsupported(kind)  # recursive or unknown: leave it to fastavro
            return self.node(self.named[kind], var, depth, enclosing, typed=typed)
        python_type = _PYTHON_TYPES[kind]
        if not typed:
            self.emit(depth, f"if type({var}) is not {python_type}: raise Unwritable({kind!r})")
        if kind in _RANGES:
            low, high = _RANGES[kind]
            self.emit(depth, f"if not {low} <= {var} <= {high}: raise Unwritable({kind!r})")
            self.varint(var, depth)
        elif kind == "boolean":
            self.emit(depth, f"out.append(1 if {var} else 0)")
        elif kind in ("float", "double"):
            self.emit(depth, f"out += {kind.upper()}({var})")
        elif kind in ("string", "bytes"):
            data = self.fresh("b")
            self.emit(depth, f"{data} = {var}.encode()" if kind == "string" else f"{data} = {var}")
            self.length(data, depth)
            self.emit(depth, f"out += {data}")
        elif kind == "enum":
            index = self.fresh("i")
            symbols = self.constant({s: i for i, s in enumerate(schema["symbols"])})
            self.emit(depth, f"{index} = {symbols}[{var}]")
            self.varint(index, depth)
        elif kind == "fixed":
            self.emit(depth, f"if len({var}) != {schema['size']}: raise Unwritable('fixed')")
            self.emit(depth, f"out += {var}")
        elif kind == "array":
            item = self.fresh("v")
            self.emit(depth, f"if {var}:")
            self.length(var, depth + 1)
            self.emit(depth + 1, f"for {item} in {var}:")
            self.node(schema["items"], item, depth + 2, enclosing)
            self.emit(depth, "out.append(0)")
        elif kind == "map":
            key, item = self.fresh("k"), self.fresh("v")
            self.emit(depth, f"if {var}:")
            self.length(var, depth + 1)
            self.emit(depth + 1, f"for {key}, {item} in {var}.items():")
            self.node("string", key, depth + 2, enclosing)
            self.node(schema["values"], item, depth + 2, enclosing)
            self.emit(depth, "out.append(0)")
        elif kind in ("record", "error"):
            self.record(schema, var, depth, enclosing)
        return None

    def record(self, schema: dict[str, Any], var: str, depth: int, enclosing: set[str]) -> None:
        inner = enclosing | {schema.get("name", "")}
        defaulted = self.fresh("m")
        self.emit(depth, f"{defaulted} = 0")
        for field in schema["fields"]:
            value = self.fresh("v")
            if "default" in field:
                self.emit(depth, f"{value} = {var}.get({field['name']!r}, MISSING)")
                self.emit(depth, f"if {value} is MISSING:")
                self.emit(depth + 1, f"{value} = {self.constant(field['default'])}")
                self.emit(depth + 1, f"{defaulted} += 1")
            else:  # a missing field raises KeyError, which encode() takes as Unwritable
                self.emit(depth, f"{value} = {var}[{field['name']!r}]")
            self.node(field["type"], value, depth, inner)
        count = len(schema["fields"])
        self.emit(depth, f"if len({var}) != {count} - {defaulted}: raise Unwritable('fields')")

    def union(self, branches: list[Any], var: str, depth: int, enclosing: set[str]) -> None:
        seen: set[str] = set()
        kind = self.fresh("t")
        self.emit(depth, f"{kind} = type({var})")
        for index, branch in enumerate(branches):
            python_type = self.python_type(branch)
            if python_type in seen:
                raise _Unsupported("branches written from one Python type")
            seen.add(python_type)
            self.emit(depth, f"{'if' if index == 0 else 'elif'} {kind} is {python_type}:")
            self.emit(depth + 1, f"out.append({index * 2})" if index < 64 else "raise Unwritable")
            self.node(branch, var, depth + 1, enclosing, typed=True)
        self.emit(depth, "else: raise Unwritable('no branch')")

    def python_type(self, branch: Any) -> str:
        """The Python type (by name) a union branch is written from."""
        kind = branch if isinstance(branch, str) else branch.get("type")
        if not isinstance(kind, str):
            raise _Unsupported(str(kind))
        if kind not in _PYTHON_TYPES and kind in self.named:
            return self.python_type(self.named[kind])
        if kind not in _PYTHON_TYPES:
            raise _Unsupported(kind)
        return _PYTHON_TYPES[kind]

    def length(self, var: str, depth: int) -> None:
        count = self.fresh("n")
        self.emit(depth, f"{count} = len({var})")
        self.varint(count, depth)

    def varint(self, var: str, depth: int) -> None:
        """Append ``var`` (an int in range) as a zig-zag varint, Avro's int and long.

        Fourteen bits at a time, from tables: a millisecond timestamp (six bytes) takes three
        steps where a byte at a time took six, and the loop was most of a long's cost.
        """
        n = self.fresh("z")
        self.emit(depth, f"if 0 <= {var} < 64:")  # one byte, the common case: no loop
        self.emit(depth + 1, f"out.append({var} << 1)")
        self.emit(depth, "else:")
        self.emit(depth + 1, f"{n} = ({var} << 1) ^ ({var} >> 63)")
        self.emit(depth + 1, f"while {n} > 16383:")
        self.emit(depth + 2, f"out += MIDDLE[{n} & 16383]")
        self.emit(depth + 2, f"{n} >>= 14")
        self.emit(depth + 1, f"out += LAST[{n}]")
