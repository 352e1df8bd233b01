"""Avro records through fastavro: schema files, plain binary and Confluent framing.

Two wire formats. *Plain*: the record's Avro binary encoding alone, schema from an .avsc file
(optionally a separate writer schema, for reading data written with an older or newer
schema). *Confluent*: magic byte 0, a 4-byte big-endian schema id, then the binary encoding;
the writer schema is fetched by id from the Schema Registry and resolved to the reader schema,
so schema evolution works as Avro defines it.

Each codec decodes and encodes with a function compiled from its schema
(:mod:`daemon.formats.avro.reader`, :mod:`daemon.formats.avro.writer`) where the schema allows,
and with fastavro otherwise. A compiled function that does not take a value raises one of a
few known exceptions (:data:`READER_DECLINES`, :data:`WRITER_DECLINES`): fastavro then
decodes or encodes that value, whose result or error stands, and the fallback is counted
(:func:`fallback_counts`); the first of its kind in a process that fastavro takes is logged.
Any other exception from a compiled function is a bug in it: it is raised as
:class:`CompiledCodecError`, which names the switch that turns the compiled functions off:
``ENRICHD_AVRO_COMPILED=0``.
"""

from __future__ import annotations

import io
import json
import logging
import os
import struct
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import fastavro
from fastavro.types import Schema

from daemon.errors import SchemaError
from daemon.formats.avro.codegen import CompiledCodecError
from daemon.formats.avro.fields import FieldScanner
from daemon.formats.avro.reader import DECLINES as READER_DECLINES
from daemon.formats.avro.reader import compile_reader
from daemon.formats.avro.writer import DECLINES as WRITER_DECLINES
from daemon.formats.avro.writer import compile_field_writers, compile_writer
from daemon.formats.registry import is_not_found, new_client, unavailable
from daemon.secrets import redact

_MAGIC = 0
_HEADER = struct.Struct(">bI")

log = logging.getLogger("enrichd.avro")

COMPILED_ENV = "ENRICHD_AVRO_COMPILED"
"""Set to ``0`` (or ``false``, ``no``, ``off``) to decode and encode with fastavro alone."""

_fallbacks: Counter[tuple[str, str]] = Counter()
_logged: set[tuple[str, str]] = set()


def compiled_enabled() -> bool:
    """Whether new codecs use the compiled reader and writer (see :data:`COMPILED_ENV`)."""
    return os.environ.get(COMPILED_ENV, "1").strip().lower() not in ("0", "false", "no", "off")


def fallback_counts() -> dict[tuple[str, str], int]:
    """The values the compiled functions of this process handed to fastavro, so far.

    Keyed by direction (``"decode"`` or ``"encode"``) and reason, the name of the exception
    the compiled function raised (``"Unwritable"``, ``"IndexError"``, ...).
    """
    return dict(_fallbacks)


def _fell_back(direction: str, exc: Exception) -> None:
    """Count one value a compiled function handed to fastavro."""
    _fallbacks[(direction, type(exc).__name__)] += 1


def _fastavro_took(direction: str, schema: Schema, exc: Exception) -> None:
    """Log the first value of its kind in this process that fastavro took after a fallback.

    Only those: one fastavro refuses too is bad data, which its error reports (a dead letter,
    an ``error:`` line). One it takes is a value the compiled code should perhaps take.
    """
    kind = (direction, type(exc).__name__)
    if kind in _logged:
        return
    _logged.add(kind)
    name = schema.get("name", schema.get("type")) if isinstance(schema, dict) else schema
    log.warning(
        "the compiled Avro %s did not take a value of %s (%s: %s), which fastavro %sd. "
        "Such fallbacks are counted, not logged again, in this process.",
        "reader" if direction == "decode" else "writer",
        name,
        kind[1],
        exc,
        direction,
    )


def load_schema_file(path: Path) -> Schema:
    """Read and parse an .avsc file.

    Raises:
        SchemaError: the file is missing, not JSON, or not a valid Avro schema.
    """
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SchemaError(f"{path}: schema file not found") from None
    try:
        return parse_schema_text(text)
    except SchemaError as exc:
        raise SchemaError(f"{path}: {exc}") from None


def parse_schema_text(text: str) -> Schema:
    """Parse an Avro schema from its JSON text.

    Raises:
        SchemaError: not JSON, or not a valid Avro schema.
    """
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SchemaError(f"not JSON ({exc.msg} at line {exc.lineno})") from None
    try:
        return fastavro.parse_schema(raw)
    except Exception as exc:
        raise SchemaError(f"not a valid Avro schema ({exc})") from None


