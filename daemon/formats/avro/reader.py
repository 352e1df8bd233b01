"""A fast Avro decoder: a parsed schema compiled into one Python function.

Why: most of the time fastavro's ``schemaless_reader`` takes to decode a small record is
set-up per call (a file object to read from, the schema walked as data). Decoding is the
largest single cost of the joiner operator after encoding, which :mod:`daemon.formats.avro.writer`
compiles for the same reason. The compiled function reads the bytes in place, with every
nested type written inline as straight-line code, and builds each record as a dict literal.

It is exact or it is not used, as the writer is: it is stricter than fastavro everywhere
(a boolean byte other than 0 and 1, a varint longer than ten bytes, a length past the end, a
string that is not UTF-8, bytes left over), and on anything it does not take it raises
(``ValueError``, ``IndexError`` or ``struct.error``: :data:`DECLINES`), so that
:meth:`daemon.formats.avro.codec.AvroCodec.decode` decodes again with fastavro, whose value or
error stands, and counts the fallback. For bytes it takes, its value is fastavro's (a
hypothesis test compares the two over the project's schemas). It decodes only with the
writer's schema as the reader's (schema resolution is fastavro's), and schemas with logical
types (fastavro makes them datetimes, decimals, UUIDs) or recursive types are not compiled:
fastavro decodes all their values.

The same generator writes the source's field scanners (:func:`compile_scanner`): the few
top-level fields a scanner wants are read as above, and the others stepped over.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

from daemon.formats.avro.codegen import FunctionText

_PRIMITIVES = {"null", "boolean", "int", "long", "float", "double", "string", "bytes"}


DECLINES: tuple[type[Exception], ...] = (ValueError, IndexError, struct.error)
"""What a compiled reader or scanner raises on bytes it does not take: its own checks'
``ValueError`` (invalid UTF-8 is one), ``IndexError`` and ``struct.error`` for bytes that end
early. Anything else it raises is a bug
(:class:`daemon.formats.avro.codegen.CompiledCodecError`)."""


class _Unsupported(Exception):  # noqa: N818
    """The schema has a node the compiled reader does not handle."""


def compile_reader(schema: Any) -> Callable[[bytes, int], Any] | None:
    """A decoder of one value of the parsed ``schema``, or None if it cannot be compiled.

    ``read(data, start)`` decodes the value at ``data[start:]``, which must use every byte,
    and raises on anything it does not take (see the module docstring).
    """
    generator = _Generator(schema)
    try:
        result = generator.node(schema, 1, set())
    except _Unsupported:
        return None
    return generator.function("read", result)


def compile_scanner(
    schema: Any, names: tuple[str, ...], millis: tuple[str, ...] = ()
) -> Callable[[bytes, int], list[Any]] | None:
    """A reader of the top-level fields ``names`` of a record schema, or None.

    ``scan(data, start)`` returns their values in that order and steps over the other
    fields by their encoded lengths, without building their values, to the end of the
    record, which must use every byte. Fields in ``millis`` may be ``timestamp-millis``
    numbers, read as the number (the milliseconds fastavro's datetime stands for). It
    raises on anything it does not take, as the reader does. The caller decides which
    fields are worth reading so (see :class:`daemon.formats.avro.fields.FieldScanner`).
    """
    generator = _Generator(schema)
    inner = {schema.get("name", "")}
    found: dict[str, str] = {}
    try:
        for avro_field in schema["fields"]:
            name = avro_field["name"]
            if name in names:
                logical = "timestamp-millis" if name in millis else None
                found[name] = generator.node(avro_field["type"], 1, inner, logical=logical)
            else:
                generator.node(avro_field["type"], 1, inner, skip=True)
    except _Unsupported:
        return None
    if set(found) != set(names):
        return None
    return generator.function("scan", f"[{', '.join(found[name] for name in names)}]")


class _Generator(FunctionText):
    """Writes the body of a reading function (``read`` or ``scan``), one schema node at a time.

    Each node's code leaves its value in a fresh local variable and returns that name.
    """

    def __init__(self, schema: Any) -> None:
        super().__init__(
            schema,
            {"FLOAT": struct.Struct("<f").unpack_from, "DOUBLE": struct.Struct("<d").unpack_from},
        )

    def function(self, name: str, result: str) -> Callable[..., Any]:
        """The function ``name(data, pos)`` of the lines written, returning ``result``."""
        return self.define(
            f"{name}(data, pos)",
            ["end = len(data)"],
            ["if pos != end: raise ValueError('bytes left after the record')", f"return {result}"],
        )

    def node(
        self,
        schema: Any,
        depth: int,
        enclosing: set[str],
        *,
        skip: bool = False,
        logical: str | None = None,
    ) -> str:
        """Code that reads one value of ``schema``; the variable holding it.

        ``skip``: step over the value without building it (its variable is None); a logical
        type then does not matter. ``logical``: the one logical type read as its number.
        """
        if isinstance(schema, list):
            return self.union(schema, depth, enclosing, skip=skip, logical=logical)
        if isinstance(schema, str):
            schema = {"type": schema}
        kind = schema["type"]
        if not isinstance(kind, str):
            return self.node(kind, depth, enclosing, skip=skip, logical=logical)
        if not skip and schema.get("logicalType", logical) != logical:
            raise _Unsupported(schema["logicalType"])
        if kind not in _PRIMITIVES and kind not in ("enum", "fixed", "array", "map", "record"):
            if kind in enclosing or kind not in self.named:
                raise _Unsupported(kind)  # recursive or unknown: leave it to fastavro
            return self.node(self.named[kind], depth, enclosing, skip=skip)
        var = self.fresh("v")
        if kind == "null":
            self.emit(depth, f"{var} = None")
        elif kind == "boolean":
            self.emit(depth, f"{var} = data[pos]")
            self.emit(depth, "pos += 1")
            self.emit(depth, f"if {var} > 1: raise ValueError('boolean')")
            self.emit(depth, f"{var} = {var} == 1")
        elif kind in ("int", "long"):
            self.varint(var, depth)
            if kind == "int":
                low, high = -(2**31), 2**31 - 1
                self.emit(depth, f"if not {low} <= {var} <= {high}: raise ValueError('int')")
        elif kind in ("float", "double"):
            self.emit(depth, f"{var}, = {kind.upper()}(data, pos)")
            self.emit(depth, f"pos += {4 if kind == 'float' else 8}")
        elif kind in ("string", "bytes"):
            self.sized(var, depth, text=kind == "string", skip=skip)
        elif kind == "fixed":
            size = int(schema["size"])
            self.emit(depth, f"if pos + {size} > end: raise ValueError('fixed')")
            self.emit(depth, f"{var} = None" if skip else f"{var} = data[pos:pos + {size}]")
            self.emit(depth, f"pos += {size}")
        elif kind == "enum":
            symbols = self.constant(tuple(schema["symbols"]))
            index = self.fresh("i")
            self.varint(index, depth)
            self.emit(depth, f"if {index} < 0: raise ValueError('enum')")
            self.emit(depth, f"{var} = {symbols}[{index}]")
        elif kind in ("array", "map"):
            self.blocks(schema, var, depth, enclosing, skip=skip)
        else:
            self.record(schema, var, depth, enclosing, skip=skip)
        return var

    def record(
        self, schema: dict[str, Any], var: str, depth: int, enclosing: set[str], *, skip: bool
    ) -> None:
        inner = enclosing | {schema.get("name", "")}
        values = [
            (f["name"], self.node(f["type"], depth, inner, skip=skip)) for f in schema["fields"]
        ]
        items = ", ".join(f"{name!r}: {value}" for name, value in values)
        self.emit(depth, f"{var} = None" if skip else f"{var} = {{{items}}}")

    def union(
        self,
        branches: list[Any],
        depth: int,
        enclosing: set[str],
        *,
        skip: bool,
        logical: str | None,
    ) -> str:
        var, index = self.fresh("v"), self.fresh("i")
        self.varint(index, depth)
        for position, branch in enumerate(branches):
            self.emit(depth, f"{'if' if position == 0 else 'elif'} {index} == {position}:")
            value = self.node(branch, depth + 1, enclosing, skip=skip, logical=logical)
            self.emit(depth + 1, f"{var} = {value}")
        self.emit(depth, "else: raise ValueError('union branch')")
        return var

    def blocks(
        self, schema: dict[str, Any], var: str, depth: int, enclosing: set[str], *, skip: bool
    ) -> None:
        """Arrays and maps: blocks of items.

        Each block is a count, and when the count is negative, its byte size next, by which
        a skip steps over the block.
        """
        keyed = schema["type"] == "map"
        count, size, key = self.fresh("n"), self.fresh("s"), self.fresh("k")
        self.emit(depth, f"{var} = None" if skip else f"{var} = {{}}" if keyed else f"{var} = []")
        self.emit(depth, "while True:")
        self.varint(count, depth + 1)
        self.emit(depth + 1, f"if {count} == 0: break")
        self.emit(depth + 1, f"if {count} < 0:")
        self.emit(depth + 2, f"{count} = -{count}")
        self.varint(size, depth + 2)
        if skip:
            self.emit(depth + 2, f"if {size} < 0 or pos + {size} > end: raise ValueError('block')")
            self.emit(depth + 2, f"pos += {size}")
            self.emit(depth + 2, "continue")
        # Garbage guard: every item but a null takes a byte.
        self.emit(depth + 1, f"if {count} > end: raise ValueError('block')")
        self.emit(depth + 1, f"for _ in range({count}):")
        if keyed:
            self.sized(key, depth + 2, text=True, skip=skip)
        item = self.node(schema["values" if keyed else "items"], depth + 2, enclosing, skip=skip)
        if not skip:
            self.emit(depth + 2, f"{var}[{key}] = {item}" if keyed else f"{var}.append({item})")

    def sized(self, var: str, depth: int, *, text: bool, skip: bool = False) -> None:
        """A length, then that many bytes: a string (strict UTF-8) or bytes."""
        size = self.fresh("n")
        self.varint(size, depth)
        self.emit(depth, f"if {size} < 0 or pos + {size} > end: raise ValueError('length')")
        if skip:
            self.emit(depth, f"{var} = None")
        else:
            decode = ".decode()" if text else ""
            self.emit(depth, f"{var} = data[pos:pos + {size}]{decode}")
        self.emit(depth, f"pos += {size}")

    def varint(self, var: str, depth: int) -> None:
        """Read a zig-zag varint (Avro's int and long) into ``var``; one byte takes no loop.

        At most ten bytes and 64 bits, where fastavro would wrap around.
        """
        byte, shift = self.fresh("b"), self.fresh("h")
        self.emit(depth, f"{var} = data[pos]")
        self.emit(depth, "pos += 1")
        self.emit(depth, f"if {var} > 127:")
        self.emit(depth + 1, f"{var} &= 127")
        self.emit(depth + 1, f"{shift} = 7")
        self.emit(depth + 1, "while True:")
        self.emit(depth + 2, f"{byte} = data[pos]")
        self.emit(depth + 2, "pos += 1")
        self.emit(depth + 2, f"{var} |= ({byte} & 127) << {shift}")
        self.emit(depth + 2, f"if {byte} < 128: break")
        self.emit(depth + 2, f"{shift} += 7")
        self.emit(depth + 2, f"if {shift} > 63: raise ValueError('varint')")
        self.emit(depth + 1, f"if {var} >> 64: raise ValueError('varint')")
        self.emit(depth, f"{var} = ({var} >> 1) ^ -({var} & 1)")
