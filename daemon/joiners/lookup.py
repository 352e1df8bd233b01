"""``lookup``: stream-table enrichment, as Kafka Streams' KStream-KTable and -GlobalKTable joins."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, Literal

from pydantic import Field, model_validator

from daemon.hookspecs import hookimpl
from daemon.joiners.aggregate import TOTALS, Aggregate, AggregateOptions
from daemon.joiners.base import (
    DeadLetter,
    Downstream,
    Emit,
    InputRecord,
    Joiner,
    JoinerContext,
    JoinerOptions,
)

LookupMode = Literal["inner", "left"]
"""``inner``: a stream record whose key has no table value emits nothing; ``left``: it emits
with the table side set to ``default`` (null when no default is configured)."""


class LookupOptions(JoinerOptions):
    """Options of ``lookup``."""

    mode: LookupMode = Field(
        default="inner", description="inner: unknown keys emit nothing; left: emit with default"
    )
    default: dict[str, Any] | None = Field(
        default=None,
        description="left mode: the table-side record used as is when the key is unknown",
    )
    aggregate: AggregateOptions | None = Field(
        default=None,
        description=(
            "running totals per group to [pipeline.outputs.totals]; a table of group_by, "
            'op ("count" | "sum"), field, group_field, total_field'
        ),
    )

    @model_validator(mode="after")
    def _default_needs_left(self) -> LookupOptions:
        if self.default is not None and self.mode != "left":
            raise ValueError(
                '`default` fills in unknown keys, which only mode = "left" emits; '
                'set mode = "left" or remove `default`'
            )
        return self


class Lookup(Joiner):
    """Stream-table lookup: each stream record is joined with the table's current value.

    The ``table`` side is a changelog: a record sets its key's value, a tombstone (routed by
    its Kafka key) deletes it. State per join key: the current table value, nothing else;
    stream records are not stored. Only ``stream`` records emit, one output each, joined with
    the table value current at that record's point in apply order, so a table update never
    rewrites earlier output. At equal event time the stream record applies first (role
    order) and sees the value before the update. ``mode = "inner"``: no table value, no
    output; ``"left"``: output with the table side set to ``default`` (null without one).
    Output: ``{stream field: stream record, table field: table value}``, keyed by the stream
    record's Kafka key (as Kafka Streams keeps the stream's key).

    Foreign keys: the stream input's ``key`` may be any field of the stream record (a
    ``user`` field of a click keyed by click id). The engine groups both inputs by join key
    across Spark's shuffle, so the table topic needs no co-partitioning with the stream (the
    GlobalKTable use case, without a full copy of the table per task).

    ``aggregate``: a second stage (see :mod:`daemon.joiners.aggregate`) keeps a running
    ``count`` or ``sum`` per ``group_by`` value of the joined records and writes every
    change of a total to ``[pipeline.outputs.totals]``, keyed by the group.
    """

    name = "lookup"
    description = "Stream-table enrichment: each stream record joins the table's current value."
    roles = ("stream", "table")
    Options = LookupOptions
    keyed_tombstones = frozenset({"table"})
    outputs = (TOTALS,)

    def initial_state(self) -> dict[str, Any]:
        """No table value yet."""
        return {"table": None}

    def is_empty(self, state: dict[str, Any]) -> bool:
        """A key without a table value holds nothing (stream records are never stored)."""
        return state["table"] is None

    def process(
        self,
        key: str,
        state: dict[str, Any],
        records: Sequence[InputRecord],
        ctx: JoinerContext,
    ) -> Iterator[Emit | DeadLetter]:
        """Apply one key's records in order; see the class docstring for the semantics."""
        options: LookupOptions = self.options  # type: ignore[assignment]
        stream_field, table_field = ctx.fields["stream"], ctx.fields["table"]
        for record in records:
            if record.role == "table":
                state["table"] = record.value  # a tombstone (None) deletes
                continue
            if record.value is None:  # stream tombstones are dead-lettered before this
                continue
            table = state["table"]
            if table is None:
                ctx.count("unmatched")
                if options.mode == "inner":
                    continue
                table = None if options.default is None else dict(options.default)
            else:
                ctx.count("matched")
            yield Emit(
                key=record.kafka_key,
                value={stream_field: record.value, table_field: table},
                source=record,
            )

    def downstream(self) -> Downstream | None:
        """The aggregation stage, re-keyed by ``aggregate.group_by``, when one is configured."""
        options: LookupOptions = self.options  # type: ignore[assignment]
        if options.aggregate is None:
            return None
        stage = Aggregate(
            options.aggregate,
            JoinerContext(pipeline=self.context.pipeline, fields={"joined": "joined"}),
        )
        return Downstream(joiner=stage, key=options.aggregate.group_by, output=TOTALS)


@hookimpl
def enrichd_register_joiners(register: Any) -> None:
    """Register the built-in ``lookup`` joiner."""
    register(Lookup)