def record_fields(schema: Schema) -> tuple[str, ...]:
    """The field names of a record schema (empty for other types)."""
    if isinstance(schema, dict) and schema.get("type") == "record":
        return tuple(f["name"] for f in schema.get("fields", []))
    return ()


@dataclass
class AvroCodec:
    """Encodes and decodes one topic's values; picklable, so Spark can ship it to executors.

    Attributes:
        schema: the reader (and, when encoding, writer) schema.
        writer_schema: plain format only: the schema the data was written with, if different.
        registry_url: Confluent format: the Schema Registry; None means plain format.
        schema_id: Confluent format: the id written in front of encoded records.
        registry_settings: Confluent format: the registry client's settings (credentials,
            TLS), from :func:`daemon.formats.registry.client_settings`; None: the URL alone.
            Never printed: the codec's repr leaves it out.
        compiled: whether to decode and encode with functions compiled from the schema where
            it allows (see the module docstring); by default unless ``ENRICHD_AVRO_COMPILED=0``
            where the codec is made. Travels with the codec to Spark's workers.
    """

    schema: Schema
    writer_schema: Schema | None = None
    registry_url: str | None = None
    schema_id: int | None = None
    registry_settings: dict[str, Any] | None = field(default=None, repr=False)
    compiled: bool = field(default_factory=compiled_enabled)
    _writers: dict[int, Schema] = field(default_factory=dict, repr=False)
    _client: Any = field(default=None, repr=False)
    _scanners: dict[tuple[int, tuple[str, ...], tuple[str, ...]], FieldScanner | None] = field(
        default_factory=dict, repr=False
    )
    _fast_writer: Any = field(default=False, repr=False)
    """The schema compiled by :func:`compile_writer` on first use (False: not yet; None: it
    cannot be)."""
    _fast_fields: Any = field(default=False, repr=False)
    """:func:`compile_field_writers` of the schema on first use (False: not yet; None: none)."""
    _fast_readers: dict[int, Any] = field(default_factory=dict, repr=False)
    """By writer schema id (-1: plain format), the schema compiled by :func:`compile_reader`
    on first use, or None where it cannot be or the writer's schema is not the reader's."""

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_client"] = None  # the registry client holds sockets; rebuilt where used
        state["_scanners"] = {}  # closures; rebuilt where used
        state["_fast_writer"] = state["_fast_fields"] = False  # closures likewise
        state["_fast_readers"] = {}
        return state

    def read_fields(
        self, data: bytes, names: tuple[str, ...], millis: tuple[str, ...] = ()
    ) -> list[Any] | None:
        """The top-level fields ``names`` of one value, without decoding the rest of it.

        None when these fields cannot be read so (see :class:`FieldScanner`), or when the
        codec is not ``compiled`` (a scanner is compiled code too): decode instead.

        Raises:
            ValueError: the bytes are not a record of the expected format.
        """
        if not self.compiled:
            return None
        start, schema_id = (0, -1) if self.registry_url is None else _framing(data)
        try:
            scanner = self._scanners[(schema_id, names, millis)]
        except KeyError:
            writer = (self._writer(schema_id) if schema_id >= 0 else self.writer_schema) or (
                self.schema
            )
            scanner = None
            # A reader whose field types differ from the writer's decodes to other values
            # (an int promoted to a double, a renamed field): only a decode resolves those.
            if _field_types(writer, names) == _field_types(self.schema, names):
                scanner = FieldScanner.for_fields(writer, names, millis)
            self._scanners[(schema_id, names, millis)] = scanner
        return None if scanner is None else scanner.scan(data, start)

    def decode(self, data: bytes) -> dict[str, Any]:
        """Decode one value.

        Raises:
            ValueError: the bytes are not a record of the expected format.
        """
        start, schema_id = (0, -1) if self.registry_url is None else _framing(data)
        try:
            fast = self._fast_readers[schema_id]
        except KeyError:
            fast = self._fast_readers[schema_id] = self._compile_reader(schema_id)
        declined: Exception | None = None
        if fast is not None:
            try:
                return fast(data, start)  # type: ignore[no-any-return]
            except READER_DECLINES as exc:  # bytes it does not take: fastavro's value or error
                declined = exc
                _fell_back("decode", exc)
            except Exception as exc:
                raise CompiledCodecError.of("reader", exc) from exc
        writer = self._writer(schema_id) if schema_id >= 0 else self.writer_schema
        record = _read(data, start, writer or self.schema, self.schema)
        if declined is not None:
            _fastavro_took("decode", self.schema, declined)
        return record

    def _compile_reader(self, schema_id: int) -> Any:
        """A compiled reader when data written with ``schema_id`` needs no resolution."""
        if not self.compiled:
            return None
        writer = self._writer(schema_id) if schema_id >= 0 else self.writer_schema
        if writer is not None and writer != self.schema:
            return None
        return compile_reader(self.schema)

    def encode(self, record: dict[str, Any]) -> bytes:
        """Encode one value.

        Raises:
            ValueError: the record does not match the schema (the message names the field).
        """
        if self._fast_writer is False:
            self._fast_writer = compile_writer(self.schema) if self.compiled else None
        header = b"" if self.registry_url is None else _HEADER.pack(_MAGIC, self.schema_id or 0)
        declined: Exception | None = None
        if self._fast_writer is not None:
            try:
                return header + self._fast_writer(record)
            except WRITER_DECLINES as exc:  # a value only fastavro takes, or one it rejects
                declined = exc
                _fell_back("encode", exc)
            except Exception as exc:
                raise CompiledCodecError.of("writer", exc) from exc
        buffer = io.BytesIO()
        buffer.write(header)
        try:
            fastavro.schemaless_writer(buffer, self.schema, record, strict_allow_default=True)
        except TypeError as exc:  # fastavro's wrong-type error; it names the field too
            raise ValueError(str(exc)) from None
        if declined is not None:
            _fastavro_took("encode", self.schema, declined)
        return buffer.getvalue()

    def field_writers(self) -> list[tuple[str, Callable[[Any], bytes]]] | None:
        """The schema's fields with an encoder each, for :meth:`joined` (None: not compiled).

        :func:`~daemon.formats.avro.writer.compile_field_writers`; made on first use.
        """
        if self._fast_fields is False:
            self._fast_fields = compile_field_writers(self.schema) if self.compiled else None
        fields: list[tuple[str, Callable[[Any], bytes]]] | None = self._fast_fields
        return fields

    def joined(self, parts: list[bytes]) -> bytes:
        """The encoded record whose fields' bytes are ``parts`` (:meth:`field_writers`' order)."""
        header = b"" if self.registry_url is None else _HEADER.pack(_MAGIC, self.schema_id or 0)
        return header + b"".join(parts)

    def _writer(self, schema_id: int) -> Schema:
        """The writer schema of ``schema_id``, from the registry on first use.

        Raises:
            SchemaRegistryUnavailableError: the registry refused, did not answer, or answered
                anything but its own "schema not found" (:func:`is_not_found`): the record
                may be fine, so it must not be taken for an undecodable one.
            ValueError: the registry does not know the id.
        """
        schema = self._writers.get(schema_id)
        if schema is None:
            try:
                text = self.registry().get_schema(schema_id).schema_str
            except Exception as exc:
                if not is_not_found(exc):
                    where = str(self.registry_url)
                    raise unavailable(where, exc, f"schema id {schema_id}") from None
                raise ValueError(f"schema id {schema_id}: {redact(str(exc))}") from None
            schema = self._writers[schema_id] = parse_schema_text(text)
        return schema

    def registry(self) -> Any:
        """The Schema Registry client, created on first use in this process."""
        if self._client is None:
            self._client = new_client(self.registry_settings or {"url": self.registry_url})
        return self._client


