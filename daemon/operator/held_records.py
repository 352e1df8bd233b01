"""Input records held in state, written with their input's current schema after it evolved.

A joiner keeps decoded input records in its state across micro-batches and restarts. When a
pipeline restarts with an input schema that gained a field with a default, or lost an
optional one, the records it decoded before still have the old schema's fields, and an output
record holding one fails the output schema's strict encoding. Avro's rule for old data is to
read it with the new schema (:func:`daemon.formats.avro.resolve.conform`): so when an output
value does not encode, the operator conforms each field that holds an input's records (as the
joiner declares them, :meth:`Joiner.writes`: ``Written.record(field, role, ...)``) to that
input's current schema and encodes it again. Only then: a value that encodes as it is pays
nothing, and a field the joiner writes that the schema lacks still fails, as before.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from daemon.formats.avro.codec import AvroCodec
from daemon.formats.avro.fits import named_types
from daemon.formats.avro.resolve import conform
from daemon.model.envelope import Envelope, row_schema
from daemon.plugin.joiner import Joiner

RecordSchema = tuple[Any, dict[str, Any]]
"""An input record's schema and the named types it may refer to."""


class HeldRecords:
    """Which output fields hold which input's records, and each input's current record schema.

    Args:
        joiner: the pipeline's joiner, whose :meth:`Joiner.writes` says which fields hold records.
        codecs: each input role's codec (its reader schema is the current one).
        envelopes: the roles read through an envelope: their records are its rows.
    """

    def __init__(
        self,
        joiner: Joiner,
        codecs: Mapping[str, AvroCodec],
        envelopes: Mapping[str, Envelope] | None = None,
    ) -> None:
        self.records: dict[str, RecordSchema] = {}
        for role, codec in codecs.items():
            schema, named = codec.schema, named_types(codec.schema)
            if (envelopes or {}).get(role) is not None:
                schema = row_schema(schema)
            if schema is not None:
                self.records[role] = (schema, named)
        self.fields: dict[str | None, list[tuple[str, str, bool]]] = {}
        """By output (None: the main one): each field holding records, its role, and whether
        it holds a list of them."""
        for value in joiner.writes():
            self.fields[value.output] = [
                (written.name, written.role, written.many)
                for written in value.fields
                if written.role is not None
                and written.role in self.records
                and written.path is None
                and written.avro is None
            ]

    def conformed(self, value: dict[str, Any], output: str | None) -> dict[str, Any] | None:
        """``value`` with each field holding input records conformed; None: no such field.

        An output the joiner declares nothing for (the retractions a revising joiner writes
        in its main output's shape) is taken as its main output.
        """
        fields = self.fields.get(output, self.fields.get(None)) or []
        held = [(name, role, many) for name, role, many in fields if value.get(name) is not None]
        if not held:
            return None
        conformed = dict(value)
        for name, role, many in held:
            schema, named = self.records[role]
            found = value[name]
            if many and isinstance(found, list):
                conformed[name] = [conform(item, schema, named) for item in found]
            else:
                conformed[name] = conform(found, schema, named)
        return conformed

    def encoded(self, role: str, value: dict[str, Any], codec: AvroCodec) -> bytes:
        """An input record from state, in bytes again (for a dead letter).

        Encoded as it is; else conformed to its input's current schema; else (a registry
        codec that only reads, say) its fields as JSON.
        """
        try:
            return codec.encode(value)
        except Exception:  # noqa: S110 - the next way is tried
            pass
        found = self.records.get(role)
        if found is not None:
            try:
                return codec.encode(conform(value, *found))
            except Exception:  # noqa: S110 - the last way is tried
                pass
        return json.dumps(value, default=str).encode("utf-8")
