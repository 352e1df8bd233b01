"""``lookup`` of several tables: a chain of one-table stages and a stage that numbers answers.

How it works (docs/semantics.md, "Several tables", has the user's view): state is grouped by
one join key per record, so each table gets a stage of its own, grouped by that table's key.
Stage *i* is a one-table :class:`~daemon.joiners.lookup.Lookup` whose stream records are the
records enriched so far (a *partial*: the stream record under its field, each earlier table's
answer under its own), re-keyed by the value at the table's ``lookup_key``; it adds its answer
and passes the partial on. Every partial carries, under :data:`META`:

- ``id``: the stream record's identity (its topic, partition and offset);
- ``t``: the stream record's event time, at which every table is looked up;
- ``gen``: its generation, the revision number it took at each stage so far. Generations of
  one stream record compare lexicographically: a revision at a stage outranks everything
  made from the answer it replaced, downstream included, whichever keys that went through;
- ``rank``: the arrival rank (Kafka timestamp, input, partition, offset) of the input record
  whose arrival made it, by which the next stage applies it among its table rows;
- ``open``: what it changes in the count of the stream record's partials that stages hold
  (for a ``grace``) or keep (for ``revisions``): see below.

With ``revisions`` on any table, :class:`Numbering` (grouped by ``id``) writes the output: it
drops what a higher generation has overtaken, skips an answer equal to the last written, and
numbers the rest. A stage in ``inner`` mode that finds no row sends it a withdrawal (the
secondary output :data:`WITHDRAWN`), so that an answer a late row takes away is withdrawn.

The numbering forgets a stream record once no stage holds or keeps a partial of it: nothing
can revise it then. End-of-input markers name join keys, never a stream record, so the
stages count for it: a stage that keeps a partial adds one to the ``open`` its answer carries
on, and one that drops a kept partial (end of input for its key, or past
``history_retention``), holds one, or refuses one that carries a count sends a *tally* (a
:func:`tally`, on :data:`WITHDRAWN` too) with the change. The numbering adds them up. Every
count reaches the numbering in the micro-batch it was made in, since a count waits nowhere (a
held partial's goes ahead in its tally), so after each micro-batch the sum is exact and
zero only when nothing is open, however the micro-batches were cut.

A stage's ``grace`` and ``state_ttl`` work as a one-table lookup's (the engine wakes and
expires its keys); what a wake-up, an expiry or the end of input lets out ranks
:data:`END_RANK`, after its micro-batch's records, and its counts go on in that micro-batch.

Under ``headers_from = "inputs"`` each stage puts the row it answered with before the
partial's headers, so an answer carries the tables' rows, the last stage's first, then the
stream record's; a kept partial keeps the headers it came with, so that a revision carries
the row it now matches.

Why this module is long: the stages and the numbering are one protocol (generations, ranks,
the count of open partials) that is only checked whole, so it is kept in one place.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from operator import attrgetter
from typing import Any, Final

from pydantic import Field

from daemon.joiners.aggregate import RETRACTIONS
from daemon.joiners.held_headers import held
from daemon.joiners.lookup import Lookup, LookupOptions, VersionedState
from daemon.joiners.versions import Kept, Versions, rejoin
from daemon.plugin import (
    END_OF_TIME,
    Answer,
    Chain,
    ChainStage,
    ConfigError,
    DeadLetter,
    Emit,
    Headers,
    HeadersFrom,
    InputRecord,
    Joiner,
    JoinerContext,
    JoinerOptions,
    RowAnswer,
    StateReader,
    emit_record,
    input_record,
    merge_headers,
    recast,
)

META: Final = "__enrichd"
"""The field of a partial that carries its identity, event time, generation and rank."""
WITHDRAWN: Final = "withdrawn"
"""The stages' output for the numbering alone: withdrawals (an ``inner`` stage found no row
for a partial) and tallies (:func:`tally`)."""

Rank = tuple[int, int, int, int]
"""An input record's place in the arrival order: Kafka timestamp, input, partition, offset
(input 0 is the stream, table *i* is *i* + 1)."""
_EVENT_TIME = attrgetter("event_time")
END_RANK: Final[Rank] = (END_OF_TIME, 0, 0, 0)
"""The rank of what the end of input lets out: after every record."""


@dataclass(frozen=True)
class ChainTable:
    """One table of a lookup of several.

    Attributes:
        role: the table's input (``customers``); its rows are keyed by that input's ``key``.
        field: the table's field in the output record (default: the role).
        lookup_key: where a stream record's key in this table comes from: a dotted path into
            the record enriched so far, whose first part is the stream's field or an earlier
            table's (``"order.customer_id"``, ``"customer.region_id"``), or a list of them.
        options: the table's options, as a one-table lookup's (``aggregate`` not allowed:
            running totals belong to the whole lookup).
    """

    role: str
    field: str
    lookup_key: str | tuple[str, ...]
    options: LookupOptions

    @property
    def paths(self) -> tuple[str, ...]:
        """The dotted paths of the lookup key's parts."""
        return (self.lookup_key,) if isinstance(self.lookup_key, str) else self.lookup_key