def _framing(data: bytes) -> tuple[int, int]:
    """Where a Confluent-framed value's record starts, and its writer schema id.

    Raises:
        ValueError: the value does not start with the magic byte and a schema id.
    """
    if len(data) < _HEADER.size or data[0] != _MAGIC:
        raise ValueError("not Confluent framing (magic byte 0 and a 4-byte schema id)")
    _, schema_id = _HEADER.unpack_from(data)
    return _HEADER.size, schema_id


def _field_types(schema: Schema, names: tuple[str, ...]) -> list[Any]:
    """The types of the top-level fields ``names`` of a record schema (None where absent)."""
    fields = (
        {f["name"]: f["type"] for f in schema.get("fields", [])} if isinstance(schema, dict) else {}
    )
    return [fields.get(name) for name in names]


def _read(data: bytes, start: int, writer: Schema, reader: Schema) -> dict[str, Any]:
    """Decode the one record at ``data[start:]``, which must use every byte."""
    buffer = io.BytesIO(data)
    buffer.seek(start)
    try:
        record = fastavro.schemaless_reader(buffer, writer, reader)
    except Exception as exc:  # truncated or random bytes: EOFError, IndexError, ...
        raise ValueError(f"not a record of this schema ({type(exc).__name__}: {exc})") from None
    if buffer.tell() != len(data):
        raise ValueError(f"{len(data) - buffer.tell()} bytes left after the record")
    return record  # type: ignore[return-value]
