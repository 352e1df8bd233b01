"""The running aggregation behind ``lookup``'s ``aggregate`` option: a total per group.

How it works: ``lookup`` hands this joiner to the engine as its :class:`Downstream` stage. The
engine reads the lookup's main output (the enriched records), groups it by the ``group_by``
path (e.g. ``"region.region"``) and feeds each group's records here in apply order. The state
of a group is its running total; every record that changes it emits the group and the new
total to the secondary output ``totals``, keyed by the group. Without revisions an enriched
record is never replaced (a table update does not rewrite earlier output), so the totals only
grow: this is Kafka Streams' ``KStream.groupBy().count()`` / ``aggregate()``. With
``revisions = true`` a revision replaces a stream record's earlier answer: the lookup then
also writes that earlier answer to its retractions topic, which this stage reads as role
``retracted`` and subtracts from the group it was counted in, while the revision itself adds
to its own group, so each stream record counts once, in the group of its latest answer (the
subtractor and adder of a Kafka Streams ``KTable.groupBy().aggregate()``).

Example:
    Clicks per region::

        >>> from daemon.testing import run_joiner
        >>> joined = [
        ...     {"key": "c1", "value": {"click": {"clicks": 2}, "region": {"region": "eu"}},
        ...      "timestamp": 1},
        ...     {"key": "c2", "value": {"click": {"clicks": 3}, "region": {"region": "eu"}},
        ...      "timestamp": 2},
        ... ]
        >>> run = run_joiner(
        ...     Aggregate,
        ...     {"joined": joined},
        ...     keys={"joined": "region.region"},
        ...     options={"group_by": "region.region", "op": "sum", "field": "click.clicks"},
        ... )
        >>> [out.value for out in run.outputs]
        [{'region': 'eu', 'clicks': 2}, {'region': 'eu', 'clicks': 5}]
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Annotated, Any, Literal

from pydantic import Field, model_validator

from daemon.plugin import (
    JOINED,
    MAIN_OUTPUT,
    NUMBERS,
    RETRACTED,
    DeadLetter,
    Emit,
    FieldOf,
    InputRecord,
    Joiner,
    JoinerContext,
    JoinerOptions,
    OutputValue,
    Written,
    field_at,
)

AggregateOp = Literal["count", "sum"]
"""``count``: the number of joined records per group; ``sum``: the sum of ``field`` over them."""

TOTALS = "totals"
"""The secondary output the totals go to: ``[pipeline.outputs.totals]``."""

RETRACTIONS = "retractions"
"""The lookup's output of retracted answers, which this stage reads as role ``retracted``
(see :attr:`daemon.plugin.joiner.Downstream.retractions`)."""


class AggregateOptions(JoinerOptions):
    """``[pipeline.options.aggregate]`` of ``lookup``: what to group by and what to total."""

    group_by: Annotated[str, FieldOf(MAIN_OUTPUT)] = Field(
        min_length=1,
        description='dotted path of the group in the joined record, e.g. "region.region"',
    )
    op: AggregateOp = Field(default="count", description="running count or sum per group")
    field: Annotated[str | None, FieldOf(MAIN_OUTPUT, NUMBERS)] = Field(
        default=None,
        min_length=1,
        description='sum only: dotted path of the summed number, e.g. "click.clicks"',
    )
    group_field: str | None = Field(
        default=None,
        min_length=1,
        description="totals field holding the group; default: last part of group_by",
    )
    total_field: str | None = Field(
        default=None,
        min_length=1,
        description='totals field holding the total; default: "count", or last part of field',
    )

    @model_validator(mode="after")
    def _field_fits_op(self) -> AggregateOptions:
        if self.op == "sum" and self.field is None:
            raise ValueError('op "sum" needs `field`: the dotted path of the number to add up')
        if self.op == "count" and self.field is not None:
            raise ValueError('op "count" counts records and takes no `field`; remove it')
        return self

    @property
    def group_name(self) -> str:
        """The totals record's group field."""
        return self.group_field or self.group_by.rsplit(".", 1)[-1]

    @property
    def total_name(self) -> str:
        """The totals record's total field."""
        if self.total_field is not None:
            return self.total_field
        return "count" if self.field is None else self.field.rsplit(".", 1)[-1]


def totals_value(options: AggregateOptions) -> OutputValue:
    """What the totals output holds: the group and its running total."""
    if options.field is None:
        total = Written.typed(options.total_name, "long", "the group's running count")
    else:
        total = Written.value_of(
            options.total_name, MAIN_OUTPUT, options.field, "the group's running sum of `field`"
        )
    return OutputValue(
        [
            Written.value_of(
                options.group_name, MAIN_OUTPUT, options.group_by, "the group (at `group_by`)"
            ),
            total,
        ],
        output=TOTALS,
        key="the group, as text",
    )


class Aggregate(Joiner[AggregateOptions, dict[str, Any]]):
    """Running count or sum per group of the joined records; every change of a total is emitted.

    Role ``joined``: the records of one group (the value at ``group_by``); role
    ``retracted``, read only when the lookup revises: earlier answers that a revision
    replaced, each taken back from its group. State per group: its running total. Each joined
    record adds 1 (``count``) or its ``field`` (``sum``), each retracted one subtracts it,
    and, when the total changed, emits ``{group_field: group, total_field: total}`` keyed by the
    group to the ``totals`` output, so a compacted totals topic holds the current total per
    group. A sum that adds 0 changes nothing and emits nothing ("emit on change"). A record
    whose summed field is missing or not a number goes to the dead-letter topic
    (``MissingAggregateField``), and so does its retraction, so the two stay even. A
    tombstone (an answer an inner lookup withdrew) adds nothing: its retraction subtracts.
    Records of a group apply in event-time order (their Kafka timestamps), a retraction
    before a joined record of the same timestamp, as a revision and the retraction that
    comes with it share one. Not registered as a pipeline joiner: ``lookup`` runs it.
    """

    name = "aggregate"
    description = "Running count or sum per group, emitted on every change (lookup's stage)."
    roles = (RETRACTED, JOINED)
    outputs = (TOTALS,)

    def initial_state(self) -> dict[str, Any]:
        """A group not seen yet has no total (not even 0: it emitted nothing)."""
        return {}

    def process(
        self,
        key: str,
        state: dict[str, Any],
        records: Sequence[InputRecord],
        ctx: JoinerContext,
    ) -> Iterator[Emit | DeadLetter]:
        """Add each record of the group to its total; see the class docstring."""
        options = self.options
        for record in records:
            if record.value is None:
                continue  # a withdrawn answer: its retraction takes it back
            if options.field is None:
                amount: int | float = 1
            else:
                amount = field_at(record.value, options.field)
                if isinstance(amount, bool) or not isinstance(amount, int | float):
                    yield DeadLetter(
                        record,
                        f"no number at {options.field!r} to sum (got {amount!r})",
                        "MissingAggregateField",
                    )
                    continue
            if record.role == RETRACTED:
                amount = -amount
            if "total" in state and amount == 0:
                continue
            state["total"] = state.get("total", 0) + amount
            # The group as the record holds it, so its Avro type survives (the key is a str).
            group = field_at(record.value, options.group_by)
            ctx.count("totals_updated")
            yield Emit(
                key=key,
                value={
                    options.group_name: key if group is None else group,
                    options.total_name: state["total"],
                },
                source=record,
                output=TOTALS,
            )