def plan_chain(stream_field: str, tables: Sequence[ChainTable]) -> list[ChainTable]:
    """The tables in stage order: each after every table whose field its key reads.

    The order given is kept where the keys allow it (orders -> customers -> regions and
    orders -> products stay as written).

    Raises:
        ConfigError: a key reads a field that is neither the stream's nor a table's, or
            tables read each other in a cycle.
    """
    fields = {table.field for table in tables}
    for table in tables:
        if table.options.aggregate is not None:
            raise ConfigError(
                f"table {table.role!r}: `aggregate` is the whole lookup's, not a table's"
            )
        for path in table.paths:
            head = path.split(".", 1)[0]
            if head != stream_field and head not in fields:
                raise ConfigError(
                    f"table {table.role!r}: lookup_key {path!r} starts with {head!r}, which is "
                    f"neither the stream's field {stream_field!r} nor a table's "
                    f"({', '.join(sorted(fields))})"
                )
            if head == table.field:
                raise ConfigError(f"table {table.role!r}: lookup_key {path!r} reads itself")
    ordered: list[ChainTable] = []
    known = {stream_field}
    waiting = list(tables)
    while waiting:
        ready = next(
            (t for t in waiting if all(p.split(".", 1)[0] in known for p in t.paths)), None
        )
        if ready is None:
            cycle = ", ".join(t.role for t in waiting)
            raise ConfigError(f"tables {cycle} read each other's fields in a cycle")
        waiting.remove(ready)
        ordered.append(ready)
        known.add(ready.field)
    return ordered


def meta(record: InputRecord) -> dict[str, Any]:
    """The chain's bookkeeping of a partial (see the module docstring)."""
    value = record.value or {}
    found: dict[str, Any] = value[META]
    return found


def enriched(partial: dict[str, Any]) -> dict[str, Any]:
    """A partial's value without the chain's bookkeeping: the output record."""
    return {name: value for name, value in partial.items() if name != META}


def as_partial(record: InputRecord, field: str) -> InputRecord:
    """A stream record as the first stage takes it: a partial of no table yet.

    Its identity is its topic, partition and offset; its rank its own place in the arrival
    order (the stream is input 0).
    """
    book = {
        "id": f"{record.topic}/{record.partition}/{record.offset}",
        "t": record.event_time,
        "gen": (),
        "rank": (record.timestamp, 0, record.partition, record.offset),
        "open": 0,
    }
    return recast(record, "stream", record.key, {field: record.value, META: book})


def opened(partial: dict[str, Any]) -> int:
    """The change a partial (or tally) brings to the count of its stream record's open partials.

    None in partials kept before stages counted: they change nothing.
    """
    return int(partial[META].get("open", 0))


def with_open(partial: dict[str, Any], count: int) -> dict[str, Any]:
    """The partial carrying ``count`` as its change to the count of open partials."""
    return {**partial, META: {**partial[META], "open": count}}


