"""``latest-n``: an example enrichd joiner plugin, meant to be copied.

Everything a plugin needs is in this module: a :class:`~daemon.plugin.Joiner` subclass
typed by its options and its state (``Joiner[LatestNOptions, list[...]]``: mypy then knows
``self.options`` and ``state``), and the ``enrichd_register_joiners`` hook that registers it.
Two declarations let ``daemon validate`` catch a pipeline that would dead-letter every
record: the ``left_id`` option is marked as naming a field of the left records
(``FieldOf("left")``), and ``writes`` says what each output record holds. Both are
optional; a joiner without them runs the same, unchecked. The
distribution's ``pyproject.toml`` names this module in the ``enrichd`` entry-point group, so
``pip install`` is all it takes for ``daemon plugins list`` to show ``latest-n``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Annotated, Any

from pydantic import Field

from daemon.plugin import (
    DeadLetter,
    Emit,
    FieldOf,
    InputRecord,
    Joiner,
    JoinerContext,
    JoinerOptions,
    OutputValue,
    Register,
    Written,
    field_at,
    hookimpl,
)

__all__ = ["LatestN", "LatestNOptions", "enrichd_register_joiners"]


class LatestNOptions(JoinerOptions):
    """Options of ``latest-n``."""

    n: int = Field(default=3, gt=0, description="right records kept per key")
    left_id: Annotated[str, FieldOf("left")] = Field(
        default="id", min_length=1, description="field that identifies a left record"
    )


class LatestN(Joiner[LatestNOptions, list[dict[str, Any]]]):
    """Each left record with the last ``n`` right records of its key, oldest first.

    State per join key: the latest ``n`` right records (e.g. a user's page views). A right
    record is appended, dropping the oldest beyond ``n``, and emits nothing. A left record
    (e.g. a click) emits one output keyed by its id (option ``left_id``): ``id``, the left
    record, and the list of stored right records (empty when there are none), in the output
    fields the pipeline names for the two roles. Records apply in event-time order, a left
    record before a right record of the same millisecond, so the list holds the right records
    that came before the left one, however the input falls into micro-batches. A right-side
    tombstone (Kafka key: the join key) clears that key's history. A left record without its
    id goes to the dead-letter topic; a left tombstone carries no join key, so the engine
    dead-letters it before it reaches the joiner.
    """

    name = "latest-n"
    description = "Each left record enriched with the last N right records of its key."
    roles = ("left", "right")
    keyed_tombstones = frozenset({"right"})

    def writes(self) -> list[OutputValue]:
        """What each output record holds, for ``daemon validate`` and ``plugins describe``."""
        fields = self.context.fields
        return [
            OutputValue(
                [
                    Written.value_of("id", "left", self.options.left_id, "the left record's id"),
                    Written.record(fields["left"], "left", "the left record"),
                    Written.record(
                        fields["right"],
                        "right",
                        "the key's last n right records before it, oldest first",
                        many=True,
                    ),
                ],
                key="the left record's id",
            )
        ]

    def initial_state(self) -> list[dict[str, Any]]:
        """No right records yet."""
        return []

    def process(
        self,
        key: str,
        state: list[dict[str, Any]],
        records: Sequence[InputRecord],
        ctx: JoinerContext,
    ) -> Iterator[Emit | DeadLetter]:
        """Apply one key's records in order; see the class docstring for the semantics."""
        options = self.options
        for record in records:
            if record.role == "right":
                if record.value is None:
                    state.clear()
                else:
                    state.append(record.value)
                    del state[: -options.n]
                continue
            if record.value is None:
                continue  # not routed here: "left" is not in keyed_tombstones
            left_id = field_at(record.value, options.left_id)  # a dotted path, as validated
            if left_id is None:
                yield DeadLetter(
                    record, f"left record lacks its id field {options.left_id!r}", "MissingId"
                )
                continue
            ctx.count("matched" if state else "unmatched")
            yield Emit(
                key=str(left_id),
                value={
                    "id": left_id,
                    ctx.fields["left"]: record.value,
                    ctx.fields["right"]: list(state),
                },
                source=record,
            )


@hookimpl
def enrichd_register_joiners(register: Register) -> None:
    """Register ``latest-n`` with enrichd."""
    register(LatestN)
