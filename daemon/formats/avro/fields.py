"""Reading a few top-level fields of an Avro record without decoding the rest.

The Kafka source needs only each record's join key and event time to route it; the joiner
decodes the whole record later anyway. A :class:`FieldScanner` reads the fields it wants
and steps over the others by their encoded lengths, without building their values, in code
compiled for the schema (:func:`daemon.formats.avro.reader.compile_scanner`), several times
faster than a walk by a Python function per field. It still walks to the end, so
truncated records and trailing bytes are caught here, as a decode would catch them; what a
walk cannot notice (a string that is not UTF-8 in a field nobody reads) the joiner's
decode reports.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from daemon.formats.avro.codegen import CompiledCodecError
from daemon.formats.avro.reader import DECLINES, compile_scanner

_PLAIN_FIELD_TYPES = {"int", "long", "string"}
"""Types of the fields a scanner reads (the join key, the event time); for others the record
must be decoded."""


class FieldScanner:
    """Reads chosen top-level fields of records written with one schema.

    Built by :meth:`for_fields`, which declines (returns None) when a wanted field is not a
    top-level ``int``, ``long`` or ``string``, optionally in a union with ``null``, or the
    schema is recursive. Fields named in ``millis`` may also be ``timestamp-millis``
    numbers, read as their encoded integer: the milliseconds a decoded datetime stands for.
    """

    def __init__(self, scan: Callable[[bytes, int], list[Any]]) -> None:
        self._scan = scan

    @staticmethod
    def for_fields(
        schema: Any, names: tuple[str, ...], millis: tuple[str, ...] = ()
    ) -> FieldScanner | None:
        """A scanner returning the fields ``names`` in that order, or None if it cannot."""
        if not isinstance(schema, dict) or schema.get("type") != "record":
            return None
        types = {avro_field["name"]: avro_field["type"] for avro_field in schema["fields"]}
        for name in names:
            # A wanted field the writer never wrote: only a decode fills in its default.
            if name not in types or not _readable(types[name], name in millis):
                return None
        scan = compile_scanner(schema, names, millis)
        return None if scan is None else FieldScanner(scan)

    def scan(self, data: bytes, position: int = 0) -> list[Any]:
        """The wanted fields of the record at ``data[position:]``, which must use every byte.

        Raises:
            ValueError: the bytes are not a record of this schema.
            CompiledCodecError: the scanner failed otherwise: a bug in it.
        """
        try:
            return self._scan(data, position)
        except DECLINES as exc:  # IndexError, UnicodeDecodeError, struct.error, ...
            raise ValueError(f"not a record of this schema ({type(exc).__name__}: {exc})") from None
        except Exception as exc:
            raise CompiledCodecError.of("scanner", exc) from exc


def _readable(field_type: Any, millis: bool) -> bool:
    """Whether a wanted field's value reads the same from its bytes as from a decode.

    A logical type other than ``timestamp-millis`` (when ``millis``) declines: its decoded
    value (a date, a datetime) differs from the encoded one.
    """
    if isinstance(field_type, list):
        return (
            len(field_type) == 2
            and "null" in field_type
            and _readable(field_type[1 - field_type.index("null")], millis)
        )
    logical = field_type.get("logicalType") if isinstance(field_type, dict) else None
    name = field_type.get("type") if isinstance(field_type, dict) else field_type
    if name not in _PLAIN_FIELD_TYPES:
        return False
    return logical is None or (millis and logical == "timestamp-millis" and name != "string")