def tally(record: InputRecord | Kept, count: int) -> Emit:
    """A stage's word to the numbering: ``count`` more (or fewer) partials of a record are open.

    It carries only the partial's bookkeeping, marked ``tally``, so that the numbering neither
    writes it nor takes it for a withdrawal.
    """
    if isinstance(record, Kept):
        partial, key, headers = record.value, record.key, record.headers
    else:
        partial, key, headers = record.value or {}, record.kafka_key, record.headers
    book = {**partial[META], "open": count, "tally": True}
    return Emit(key=key, value={META: book}, output=WITHDRAWN, headers=headers)


def read_back(emit: Emit, *, placed: bool = False) -> InputRecord:
    """A stage's partial (or withdrawal) as the next stage, or the numbering, reads it back.

    Its event time is the stream record's, its timestamp that of the record that made it (let
    out by none: :meth:`LookupChain.let_out`'s stamp, else 0, the time it is written); the
    Kafka key is the stream record's. The join key is the reader's to set. ``placed``: at
    the stream record's topic, partition and offset (:func:`_place_of`), else nowhere.
    Made by :func:`input_record`: every stage makes one a partial, where a frozen
    dataclass's own constructor cost more than the stage's lookup.
    """
    value = emit.value or {}
    book = value[META]
    key = emit.key if isinstance(emit.key, bytes) else None
    timestamp = int(book.get("ts", book["rank"][0]))
    if timestamp >= END_OF_TIME:  # let out by no record, and not stamped: written when written
        timestamp = 0
    topic, partition, offset = _place_of(book) if placed else ("", 0, 0)
    return input_record(
        "stream", "", value, int(book["t"]), topic, partition, offset, key, timestamp, emit.headers
    )


