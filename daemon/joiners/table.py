"""``table``: table-table join, as Kafka Streams' KTable-KTable join."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, Literal

from pydantic import Field

from daemon.joiners.held_headers import held, keep
from daemon.plugin import (
    DeadLetter,
    DurationMs,
    Emit,
    InputRecord,
    Joiner,
    JoinerContext,
    JoinerOptions,
    OutputValue,
    Register,
    Written,
    hookimpl,
    merge_headers,
)

TableMode = Literal["inner", "left", "outer"]
"""When the join holds for a key: ``inner``: both sides exist; ``left``: the left side
exists; ``outer``: either side exists. The missing side is null in the output."""


class TableOptions(JoinerOptions):
    """Options of ``table``."""

    mode: TableMode = Field(
        default="inner",
        description="inner: both sides needed; left: the left side; outer: either side",
    )
    state_ttl: DurationMs | None = Field(
        default=None,
        gt=0,
        description=(
            "forget a key's rows this long (processing time) after they last changed; then "
            "they are tombstones to later updates, and the result they made is not retracted"
        ),
    )


class Table(Joiner[TableOptions, dict[str, Any]]):
    """Table-table join: every update joins the other side's current value.

    How it works: both inputs are changelogs (the latest value per key; a tombstone, routed
    by its Kafka key, deletes it). State per join key: each side's current value and whether
    the join's current result has been emitted. Every update on either side emits the join
    of the updated record with the other side's current value while the join holds (see
    ``mode``), keyed by the join key, so a compacted output topic holds the current join
    result per key. When an update makes the join stop holding (a tombstone, or in ``inner``
    mode deleting either side), a tombstone for the key is emitted, but only if a result
    for the key is out there to retract: a key whose join never held gets no tombstone.
    Deleting a side that is already absent changes nothing and emits nothing. Within a
    micro-batch a key's updates apply in event-time order.

    ``state_ttl``: a key whose rows have not changed for that long (processing time) is
    forgotten, both sides with it, so that the state of keys that stop updating does not grow
    for ever. Expiry writes nothing: the key's last result stays in the output topic, and a
    later update of either side finds the other side absent, as after a tombstone, with no
    result out there to retract (``inner`` mode writes nothing for it).

    Example:
        A left row, then the matching right row, then the left row is deleted::

            >>> from daemon.joiners.table import Table
            >>> from daemon.testing import run_joiner
            >>> run = run_joiner(
            ...     Table,
            ...     {
            ...         "left": [
            ...             {"key": 1, "value": {"k": 1, "v": "A"}, "timestamp": 1},
            ...             {"key": 1, "value": None, "timestamp": 3},
            ...         ],
            ...         "right": [{"key": 1, "value": {"k": 1, "v": "a"}, "timestamp": 2}],
            ...     },
            ...     keys={"left": "k", "right": "k"},
            ... )
            >>> [(out.key, out.value) for out in run.outputs]
            [('1', {'left': {'k': 1, 'v': 'A'}, 'right': {'k': 1, 'v': 'a'}}), ('1', None)]
    """

    name = "table"
    description = "Table-table join: every update joins the other side's current value."
    roles = ("left", "right")
    keyed_tombstones = frozenset({"left", "right"})
    merges_headers = True
    inputs_headers = "the other side's current row, then the updated row"

    def writes(self) -> list[OutputValue]:
        """The two sides' records, either null where the mode lets it be missing."""
        fields = self.context.fields
        return [
            OutputValue(
                [
                    Written.record(
                        fields["left"],
                        "left",
                        "the left side's current value; null where the mode lets it be missing",
                        nullable=self.options.mode == "outer",
                    ),
                    Written.record(
                        fields["right"],
                        "right",
                        "the right side's current value; null where the mode lets it be missing",
                        nullable=self.options.mode != "inner",
                    ),
                ],
                key="the join key",
                tombstones="when the join stops holding for a key that had a result",
            )
        ]

    def initial_state(self) -> dict[str, Any]:
        """Neither side known, no result emitted."""
        return {"left": None, "right": None, "emitted": False}

    def is_empty(self, state: dict[str, Any]) -> bool:
        """Nothing on either side and no result to retract later."""
        return state["left"] is None and state["right"] is None and not state["emitted"]

    def holds(self, state: dict[str, Any]) -> bool:
        """Whether the join has a result for the key's current values, per ``mode``."""
        mode: TableMode = self.options.mode
        if mode == "inner":
            return state["left"] is not None and state["right"] is not None
        if mode == "left":
            return state["left"] is not None
        return state["left"] is not None or state["right"] is not None

    def process(
        self,
        key: str,
        state: dict[str, Any],
        records: Sequence[InputRecord],
        ctx: JoinerContext,
    ) -> Iterator[Emit | DeadLetter]:
        """Apply one key's updates in order; see the class docstring for the semantics."""
        fields = ctx.fields
        inputs = self.context.carries_inputs
        for record in records:
            if record.value is None and state[record.role] is None:
                continue  # deleting what is not there changes no result
            state[record.role] = record.value
            headers = None
            if inputs:
                # The other side's current row first, the updated row (the source) last.
                keep(state, record.role, None if record.value is None else record.headers)
                other = "right" if record.role == "left" else "left"
                headers = merge_headers(held(state, other), record.headers)
            if self.holds(state):
                both = state["left"] is not None and state["right"] is not None
                ctx.count("matched" if both else "unmatched")
                state["emitted"] = True
                value = {fields["left"]: state["left"], fields["right"]: state["right"]}
                yield Emit(key=key, value=value, source=record, headers=headers)
            elif state["emitted"]:
                ctx.count("retracted")
                state["emitted"] = False
                yield Emit(key=key, value=None, source=record, headers=headers)


@hookimpl
def enrichd_register_joiners(register: Register) -> None:
    """Register the built-in ``table`` joiner."""
    register(Table)
