"""Reading a few top-level fields of an Avro record without decoding the rest.

The Kafka source needs only each record's join key and event time to route it; the joiner
decodes the whole record later anyway. Decoding with fastavro builds a dict with every
field (2.7 us for a tweet); a :class:`FieldScanner` steps over the fields it does not want
by their encoded lengths and reads the few it does (1.7 us). It
still walks to the end, so truncated records and trailing bytes are caught here, as a decode
would catch them; what a walk cannot notice (a string that is not UTF-8 in a field nobody
reads) the joiner's decode reports.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

_Step = Callable[[bytes, int], int]
"""Steps over one encoded value starting at a position; returns the position after it."""

_PLAIN_FIELD_TYPES = {"int", "long", "string"}
"""Types of the fields a scanner reads (the join key, the event time); for others the record
must be decoded."""


class FieldScanner:
    """Reads chosen top-level fields of records written with one schema.

    Built by :meth:`for_fields`, which declines (returns None) when a wanted field is not a
    top-level ``int``, ``long`` or ``string``, optionally in a union with ``null``. Fields named
    in ``millis`` may also be ``timestamp-millis`` longs, read as their encoded integer: the
    milliseconds a decoded datetime stands for.
    """

    def __init__(self, steps: list[tuple[Callable[..., Any], int]], count: int) -> None:
        self._steps = steps
        self._count = count

    @staticmethod
    def for_fields(
        schema: Any, names: tuple[str, ...], millis: tuple[str, ...] = ()
    ) -> FieldScanner | None:
        """A scanner returning the fields ``names`` in that order, or None if it cannot."""
        if not isinstance(schema, dict) or schema.get("type") != "record":
            return None
        named: dict[str, _Step] = {}
        steps: list[tuple[Callable[..., Any], int]] = []
        for avro_field in schema["fields"]:
            field_type = avro_field["type"]
            if avro_field["name"] in names:
                logical = "timestamp-millis" if avro_field["name"] in millis else None
                reader = _value_reader(field_type, logical)
                if reader is None:
                    return None
                steps.append((reader, names.index(avro_field["name"])))
            else:
                steps.append((_step(field_type, named), -1))
        wanted = {avro_field["name"] for avro_field in schema["fields"]} & set(names)
        if len(wanted) != len(set(names)):
            return None  # a wanted field the writer never wrote: only a decode fills defaults
        return FieldScanner(steps, len(names))

    def scan(self, data: bytes, position: int = 0) -> list[Any]:
        """The wanted fields of the record at ``data[position:]``, which must use every byte.

        Raises:
            ValueError: the bytes are not a record of this schema.
        """
        found: list[Any] = [None] * self._count
        try:
            for step, slot in self._steps:
                if slot < 0:
                    position = step(data, position)
                else:
                    found[slot], position = step(data, position)  # type: ignore[misc]
        except (IndexError, UnicodeDecodeError) as exc:
            raise ValueError(f"not a record of this schema ({type(exc).__name__}: {exc})") from None
        if position != len(data):
            raise ValueError(f"{len(data) - position} bytes left after the record")
        return found


def _long(data: bytes, position: int) -> tuple[int, int]:
    """A zig-zag varint (Avro int and long) and the position after it."""
    byte = data[position]
    position += 1
    value = byte & 0x7F
    shift = 7
    while byte & 0x80:
        if shift > 63:
            raise ValueError("an integer longer than 10 bytes")
        byte = data[position]
        position += 1
        value |= (byte & 0x7F) << shift
        shift += 7
    return (value >> 1) ^ -(value & 1), position


def _length(data: bytes, position: int) -> tuple[int, int]:
    size, position = _long(data, position)
    if size < 0 or position + size > len(data):
        raise ValueError(f"a length of {size} at byte {position} runs past the record")
    return size, position


def _value_reader(
    field_type: Any, allowed_logical: str | None
) -> Callable[[bytes, int], tuple[Any, int]] | None:
    """A reader of a routed field's value, or None for a type a scanner does not read.

    A logical type other than ``allowed_logical`` declines: its decoded value (a date, a
    datetime) differs from the encoded one.
    """
    if isinstance(field_type, list):
        if len(field_type) != 2 or "null" not in field_type:
            return None
        null_index = field_type.index("null")
        inner = _value_reader(field_type[1 - null_index], allowed_logical)
        if inner is None:
            return None

        def nullable(data: bytes, position: int) -> tuple[Any, int]:
            index, position = _long(data, position)
            if index == null_index:
                return None, position
            if index != 1 - null_index:
                raise ValueError(f"union branch {index} out of range")
            return inner(data, position)

        return nullable
    logical = field_type.get("logicalType") if isinstance(field_type, dict) else None
    name = field_type.get("type") if isinstance(field_type, dict) else field_type
    if name not in _PLAIN_FIELD_TYPES or logical not in (None, allowed_logical):
        return None
    if name == "string":
        if logical is not None:
            return None

        def string(data: bytes, position: int) -> tuple[Any, int]:
            size, position = _length(data, position)
            return data[position : position + size].decode("utf-8"), position + size

        return string
    return _long


def _skip_long(data: bytes, position: int) -> int:
    return _long(data, position)[1]


def _skip_sized(data: bytes, position: int) -> int:
    size, position = _length(data, position)
    return position + size


def _fixed_step(size: int) -> _Step:
    def fixed(data: bytes, position: int) -> int:
        if position + size > len(data):
            raise ValueError(f"{size} bytes at byte {position} run past the record")
        return position + size

    return fixed


_PRIMITIVE_STEPS: dict[str, _Step] = {
    "null": lambda data, position: position,
    "boolean": _fixed_step(1),
    "int": _skip_long,
    "long": _skip_long,
    "float": _fixed_step(4),
    "double": _fixed_step(8),
    "bytes": _skip_sized,
    "string": _skip_sized,
}


def _step(field_type: Any, named: dict[str, _Step]) -> _Step:
    """The step over one value of ``field_type``; ``named`` collects named types by name."""
    if isinstance(field_type, str):
        if field_type in _PRIMITIVE_STEPS:
            return _PRIMITIVE_STEPS[field_type]
        # A named type defined earlier, or the record being defined (recursion): look it up
        # when a value is read, by which time it is defined.
        return lambda data, position: named[field_type](data, position)
    if isinstance(field_type, list):
        branches = [_step(branch, named) for branch in field_type]

        def union(data: bytes, position: int) -> int:
            index, position = _long(data, position)
            if not 0 <= index < len(branches):
                raise ValueError(f"union branch {index} out of range")
            return branches[index](data, position)

        return union
    kind = field_type["type"]
    if kind in _PRIMITIVE_STEPS:
        return _PRIMITIVE_STEPS[kind]
    step: _Step
    if kind == "fixed":
        step = _fixed_step(int(field_type["size"]))
    elif kind == "enum":
        symbols = len(field_type["symbols"])

        def enum(data: bytes, position: int) -> int:
            index, position = _long(data, position)
            if not 0 <= index < symbols:
                raise ValueError(f"enum symbol {index} out of range")
            return position

        step = enum
    elif kind == "record":
        fields: list[_Step] = []

        def record(data: bytes, position: int) -> int:
            for field_step in fields:
                position = field_step(data, position)
            return position

        step = record
        named[field_type["name"]] = step
        fields.extend(_step(f["type"], named) for f in field_type["fields"])
    elif kind in ("array", "map"):
        item = _step(field_type["items" if kind == "array" else "values"], named)
        step = _blocks(item, keyed=kind == "map")
    else:
        raise ValueError(f"unknown Avro type {kind!r}")
    if "name" in field_type:
        named[field_type["name"]] = step
    return step


def _blocks(item: _Step, *, keyed: bool) -> _Step:
    """Arrays and maps: blocks of items, each block a count (negative: then its byte size)."""

    def blocks(data: bytes, position: int) -> int:
        while True:
            count, position = _long(data, position)
            if count == 0:
                return position
            if count < 0:
                size, position = _length(data, position)
                position += size
                continue
            if count > len(data):  # garbage: every real item but null takes a byte
                raise ValueError(f"a block of {count} items in {len(data)} bytes")
            for _ in range(count):
                if keyed:
                    position = _skip_sized(data, position)
                position = item(data, position)

    return blocks