class LookupStage(Lookup):
    """One table's stage of a chain: a one-table lookup whose stream records are partials.

    Role ``stream``: partials, re-keyed by this table's ``lookup_key``; role ``table``: the
    table's changelog. It answers as :class:`~daemon.joiners.lookup.Lookup` with the same
    options, and instead of an output record it passes on the partial with its answer added
    (:meth:`_out`). Its kept answers are the partials it answered, so a late row revises them
    and passes each on with the next generation.
    """

    name = "lookup-stage"
    description = "One table of a lookup of several (internal)."
    outputs = (WITHDRAWN,)  # the engine refuses an emit to an output not declared

    def __init__(self, table: ChainTable, context: JoinerContext, *, input_index: int) -> None:
        super().__init__(table.options, context)
        self.table = table
        self.input_index = input_index
        self.order = "arrival"  # a chain applies in arrival order at every stage

    def process(
        self,
        key: str,
        state: dict[str, Any] | VersionedState,
        records: Sequence[InputRecord],
        ctx: JoinerContext,
    ) -> Iterator[Emit | DeadLetter]:
        """Apply the key's records in arrival rank (:func:`stage_order`), as a lookup does.

        The engine's apply order knows Kafka timestamps, not the ranks partials carry. A
        partial refused as late goes no further: the count it carries goes on in a tally.
        """
        for result in super().process(key, state, stage_order(self, records), ctx):
            yield result
            if isinstance(result, DeadLetter) and result.record.role == "stream":
                count = opened(result.record.value or {})
                if count:
                    yield tally(result.record, count)

    def rank(self, record: InputRecord) -> Rank:
        """Where a record of this stage stands in the arrival order of all inputs."""
        if record.role == "stream":
            found: Rank = tuple(meta(record)["rank"])  # type: ignore[assignment]
            return found
        return (record.timestamp, self.input_index, record.partition, record.offset)

    def _current(
        self,
        record: InputRecord,
        table: dict[str, Any] | None,
        ctx: JoinerContext,
        headers: Headers | None = None,
    ) -> Iterator[Emit]:
        """The latest value: pass the partial on with the table's current value at once.

        ``headers``: under ``headers_from = "inputs"``, the row's and the partial's merged.
        """
        ctx.count("matched" if table is not None else "unmatched")
        yield self._out(record, table, 0, record, headers=headers)

    def reader(self) -> StateReader | None:
        """A plain stage's answers from its key's state (:meth:`Chain.reader`); else None.

        Why it may: neither versioned nor with a ``state_ttl``, a stage's key holds only its
        current row, which a partial reads and leaves as it was (:meth:`Lookup.process`),
        and the partial goes on at once (:meth:`_current`). Versioned, a partial moves the
        key's stream time and may be late, held or kept; with a TTL, reading the key may
        expire it first: those go through the engine.
        """
        options = self.options
        if options.versioned or options.state_ttl is not None:
            return None
        return self._answer_of

    def _answer_of(self, state: Any) -> Answer | None:
        """The answer of a plain key holding ``state``: what :meth:`_out` makes of a partial.

        None for an ``inner`` key without a row, which withdraws rather than answers. The
        partial's bookkeeping changes as :meth:`_out` changes it when the partial itself is
        the record that made the answer: a generation more (revision 0), its own rank, its
        stamp and its ``open`` count kept.
        """
        if not isinstance(state, dict):
            return None
        options, ctx, field = self.options, self.context, self.table.field
        table = state["table"]
        if table is None and options.mode == "inner":
            return None
        counted = "matched" if table is not None else "unmatched"
        default = options.default if table is None else None
        carries = ctx.carries_inputs
        row_headers = held(state, "table") if carries else None

        def count() -> None:
            ctx.count(counted)

        def answer(
            partial: dict[str, Any], headers: Headers | None
        ) -> tuple[dict[str, Any], Headers | None]:
            count()
            book = dict(partial[META])
            book["gen"] = (*book["gen"], 0)
            book["rank"] = tuple(book["rank"])
            if "ts" in book:  # popped and put back by _out: last among the keys
                book["ts"] = book.pop("ts")
            book["open"] = book.get("open", 0)
            answered = dict(default) if default is not None else table
            if carries:
                headers = merge_headers(row_headers, headers)
            return {**partial, field: answered, META: book}, headers

        # The row as the answer adds it (a default copied once: no answer changes it).
        row = dict(default) if default is not None else table
        return RowAnswer(answer, field, row, row_headers, carries, count)

    def missing_key(self, record: InputRecord, ctx: JoinerContext) -> Emit:
        """The answer to a partial that has no key here (a null at ``lookup_key``): no row."""
        ctx.count("unmatched")
        return self._out(record, None, 0, record)

    def _answer(
        self,
        state: VersionedState,
        records: Sequence[InputRecord],
        ctx: JoinerContext,
        at: InputRecord | None = None,
    ) -> Iterator[Emit]:
        """Answer partials that are due with the versions valid at their times; keep them."""
        versions = state.versions
        keeps = self.options.revisions
        for record in records:
            answer = versions.at(record.event_time, inclusive=True)
            ctx.count("matched" if answer is not None else "unmatched")
            headers = self._carried(versions, record.event_time, record.headers)
            # Kept, it is open here: its answer carries that on. Its revisions carry nothing.
            yield self._out(record, answer, 0, at, opens=int(keeps), headers=headers)
            if keeps:
                kept = Kept(
                    record.event_time,
                    with_open(record.value or {}, 0),
                    answer,
                    0,
                    record.kafka_key,
                    record.headers,
                )
                insort(state.kept, kept, key=_EVENT_TIME)

    def _hold(self, state: VersionedState, record: InputRecord) -> Iterator[Emit]:
        """Hold a partial for its grace; its count, and one for the hold, go on in a tally.

        The count must not wait with the partial: held, the partial carries minus one, so
        that its answer takes the hold's one back.
        """
        yield tally(record, opened(record.value or {}) + 1)
        held = replace(record, value=with_open(record.value or {}, -1))
        insort(state.held, held, key=_EVENT_TIME)

    def _dropped(self, dropped: Sequence[Kept]) -> Iterator[Emit]:
        """Kept partials this stage revises no more: one fewer open each, in a tally."""
        for kept in dropped:
            yield tally(kept, -1)

    def _revise(
        self, state: VersionedState, cause: InputRecord, ctx: JoinerContext
    ) -> Iterator[Emit]:
        """A row was added: pass on each kept partial whose answer it changes, a generation on."""
        first = bisect_left(state.kept, cause.event_time, key=_EVENT_TIME)
        for kept in state.kept[first:]:
            if not rejoin(kept, state.versions, changed_from=cause.event_time, inclusive=True):
                continue
            ctx.count("revisions")
            record = InputRecord(
                "stream", "", kept.value, kept.event_time, "", 0, 0, kept.key, 0, kept.headers
            )
            headers = self._carried(state.versions, kept.event_time, kept.headers)
            yield self._out(record, kept.answer, kept.revision, cause, headers=headers)

    def _carried(self, versions: Versions, at: int, partial: Headers | None) -> Headers | None:
        """The headers a partial goes on with: its own, under "inputs" its row's first.

        A kept partial keeps its own, so that a revision carries the row it now matches.
        """
        if not self.context.carries_inputs:
            return partial
        return merge_headers(versions.headers_at(at, inclusive=True), partial)

    def _out(
        self,
        record: InputRecord,
        answer: dict[str, Any] | None,
        revision: int,
        at: InputRecord | None,
        opens: int = 0,
        headers: Headers | None = None,
    ) -> Emit:
        """The partial with this stage's answer, or, ``inner`` without a row, a withdrawal.

        Its generation gains ``revision``; its rank is that of ``at``, the record whose
        arrival made it (None: the end of input or a wake-up); its ``open`` gains ``opens``.
        ``headers``: those it goes on with, None: ``record``'s.
        """
        if headers is None:
            headers = record.headers
        partial = record.value or {}
        book = dict(partial[META])
        book["gen"] = (*book["gen"], revision)
        book["rank"] = END_RANK if at is None else self.rank(at)
        book.pop("ts", None)  # the time of what made it: a row's is its rank's, a partial's
        if at is not None and at.role == "stream" and "ts" in meta(at):  # may be a stamp
            book["ts"] = meta(at)["ts"]
        book["open"] = book.get("open", 0) + opens
        if answer is None:
            if self.options.mode == "inner":
                return Emit(
                    key=record.kafka_key,
                    value={META: book},
                    source=at,
                    output=WITHDRAWN,
                    headers=headers,
                )
            if self.options.default is not None:
                answer = dict(self.options.default)
        value = {**partial, self.table.field: answer, META: book}
        return emit_record(record.kafka_key, value, at, None, headers)


