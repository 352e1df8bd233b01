"""``comap``: co-map with keyed state, as Flink's ``connect().keyBy()`` with state."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Annotated, Any, Final

from pydantic import Field

from daemon.joiners.held_headers import held, keep
from daemon.plugin import (
    DeadLetter,
    DurationMs,
    Emit,
    FieldOf,
    Headers,
    InputRecord,
    Joiner,
    JoinerContext,
    JoinerOptions,
    OutputValue,
    Register,
    Stash,
    Written,
    hookimpl,
    merge_headers,
)

MANY_HEADERS: Final = "many.headers"
"""Under ``headers_from = "inputs"``: the state's entry of the many-side records' headers."""


class CoMapOptions(JoinerOptions):
    """Options of ``comap``."""

    many_id: Annotated[str, FieldOf("many")] = Field(
        min_length=1, description="field that identifies a many-side record"
    )
    max_many_per_key: int = Field(
        default=10_000, gt=0, description="cap on many-side records kept per key"
    )
    many_deleted_field: Annotated[str | None, FieldOf("many", ("boolean",))] = Field(
        default=None,
        description="boolean field that marks a many-side record as deleted (e.g. __deleted)",
    )
    state_ttl: DurationMs | None = Field(
        default=None, description="drop a key's state this long after its last update"
    )


class CoMap(Joiner[CoMapOptions, dict[str, Any]]):
    """Co-map with keyed state: one side (e.g. users by id) and many side (e.g. tweets by author).

    State per join key: the latest one-side record and every many-side record by its id
    (option ``many_id``). A many-side record emits a view when the one side is known; a
    one-side record re-emits a view for every stored many-side record of its key (fan-out).
    A view is ``{"id": the many-side id, one field: the one-side record, many field: the
    many-side record}`` (the fields named by the inputs' ``field``, else their roles), so the
    output schema needs an ``id`` field of the many-side id's type.
    Views are keyed by the many-side id, so a compacted output topic holds the latest view
    per many-side record, and that latest view is the same for every interleaving of the two
    inputs that keeps each topic's per-key order. A one-side tombstone deletes the one side
    and emits a view tombstone per stored many-side record. A many-side tombstone carries
    neither fields nor join key, so it cannot reach its key's state and goes to the
    dead-letter topic; a many-side delete is a record whose ``many_deleted_field`` is true
    (the shape Debezium's "rewrite" delete handling gives), which deletes that record and
    emits its view tombstone. More than
    ``max_many_per_key`` many-side records for one key: the newest id goes to the
    dead-letter topic. ``state_ttl`` drops a key's state that long (processing time) after
    its last update.
    """

    name = "comap"
    description = "Co-map with state: one-side updates fan out to every many-side record."
    roles = ("one", "many")
    keyed_tombstones = frozenset({"one"})
    merges_headers = True
    inputs_headers = (
        "the side that did not change (the one-side record, or the many-side record a "
        "one-side update fans out to), then the record that made the view"
    )

    def initial_state(self) -> dict[str, Any]:
        """No one side yet, no many-side records."""
        return {"one": None, "many": Stash()}

    def is_empty(self, state: dict[str, Any]) -> bool:
        """A key with neither side holds nothing worth keeping."""
        return state["one"] is None and not state["many"]

    def writes(self) -> list[OutputValue]:
        """A view: the many-side id as ``id``, and the two sides' records."""
        fields = self.context.fields
        return [
            OutputValue(
                [
                    Written.value_of(
                        "id", "many", self.options.many_id, "the many-side record's id (many_id)"
                    ),
                    Written.record(fields["one"], "one", "the one-side record"),
                    Written.record(fields["many"], "many", "the many-side record"),
                ],
                key="the many-side record's id, as text",
                tombstones="when the one side is deleted, or a many-side record is",
            )
        ]

    def _view(self, state: dict[str, Any], many: dict[str, Any]) -> dict[str, Any]:
        fields = self.context.fields
        return {
            "id": many[self.options.many_id],
            fields["one"]: state["one"],
            fields["many"]: many,
        }

    def process(
        self,
        key: str,
        state: dict[str, Any],
        records: Sequence[InputRecord],
        ctx: JoinerContext,
    ) -> Iterator[Emit | DeadLetter]:
        """Apply one key's records in order; see the class docstring for the semantics."""
        many_id_field: str = self.options.many_id
        cap: int = self.options.max_many_per_key
        # Many-side records wait in a stash: a key's state is read and written every
        # micro-batch it has records, and a stash carries only the ids. Only a one-side
        # update (fan-out) reads the records back.
        stored: Stash = state["many"]
        inputs = self.context.carries_inputs
        # headers_from = "inputs": the many-side records' headers by id, held beside the
        # stash (only under "inputs", and only those that have some).
        many_headers: dict[str, Any] = state.setdefault(MANY_HEADERS, {}) if inputs else {}
        for record in records:
            if record.role == "one":
                previous, state["one"] = state["one"], record.value
                if inputs:
                    keep(state, "one", None if record.value is None else record.headers)
                if previous is None and record.value is None:
                    continue  # deleting an unknown one side changes no view
                for many_id, many in stored.items():
                    headers = None
                    if inputs:  # the many-side record first, the one-side update last
                        headers = merge_headers(many_headers.get(str(many_id)), record.headers)
                    yield self._emit(state, str(many_id), many, record, headers)
                ctx.count("fanout", len(stored))
                continue
            if record.value is None:  # routed here only for keyed_tombstones roles
                continue
            if many_id_field not in record.value or record.value[many_id_field] is None:
                yield DeadLetter(
                    record, f"many-side record lacks its id field {many_id_field!r}", "MissingId"
                )
                continue
            many_id = str(record.value[many_id_field])
            deleted_field = self.options.many_deleted_field
            if deleted_field is not None and record.value.get(deleted_field):
                if many_id in stored:
                    del stored[many_id]  # without reading it back
                    many_headers.pop(many_id, None)
                    if state["one"] is not None:
                        yield Emit(
                            key=many_id,
                            value=None,
                            source=record,
                            headers=self._many_headers(state, record) if inputs else None,
                        )
                continue
            if many_id not in stored and len(stored) >= cap:
                ctx.count("fanout_cap_exceeded")
                yield DeadLetter(
                    record,
                    f"key {key!r} already holds {cap} many-side records (max_many_per_key)",
                    "FanOutCapExceeded",
                )
                continue
            stored[many_id] = record.value
            if inputs:
                if record.headers:
                    many_headers[many_id] = record.headers
                else:
                    many_headers.pop(many_id, None)
            if state["one"] is None:
                ctx.count("unmatched")
            else:
                ctx.count("matched")
                headers = self._many_headers(state, record) if inputs else None
                yield self._emit(state, many_id, record.value, record, headers)
        if inputs and not many_headers:
            state.pop(MANY_HEADERS, None)  # none held: the state keeps the bytes it had

    @staticmethod
    def _many_headers(state: dict[str, Any], record: InputRecord) -> Headers:
        """A view of a many-side record: the one side's headers, then the record's."""
        return merge_headers(held(state, "one"), record.headers)

    def _emit(
        self,
        state: dict[str, Any],
        many_id: str,
        many: dict[str, Any],
        source: InputRecord,
        headers: Headers | None = None,
    ) -> Emit:
        if state["one"] is None:
            return Emit(key=many_id, value=None, source=source, headers=headers)
        return Emit(key=many_id, value=self._view(state, many), source=source, headers=headers)


@hookimpl
def enrichd_register_joiners(register: Register) -> None:
    """Register the built-in ``comap`` joiner."""
    register(CoMap)
