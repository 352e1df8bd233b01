"""The joiner operator: a ``transformWithState`` processor that runs any :class:`Joiner`.

Rows of a micro-batch arrive grouped by join key. The processor decodes them, puts them in
apply order, loads the key's state (one pickled object), lets the joiner process them, stores
the state back, and turns what the joiner yielded into output rows for the Kafka sink: Avro-
encoded output records with provenance headers, and dead letters with their original bytes
and the reason. A joiner that raises does not stop the pipeline: that key's records go to the
dead-letter topic with the exception, and the key's state stays as it was.
"""

from __future__ import annotations

import pickle  # noqa: S403 - the state store holds only what this processor wrote
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from pyspark.sql import Row
from pyspark.sql.streaming import StatefulProcessor, StatefulProcessorHandle

from daemon.avro import AvroCodec
from daemon.joiners.base import Emit, InputRecord, Joiner, apply_order
from daemon.kafka.records import DEAD_LETTER_ROUTE


@dataclass(frozen=True)
class OperatorPlan:
    """What the processor needs on executors; pickled with it."""

    joiner: Joiner
    codecs: dict[str, AvroCodec]
    output_codec: AvroCodec
    output_topic: str
    dead_letter_topic: str
    plugin: str


def _header(name: str, value: object) -> dict[str, Any]:
    return {"key": name, "value": str(value).encode("utf-8")}


def _provenance(topic: str, partition: int, offset: int) -> list[dict[str, Any]]:
    return [
        _header("enrichd.source.topic", topic),
        _header("enrichd.source.partition", partition),
        _header("enrichd.source.offset", offset),
    ]


def _key_bytes(key: str | bytes | None) -> bytes | None:
    return key.encode("utf-8") if isinstance(key, str) else key


class JoinerProcessor(StatefulProcessor):
    """Runs a joiner over the records of one join key per call (see the module docstring)."""

    def __init__(self, plan: OperatorPlan) -> None:
        self.plan = plan

    def init(self, handle: StatefulProcessorHandle) -> None:
        """Declare the one state variable: the joiner's pickled per-key state."""
        self.state = handle.getValueState(
            "joiner_state", "blob binary", self.plan.joiner.state_ttl_ms()
        )

    def handleInputRows(self, key: Any, rows: Iterator[Row], timerValues: Any) -> Iterator[Row]:  # noqa: N802, N803
        """Apply one key's rows of this micro-batch."""
        (group,) = key
        if group == DEAD_LETTER_ROUTE:
            for row in rows:
                kind, _, reason = (row.error or "Error: unknown").partition(": ")
                yield self._dead_letter(row, kind, reason)
            return
        records: list[InputRecord] = []
        raw: dict[tuple[str, int, int], Row] = {}
        for row in rows:
            raw[(row.topic, row.partition, row.offset)] = row
            try:
                value = None if row.value is None else self.plan.codecs[row.role].decode(row.value)
            except Exception as exc:  # the source decoded it once; this cannot differ
                yield self._dead_letter(row, "UndecodableRecord", str(exc))
                continue
            records.append(
                InputRecord(
                    role=row.role,
                    key=group,
                    value=value,
                    event_time=row.event_time,
                    topic=row.topic,
                    partition=row.partition,
                    offset=row.offset,
                    kafka_key=row.kafka_key,
                )
            )
        joiner = self.plan.joiner
        blob = self.state.get() if self.state.exists() else None
        state = pickle.loads(blob[0]) if blob else joiner.initial_state()  # noqa: S301
        context = joiner.context
        try:
            results = list(
                joiner.process(group, state, apply_order(records, joiner.roles), context)
            )
        except Exception as exc:
            reason = f"joiner {joiner.name!r} of plugin {self.plan.plugin!r} raised {exc!r}"
            for record in records:
                yield self._dead_letter(raw[_origin(record)], "JoinerFailed", reason)
            return
        for result in results:
            if isinstance(result, Emit):
                yield self._output(result, raw)
            else:
                yield self._dead_letter(raw[_origin(result.record)], result.kind, result.reason)
        if joiner.is_empty(state):
            self.state.clear()
        else:
            self.state.update((pickle.dumps(state, protocol=pickle.HIGHEST_PROTOCOL),))

    def _output(self, emit: Emit, raw: dict[tuple[str, int, int], Row]) -> Row:
        headers = _provenance(*_origin(emit.source)) if emit.source is not None else []
        try:
            value = None if emit.value is None else self.plan.output_codec.encode(emit.value)
        except Exception as exc:
            # An output the schema rejects is the joiner's or the schema's fault: keep the
            # triggering record, with the reason, rather than lose it.
            if emit.source is None:
                raise
            return self._dead_letter(
                raw[_origin(emit.source)], "UnencodableOutput", f"{type(exc).__name__}: {exc}"
            )
        return Row(
            topic=self.plan.output_topic, key=_key_bytes(emit.key), value=value, headers=headers
        )

    def _dead_letter(self, row: Row, kind: str, reason: str) -> Row:
        headers = _provenance(row.topic, row.partition, row.offset)
        headers.append(_header("enrichd.error.class", kind))
        headers.append(_header("enrichd.error.message", reason))
        return Row(
            topic=self.plan.dead_letter_topic, key=row.kafka_key, value=row.value, headers=headers
        )

    def close(self) -> None:
        """Nothing to release."""


def _origin(record: InputRecord) -> tuple[str, int, int]:
    return (record.topic, record.partition, record.offset)