class NumberingOptions(JoinerOptions):
    """Options of :class:`Numbering`."""

    revisions: bool = Field(default=True, description="write the `revision` number")
    retractions: bool = Field(
        default=False, description="write the answer a revision replaces to the retractions"
    )


class Numbering(Joiner[NumberingOptions, dict[str, Any]]):
    """The last stage of a revising chain, grouped by the stream record's identity.

    Role ``joined``: the last stage's partials and every stage's withdrawals and tallies,
    applied in rank order. State: the highest generation seen, the last answer written (None:
    none, or withdrawn), the next revision number and how many partials of the stream record
    stages hold or keep (``open``, the sum of the counts partials and tallies carry). A record
    of a generation not above the highest is stale: an answer made from one a revision
    upstream has replaced. An answer equal to the last written changes nothing. Any other is
    written with the next ``revision`` (a withdrawal of an answer that is out as a tombstone)
    and, with ``retractions``, the answer it replaces is written to
    :data:`~daemon.joiners.aggregate.RETRACTIONS` first, for the running totals.

    When a call leaves nothing open, no stage can revise the stream record any more: its
    entry is forgotten (the module docstring says why the count is exact then).
    """

    name = "lookup-numbering"
    description = "Numbers the answers of a lookup of several tables (internal)."
    roles = ("joined",)
    # Written only with `retractions`; declared, since the engine refuses an undeclared output.
    outputs = (RETRACTIONS,)

    def initial_state(self) -> dict[str, Any]:
        """Nothing seen, nothing written."""
        return {"gen": None, "last": None, "next": 0, "open": 0}

    def process(
        self, key: str, state: dict[str, Any], records: Sequence[InputRecord], ctx: JoinerContext
    ) -> Iterator[Emit]:
        """Write each record's answer that changes the last one written; see the class."""
        # In rank, then generation: the engine's apply order knows neither.
        records = sorted(records, key=lambda r: (tuple(meta(r)["rank"]), tuple(meta(r)["gen"])))
        # An entry from before stages counted has no count: it is kept, as it always was.
        counted = "open" in state
        for record in records:
            partial = record.value or {}
            if counted:
                state["open"] += opened(partial)
            if partial[META].get("tally"):
                continue
            gen = tuple(partial[META]["gen"])
            if state["gen"] is not None and gen <= state["gen"]:
                ctx.count("stale")
                continue
            state["gen"] = gen
            answer = enriched(partial) or None  # a withdrawal has nothing but its META
            last = state["last"]
            if answer == last:
                continue
            numbered = state["next"]
            if last is not None and self.options.retractions:
                yield Emit(
                    key=record.kafka_key,
                    value=self._value(last, numbered - 1),
                    source=record,
                    output=RETRACTIONS,
                    headers=record.headers,
                )
            if numbered:
                ctx.count("revisions")
            yield Emit(
                key=record.kafka_key,
                value=None if answer is None else self._value(answer, numbered),
                source=record,
                headers=record.headers,
            )
            state["next"], state["last"] = numbered + 1, answer
        if counted and state["open"] == 0:
            state.clear()
            state.update(self.initial_state())

    def _value(self, answer: dict[str, Any], revision: int) -> dict[str, Any]:
        if self.options.revisions:
            return {**answer, "revision": revision}
        return answer


