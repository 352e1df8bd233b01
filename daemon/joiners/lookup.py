"""``lookup``: stream-table enrichment, as Kafka Streams' KStream-KTable and -GlobalKTable joins.

With ``versioned``, ``grace`` and ``revisions`` it stays right when table rows are late.

Why this module is long: the latest-value and the versioned lookup are one joiner, whose
answers, revisions and carried headers must agree in both modes, and whose versioned
methods a chain's stage (:mod:`daemon.joiners.lookup_chain`) overrides one by one.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right, insort
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Any, Literal

from pydantic import Field, model_validator

from daemon.joiners.aggregate import (
    RETRACTIONS,
    TOTALS,
    Aggregate,
    AggregateOptions,
    totals_value,
)
from daemon.joiners.held_headers import held, keep
from daemon.joiners.versions import Kept, Versions, headers_of, rejoin, too_old
from daemon.plugin import (
    END_OF_TIME,
    ConfigError,
    DeadLetter,
    Downstream,
    DurationMs,
    Emit,
    Headers,
    InputRecord,
    Joiner,
    JoinerContext,
    JoinerOptions,
    OutputValue,
    Written,
    merge_headers,
    pickled_fields,
)

LookupMode = Literal["inner", "left"]
"""``inner``: a stream record whose key has no table value emits nothing; ``left``: it emits
with the table side set to ``default`` (null when no default is configured)."""

_EVENT_TIME = attrgetter("event_time")


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
    versioned: bool = Field(
        default=False,
        description=(
            "keep each key's table history: a stream record joins the table version valid "
            "at its event time (the latest at or before it), in arrival order"
        ),
    )
    history_retention: DurationMs = Field(
        default=3_600_000,
        gt=0,
        description=(
            "versioned: table history kept behind the key's stream time (and, with "
            "revisions, answered stream records); older records are late"
        ),
    )
    grace: DurationMs = Field(
        default=0,
        ge=0,
        description=(
            "versioned: hold a stream record until its key's stream time reaches its event "
            "time plus this, so table rows up to this late are joined"
        ),
    )
    idle_timeout: DurationMs = Field(
        default=60_000,
        gt=0,
        description="with grace: quiet processing time after which held stream records go out",
    )
    revisions: bool = Field(
        default=False,
        description=(
            "versioned: when a late table row changes an answer already out, emit the stream "
            "record again with the next `revision`"
        ),
    )
    bootstrap: bool = Field(
        default=False,
        description=(
            "a new pipeline reads the table to the end it had at start before joining any "
            "stream record"
        ),
    )
    state_ttl: DurationMs | None = Field(
        default=None,
        gt=0,
        description=(
            "forget a key's table row (versioned: its history and records) this long "
            "(processing time) after its state last changed; then it is a tombstone to later "
            "stream records"
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

    @model_validator(mode="after")
    def _history_needs_versioned(self) -> LookupOptions:
        # Each of these reads the table's history, which only a versioned table keeps.
        if not self.versioned:
            needing = [
                name
                for name in ("history_retention", "grace", "revisions")
                if name in self.model_fields_set and getattr(self, name)
            ]
            if needing:
                raise ValueError(
                    f"`{needing[0]}` needs the table's history: set versioned = true, "
                    f"or remove `{needing[0]}`"
                )
        if self.grace > self.history_retention:
            raise ValueError(
                f"grace ({self.grace} ms) must not exceed history_retention "
                f"({self.history_retention} ms): a held stream record needs the table "
                "history of its time"
            )
        return self


@dataclass(slots=True)
class VersionedState:
    """One key's state with ``versioned = true``.

    ``stream_time`` is the greatest event time of the key's records; ``times`` and
    ``values`` its table history (:class:`~daemon.joiners.versions.Versions`; a tombstone's
    value is None); ``held`` the stream records waiting out their grace, ``kept`` the
    answered ones kept for revisions, both by event time (ties: arrival). ``row_headers``,
    under ``headers_from = "inputs"`` only, the table rows' carried headers, parallel to
    ``times`` (None otherwise: see :class:`~daemon.joiners.versions.Versions`).
    """

    stream_time: int | None = None
    times: list[int] = field(default_factory=list)
    values: list[dict[str, Any] | None] = field(default_factory=list)
    held: list[InputRecord] = field(default_factory=list)
    kept: list[Kept] = field(default_factory=list)
    row_headers: list[Headers | None] | None = None

    def __reduce__(self) -> tuple[Any, ...]:
        # Pickled with the key's state every micro-batch: as its fields (see Kept), the
        # rows' headers only when kept, so a state without them keeps its bytes.
        fields = (self.stream_time, self.times, self.values, self.held, self.kept)
        return (VersionedState, pickled_fields(fields, self.row_headers))

    @property
    def versions(self) -> Versions:
        """The table history, as the shared versions view over its lists."""
        return Versions(self.times, self.values, self.row_headers)


class Lookup(Joiner[LookupOptions, dict[str, Any] | VersionedState]):
    """Stream-table lookup: each stream record is joined with the table's value.

    The ``table`` side is a changelog: a record sets its key's value, a tombstone (routed by
    its Kafka key) deletes it. Only ``stream`` records emit; a table update never emits on
    its own. ``mode = "inner"``: no table value, no output; ``"left"``: output with the
    table side set to ``default`` (null without one). Output: ``{stream field: stream
    record, table field: table value}``, keyed by the stream record's Kafka key (as Kafka
    Streams keeps the stream's key).

    Latest value (the default): state per join key is the table's current value, nothing
    else. A stream record joins the value current at its point in apply order (event time;
    at equal event time the stream record applies first and sees the value before the
    update), and that answer is final.

    ``versioned = true``: the table keeps each key's history for ``history_retention``
    behind the key's stream time (the greatest event time of its records), and a stream
    record joins the version valid at its own event time: the latest table record at or
    before it (of equal times, the last to arrive); a tombstone ends a version (it has no
    fields, so its time is its Kafka timestamp). Records apply in arrival order, since what
    is emitted depends on what was known when. A record older than stream time -
    ``history_retention`` goes to the dead-letter topic as ``LateRecord`` (counted as
    ``late_stream`` or ``late_table``). ``grace``: a stream record is held until its key's
    stream time reaches its event time plus the grace (or the key is quiet for
    ``idle_timeout``, or its input ends), so table rows up to that late are joined.
    ``revisions = true``: answered stream records are kept for ``history_retention``, and a
    later table row that changes an answer emits the stream record again with the next
    ``revision`` (the output schema needs an int field ``revision``; the first answer is
    0; counted as ``revisions``), as ``asof`` revises; an inner answer that a late tombstone
    withdraws is a tombstone for its key. With revisions and no late record beyond
    retention, the latest output per stream record equals the batch as-of join over the
    whole input.

    ``bootstrap = true``: a new pipeline reads the table input to the end it had at start
    before any stream record is joined, as a GlobalKTable is restored first.

    ``state_ttl``: a key whose state has not changed for that long (processing time) is
    forgotten, so that the state of keys that stop updating does not grow for ever. A stream
    record that only reads the table row does not renew it; in versioned mode stream records
    are part of the key's state (its stream time, held and kept records) and do. An expired
    key's held records go out first, as at the end of input; its kept answers are no longer
    revised. To later stream records an expired row is a tombstone (``inner``: no output;
    ``left``: ``default``), and a versioned key starts afresh, its stream time too.

    Foreign keys: the stream input's ``key`` may be any field of the stream record (a
    ``user`` field of a click keyed by click id). The engine groups both inputs by join key
    across Spark's shuffle, so the table topic needs no co-partitioning with the stream (the
    GlobalKTable use case, without a full copy of the table per task).

    ``aggregate``: a second stage (see :mod:`daemon.joiners.aggregate`) keeps a running
    ``count`` or ``sum`` per ``group_by`` value of the joined records and writes every
    change of a total to ``[pipeline.outputs.totals]``, keyed by the group; with revisions,
    a revision takes the answer it replaces out of its group's total, so each stream record
    counts once, in the group of its latest answer.

    Example:
        A click at 20 answered with the region known then; a row valid from 15 arrives late
        and revises it::

            >>> from daemon.testing import run_joiner
            >>> def line(key, t, arrival, **fields):
            ...     return {"key": key, "value": {"user": "ada", "at": t, **fields},
            ...             "timestamp": arrival}
            >>> run = run_joiner(
            ...     Lookup,
            ...     {
            ...         "stream": [line("c1", 20, 2, id="c1")],
            ...         "table": [line("ada", 10, 1, region="eu"),
            ...                   line("ada", 15, 3, region="us")],
            ...     },
            ...     keys={"stream": "user", "table": "user"},
            ...     times={"stream": "at", "table": "at"},
            ...     options={"versioned": True, "revisions": True},
            ... )
            >>> [(out.key, out.value["table"]["region"], out.value["revision"])
            ...  for out in run.outputs]
            [(b'c1', 'eu', 0), (b'c1', 'us', 1)]
    """

    name = "lookup"
    description = (
        "Stream-table enrichment: each stream record joins the table's value, current or, "
        "versioned, as of its time (revised when the table is late)."
    )
    roles = ("stream", "table")
    keyed_tombstones = frozenset({"table"})
    outputs = (TOTALS,)
    merges_headers = True
    inputs_headers = (
        "the table row it was answered with (a revision: the row it now matches), then the "
        "stream record; with tables, each table's row, the last stage's first"
    )

    def __init__(self, options: LookupOptions, context: JoinerContext) -> None:
        super().__init__(options, context)
        # Versioned answers depend on what was known when: arrival order, as asof.
        self.order = "arrival" if self.options.versioned else "event_time"
        fields = context.output_fields
        if self.options.revisions and fields and "revision" not in fields:
            raise ConfigError(
                f"pipeline {context.pipeline!r}: revisions = true numbers each answer in a "
                "`revision` field; add an int field `revision` to the output schema"
            )

    def writes(self) -> list[OutputValue]:
        """The stream record and the table's answer; ``revision`` and totals when asked for."""
        options, fields = self.options, self.context.fields
        answer = "the table value joined; null when the key has none (left mode)"
        if options.default is not None:
            answer = "the table value joined, or `default` when the key has none"
        written = [
            Written.record(fields["stream"], "stream", "the stream record"),
            Written.record(
                fields["table"],
                "table",
                answer,
                nullable=options.mode == "left" and options.default is None,
            ),
        ]
        if options.revisions:
            written.append(
                Written.typed("revision", "int", "0 for the first answer, then 1, 2, ...")
            )
        values = [
            OutputValue(
                written,
                key="the stream record's Kafka key",
                tombstones="with revisions: an inner answer a late table tombstone withdrew",
                key_role="stream",
            )
        ]
        if options.aggregate is not None:
            values.append(totals_value(options.aggregate))
        return values

    def initial_state(self) -> dict[str, Any] | VersionedState:
        """No table value yet (and, versioned, no history, no stream time)."""
        if self.options.versioned:
            return VersionedState(row_headers=[] if self.context.carries_inputs else None)
        return {"table": None}

    def is_empty(self, state: dict[str, Any] | VersionedState) -> bool:
        """A key without a table value holds nothing (stream records are never stored).

        A versioned key keeps its stream time, so that whether a record is late never
        depends on where micro-batches ended.
        """
        if isinstance(state, VersionedState):
            return state.stream_time is None and not state.times
        return state["table"] is None

    def wakes_up(self) -> bool:
        """Only a grace holds stream records back: then quiet keys are woken."""
        return self.options.versioned and self.options.grace > 0

    def wakeup_ms(self, state: dict[str, Any] | VersionedState) -> int | None:
        """While stream records are held, a wake-up after ``idle_timeout`` of quiet."""
        if isinstance(state, VersionedState) and state.held:
            return self.options.idle_timeout
        return None

    def bootstrap_roles(self) -> frozenset[str]:
        """``bootstrap = true``: the table, read to its end at start."""
        return frozenset({"table"}) if self.options.bootstrap else frozenset()

    def process(
        self,
        key: str,
        state: dict[str, Any] | VersionedState,
        records: Sequence[InputRecord],
        ctx: JoinerContext,
    ) -> Iterator[Emit | DeadLetter]:
        """Apply one key's records in order; see the class docstring for the semantics."""
        if isinstance(state, VersionedState):
            for record in records:
                yield from self._apply(key, state, record, ctx)
            yield from self._dropped(self._evict(state))
            return
        inputs = self.context.carries_inputs
        for record in records:
            if record.role == "table":
                state["table"] = record.value  # a tombstone (None) deletes
                if inputs:
                    keep(state, "table", None if record.value is None else record.headers)
                continue
            if record.value is None:  # stream tombstones are dead-lettered before this
                continue
            headers = None
            if inputs:
                headers = merge_headers(held(state, "table"), record.headers)
            yield from self._current(record, state["table"], ctx, headers)

    def _current(
        self,
        record: InputRecord,
        table: dict[str, Any] | None,
        ctx: JoinerContext,
        headers: Headers | None = None,
    ) -> Iterator[Emit]:
        """Answer a stream record with the table's current value ``table`` (None: none).

        ``headers``: the answer's, under ``headers_from = "inputs"``; None: the record's.
        """
        options = self.options
        if table is None:
            ctx.count("unmatched")
            if options.mode == "inner":
                return
            table = None if options.default is None else dict(options.default)
        else:
            ctx.count("matched")
        yield Emit(
            key=record.kafka_key,
            value={ctx.fields["stream"]: record.value, ctx.fields["table"]: table},
            source=record,
            headers=headers,
        )

    def advance(
        self, key: str, state: dict[str, Any] | VersionedState, to: int, ctx: JoinerContext
    ) -> Iterator[Emit | DeadLetter]:
        """Event time moved to ``to`` without a record: held stream records that are due go out.

        At the end of input every held record goes out and no answer is kept for revision
        any more; the table history stays, for records that come after the end.
        """
        if not isinstance(state, VersionedState):
            return
        if to >= END_OF_TIME:
            yield from self._release(state, END_OF_TIME, ctx)
            dropped, state.kept = state.kept, []
            yield from self._dropped(dropped)
            if not state.times:
                state.stream_time = None
            return
        state.stream_time = to if state.stream_time is None else max(state.stream_time, to)
        yield from self._release(state, state.stream_time - self.options.grace, ctx)
        yield from self._dropped(self._evict(state))

    def downstream(self) -> Downstream | None:
        """The aggregation stage, re-keyed by ``aggregate.group_by``, when one is configured."""
        options = self.options
        if options.aggregate is None:
            return None
        stage = Aggregate(
            options.aggregate,
            JoinerContext(pipeline=self.context.pipeline, fields={"joined": "joined"}),
        )
        return Downstream(
            joiner=stage,
            key=options.aggregate.group_by,
            output=TOTALS,
            retractions=RETRACTIONS if self.retracts() else None,
        )

    def retracts(self) -> bool:
        """Whether an answer written can be replaced, so totals must take it back: revisions."""
        return self.options.revisions

    # -- versioned --------------------------------------------------------------------------

    def _apply(
        self, key: str, state: VersionedState, record: InputRecord, ctx: JoinerContext
    ) -> Iterator[Emit | DeadLetter]:
        """Apply one record in arrival order.

        Judge its lateness, add a version or hold a stream record, revise what a version
        changes, then answer the stream records now due.
        """
        options = self.options
        event_time = record.event_time
        late = too_old(record, key, state.stream_time, options.history_retention, "table", ctx)
        if late is not None:
            yield late
            return
        stream_time = state.stream_time
        state.stream_time = event_time if stream_time is None else max(stream_time, event_time)
        if record.role == "table":
            if self.context.carries_inputs:
                state.row_headers = headers_of(state.times, state.row_headers)
            # A tombstone ends a version; it has no row whose headers an answer carries.
            headers = None if record.value is None else record.headers
            state.versions.add(event_time, record.value, headers)
            if options.revisions:
                yield from self._revise(state, record, ctx)
        elif record.value is not None:  # stream tombstones are dead-lettered before this
            if not state.held and event_time <= state.stream_time - options.grace:
                # Due at once, and nothing older waits: answer it without holding it.
                yield from self._answer(state, (record,), ctx, record)
                return
            yield from self._hold(state, record)
        yield from self._release(state, state.stream_time - options.grace, ctx, record)

    def _hold(self, state: VersionedState, record: InputRecord) -> Iterator[Emit]:
        """Hold a stream record until its grace has passed.

        A stage of a chain of lookups also tells its numbering (see
        :meth:`~daemon.joiners.lookup_chain.LookupStage._hold`); here nothing is emitted.
        """
        insort(state.held, record, key=_EVENT_TIME)
        return iter(())

    def _release(
        self,
        state: VersionedState,
        up_to: int,
        ctx: JoinerContext,
        at: InputRecord | None = None,
    ) -> Iterator[Emit]:
        """Answer the held stream records of event time up to ``up_to``, oldest first.

        ``at``: the record whose arrival lets them out (None: a wake-up or the end of input).
        """
        due = bisect_right(state.held, up_to, key=_EVENT_TIME)
        if not due:
            return
        released = state.held[:due]
        del state.held[:due]
        yield from self._answer(state, released, ctx, at)

    def _answer(
        self,
        state: VersionedState,
        records: Sequence[InputRecord],
        ctx: JoinerContext,
        at: InputRecord | None = None,
    ) -> Iterator[Emit]:
        """Answer stream records that are due, with the versions valid at their times.

        ``at``: the record whose arrival makes them due; a stage of a chain of lookups
        (:mod:`daemon.joiners.lookup_chain`) ranks its answers by it. Here they keep their own.
        """
        versions = state.versions
        for record in records:
            answer = versions.at(record.event_time, inclusive=True)
            ctx.count("matched" if answer is not None else "unmatched")
            revision = 0
            if self._shows(answer):
                headers = None
                if self.context.carries_inputs:
                    row = versions.headers_at(record.event_time, inclusive=True)
                    headers = merge_headers(row, record.headers)
                yield Emit(
                    key=record.kafka_key,
                    value=self._value(record.value or {}, answer, revision),
                    source=record,
                    headers=headers,
                )
            else:
                revision = -1  # nothing out yet: a first answer from a revision is number 0
            if self.options.revisions:
                value = record.value or {}
                kept = Kept(
                    record.event_time, value, answer, revision, record.kafka_key, record.headers
                )
                insort(state.kept, kept, key=_EVENT_TIME)

    def _revise(
        self, state: VersionedState, cause: InputRecord, ctx: JoinerContext
    ) -> Iterator[Emit]:
        """A table record was added: emit a revision of each kept answer it changes.

        A revision carries the table record's provenance and timestamp, as when it happened,
        and the headers of the stream record it answers. With an aggregation stage, the answer
        it replaces is also written to the retractions output, so that stage takes it back
        from its group.
        """
        versions = state.versions
        retracts = self.options.aggregate is not None
        first = bisect_left(state.kept, cause.event_time, key=_EVENT_TIME)
        for kept in state.kept[first:]:
            before, numbered = kept.answer, kept.revision
            if not rejoin(kept, versions, changed_from=cause.event_time, inclusive=True):
                continue
            ctx.count("revisions")
            headers = kept.headers
            if self.context.carries_inputs:  # the newly matched row's, then the stream record's
                row = versions.headers_at(kept.event_time, inclusive=True)
                headers = merge_headers(row, kept.headers)
            if retracts and self._shows(before):
                yield Emit(
                    key=kept.key,
                    value=self._value(kept.value, before, numbered),
                    source=cause,
                    output=RETRACTIONS,
                    headers=headers,
                )
            value = self._value(kept.value, kept.answer, kept.revision)
            yield Emit(
                key=kept.key,
                value=value if self._shows(kept.answer) else None,
                source=cause,
                headers=headers,
            )

    def _evict(self, state: VersionedState) -> list[Kept]:
        """Forget what no record that is still on time can need; return the answers dropped.

        That is the history older than the retention (but the version current at its start)
        and the answers kept from there, which are revised no more.
        """
        if state.stream_time is None:
            return []
        cutoff = state.stream_time - self.options.history_retention
        state.versions.forget_before(cutoff)
        if state.values and state.values[0] is None and state.times[0] < cutoff:
            # A tombstone at the start answers as no history at all does.
            state.versions.drop_first()
        first = bisect_left(state.kept, cutoff, key=_EVENT_TIME)
        dropped = state.kept[:first]
        del state.kept[:first]
        return dropped

    def _dropped(self, dropped: Sequence[Kept]) -> Iterator[Emit]:
        """Kept answers that will be revised no more: here nothing follows.

        A stage of a chain of lookups tells its numbering, which then forgets a stream
        record no stage can revise (see
        :meth:`~daemon.joiners.lookup_chain.LookupStage._dropped`).
        """
        return iter(())

    def _shows(self, answer: dict[str, Any] | None) -> bool:
        """Whether an answer is emitted: inner mode emits none without a table value."""
        return answer is not None or self.options.mode == "left"

    def _value(
        self, stream: dict[str, Any], answer: dict[str, Any] | None, revision: int
    ) -> dict[str, Any]:
        options = self.options
        if answer is None and options.default is not None:
            answer = dict(options.default)
        fields = self.context.fields
        value: dict[str, Any] = {fields["stream"]: stream, fields["table"]: answer}
        if options.revisions:
            value["revision"] = revision
        return value