def stage_order(stage: LookupStage, records: Sequence[InputRecord]) -> list[InputRecord]:
    """A stage key's records in arrival rank; partials of one rank by stream identity."""
    index = stage.input_index
    return sorted(records, key=lambda record: _stage_rank(record, index))


def _stage_rank(record: InputRecord, input_index: int) -> tuple[Rank, str]:
    """A record's sort key in :func:`stage_order`: :meth:`LookupStage.rank`, then identity.

    Reads a partial's bookkeeping once: a stage sorts every record it gets.
    """
    if record.role == "stream":
        book = (record.value or {})[META]
        return tuple(book["rank"]), str(book["id"])  # type: ignore[return-value]
    return (record.timestamp, input_index, record.partition, record.offset), ""


class LookupChain(Chain):
    """A lookup of several tables as the engine runs it: its stages, then the numbering.

    Args:
        stream_field: the stream record's field in the output.
        tables: the tables in stage order (:func:`plan_chain`).
        inputs: each table's place among the pipeline's inputs (the stream is 0), which
            ranks its rows at equal timestamps.
        pipeline: the pipeline's name, for the stages' contexts.
        headers_from: whose headers an output carries (``"inputs"``: each stage adds its
            row's before the partial's, so an answer carries the tables' rows, the last
            stage's first, then the stream record's).
        retractions: the numbering writes the answer each revision replaces to
            :data:`~daemon.joiners.aggregate.RETRACTIONS` first, for a running totals stage
            (with revisions on some table; without, no answer is ever replaced).
    """

    def __init__(
        self,
        stream_field: str,
        tables: Sequence[ChainTable],
        inputs: Mapping[str, int],
        pipeline: str,
        *,
        headers_from: HeadersFrom = "record",
        retractions: bool = False,
    ) -> None:
        self.stream_field = stream_field
        self.stages = tuple(
            ChainStage(
                LookupStage(
                    table,
                    JoinerContext(
                        pipeline,
                        {"stream": stream_field, "table": table.field},
                        headers_from=headers_from,
                    ),
                    input_index=inputs[table.role],
                ),
                table.role,
                table.paths,
            )
            for table in tables
        )
        revising = any(table.options.revisions for table in tables)
        self.last = (
            Numbering(
                NumberingOptions(retractions=retractions),
                JoinerContext(pipeline, {"joined": "joined"}),
            )
            if revising
            else None
        )

    def enter(self, record: InputRecord) -> InputRecord:
        """A stream record as a partial of no table yet (:func:`as_partial`)."""
        return as_partial(record, self.stream_field)

    def passed(self, emit: Emit) -> InputRecord:
        """:func:`read_back`, placed where its stream record was read (for provenance)."""
        return read_back(emit, placed=True)

    def routed(self, emit: Emit) -> InputRecord:
        """:func:`read_back`, not placed: the next stage's key and bucket need no place."""
        return read_back(emit)

    def let_out(self, emit: Emit, timestamp: int | None) -> Emit:
        """A partial let out by no record, stamped with ``timestamp`` (see :func:`read_back`).

        Its rank stays :data:`END_RANK`: the next stage applies it after the micro-batch's
        records, as they arrived before the wake-up, expiry or end of input that let it out.
        """
        if timestamp is None or emit.value is None:
            return emit
        book = {**emit.value[META], "ts": timestamp}
        return replace(emit, value={**emit.value, META: book})

    def reader(self, stage: int) -> StateReader | None:
        """A plain stage's answers from its key's state (:meth:`LookupStage.reader`)."""
        joiner = self.stages[stage].joiner
        assert isinstance(joiner, LookupStage)  # noqa: S101 - made so in __init__
        return joiner.reader()

    def ordered(self, stage: int, records: Sequence[InputRecord]) -> list[InputRecord]:
        """A stage key's records in arrival rank (:func:`stage_order`)."""
        joiner = self.stages[stage].joiner
        assert isinstance(joiner, LookupStage)  # noqa: S101 - made so in __init__
        return stage_order(joiner, records)

    def withdrawn(self, emit: Emit) -> bool:
        """A withdrawal: an ``inner`` stage found no row."""
        return emit.output == WITHDRAWN

    def identity(self, record: InputRecord) -> str:
        """The stream record's topic, partition and offset."""
        return str(meta(record)["id"])

    def without_key(self, stage: int, record: InputRecord) -> Emit:
        """The stage's no-row answer (:meth:`LookupStage.missing_key`)."""
        joiner = self.stages[stage].joiner
        assert isinstance(joiner, LookupStage)  # noqa: S101 - made so in __init__
        return joiner.missing_key(record, joiner.context)

    def output(self, emit: Emit) -> Emit | None:
        """The partial without its bookkeeping; a withdrawal writes nothing."""
        if self.withdrawn(emit):
            return None
        return emit_record(
            emit.key, enriched(emit.value or {}), emit.source, emit.output, emit.headers
        )

    def output_base(self, record: InputRecord) -> dict[str, Any] | None:
        """The stream record under the stream's field, as :meth:`output` would write it."""
        return {self.stream_field: record.value}

    def carried(self, record: InputRecord) -> InputRecord:
        """The stream record under the stream's field, where it was read."""
        topic, partition, offset = _place(record)
        value = (record.value or {}).get(self.stream_field)
        return replace(
            record, role="stream", value=value, topic=topic, partition=partition, offset=offset
        )


def _place(record: InputRecord) -> tuple[str, int, int]:
    """The topic, partition and offset of the stream record a partial comes from."""
    return _place_of(meta(record))


def _place_of(book: dict[str, Any]) -> tuple[str, int, int]:
    """The topic, partition and offset of a partial's stream record, from its bookkeeping."""
    topic, partition, offset = str(book["id"]).rsplit("/", 2)
    return topic, int(partition), int(offset)
