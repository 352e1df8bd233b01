"""A lookup of several tables in plain Python: its stages in turn on each micro-batch.

:func:`run_chain` replays recorded inputs through the stages of
:mod:`daemon.joiners.lookup_chain` as the engine is to run them: the inputs in arrival order,
cut into micro-batches of ``max_batch`` records; in each, every stage in chain order takes its
table's rows of the micro-batch and the partials the stage before it passed on, grouped by
its key, in arrival rank. The engine is to reach the same by taking a stage's table rows only
up to the rank the stage before it has finished. Tables that bootstrap are read first, in
micro-batches of their own, as a new query reads them. At the end, each stage in turn lets out
what it holds. It keeps no state across a restart and checks no schema: it is the reference
the engine's run of a chain is to agree with, in the tests until the engine runs chains.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from daemon.joiners.lookup_chain import (
    WITHDRAWN,
    ChainTable,
    LookupStage,
    Numbering,
    NumberingOptions,
    as_partial,
    enriched,
    meta,
    plan_chain,
    read_back,
    stage_order,
)
from daemon.model.keys import KAFKA_KEY, join_key
from daemon.plugin import END_OF_TIME, DeadLetter, Emit, InputRecord, JoinerContext, field_at

Lines = Sequence[Mapping[str, Any]]
"""Records of one input, each ``{"key": ..., "value": ..., "timestamp": ...}`` as in replay."""


@dataclass(frozen=True)
class ChainStream:
    """The stream input of a chain.

    Attributes:
        role: its input's name (``orders``).
        field: its field in the output record (``order``).
        time: its event-time field; None: the Kafka timestamp.
    """

    role: str
    field: str
    time: str | None = None


@dataclass
class ChainRun:
    """What :func:`run_chain` produced.

    Attributes:
        outputs: the output records (and, with ``retractions``, the retractions, marked by
            their ``output``), in the order written.
        dead_letters: every refused record (a late partial is refused as the stream record
            it carries).
        numbered: how many stream records the numbering stage still holds at the end.
        numbered_after: how many it held after each micro-batch (the end of input's last).
        metrics: each stage's counters, named ``TABLE.NAME`` (``customers.matched``), and
            the numbering stage's (``revisions``: outputs that replace an earlier one).
        batches: how many micro-batches ran.
    """

    outputs: list[Emit] = field(default_factory=list)
    dead_letters: list[DeadLetter] = field(default_factory=list)
    metrics: dict[str, int] = field(default_factory=dict)
    batches: int = 0
    numbered: int = 0
    numbered_after: list[int] = field(default_factory=list)


class _Chain:
    """The stages of one chain and their state."""

    def __init__(
        self,
        stream: ChainStream,
        tables: Sequence[ChainTable],
        row_keys: Mapping[str, str | Sequence[str]],
        times: Mapping[str, str],
        retractions: bool,
    ) -> None:
        self.stream, self.row_keys, self.times = stream, row_keys, times
        inputs = {table.role: index + 1 for index, table in enumerate(tables)}
        self.stages = [
            LookupStage(
                table,
                JoinerContext("chain", {"stream": stream.field, "table": table.field}),
                input_index=inputs[table.role],
            )
            for table in plan_chain(stream.field, tables)
        ]
        self.states: list[dict[str, Any]] = [{} for _ in self.stages]
        revising = any(table.options.revisions for table in tables)
        self.numbering = (
            Numbering(
                NumberingOptions(retractions=retractions),
                JoinerContext("chain", {"joined": "joined"}),
            )
            if revising
            else None
        )
        self.numbered: dict[str, Any] = {}
        self.run = ChainRun()

    def batch(self, lines: Sequence[tuple[int, int, str, Mapping[str, Any]]]) -> None:
        """One micro-batch: ``(input, offset, role, line)`` in arrival order."""
        partials = [self._partial(o, line) for i, o, _, line in lines if i == 0]
        rows = {role: [] for role in self.row_keys}  # type: dict[str, list[InputRecord]]
        for _, offset, role, line in lines:
            if role != self.stream.role:
                rows[role].append(self._row(role, offset, line))
        withdrawn: list[Emit] = []
        for index, stage in enumerate(self.stages):
            passed = self._stage(index, partials, rows[stage.table.role], withdrawn)
            partials = [read_back(emit) for emit in passed]
        self._finish(partials, withdrawn)
        self.run.batches += 1

    def end(self) -> None:
        """The end of input: each stage in turn takes what came and lets out what it holds."""
        partials: list[InputRecord] = []
        withdrawn: list[Emit] = []
        for index, stage in enumerate(self.stages):
            passed = self._stage(index, partials, [], withdrawn)
            for key, state in self.states[index].items():
                passed += self._sorted(stage.advance(key, state, END_OF_TIME, stage.context))
            passed = [emit for emit in passed if not self._withdrawal(emit, withdrawn)]
            partials = [read_back(emit) for emit in passed]
        self._finish(partials, withdrawn)

    def _stage(
        self,
        index: int,
        partials: Sequence[InputRecord],
        rows: Sequence[InputRecord],
        withdrawn: list[Emit],
    ) -> list[Emit]:
        """Run stage ``index`` on one micro-batch's records; its withdrawals to ``withdrawn``."""
        stage, states = self.stages[index], self.states[index]
        ctx = stage.context
        passed: list[Emit] = []
        groups: dict[str, list[InputRecord]] = {}
        for partial in partials:
            parts = [field_at(partial.value, path) for path in stage.table.paths]
            if any(part is None for part in parts):
                passed.append(stage.missing_key(partial, ctx))
                continue
            groups.setdefault(join_key(parts), []).append(replace(partial, key=join_key(parts)))
        for row in rows:
            groups.setdefault(row.key, []).append(row)
        for key, records in groups.items():
            state = states.setdefault(key, stage.initial_state())
            passed += self._sorted(stage.process(key, state, stage_order(stage, records), ctx))
        return [emit for emit in passed if not self._withdrawal(emit, withdrawn)]

    def _sorted(self, results: Any) -> list[Emit]:
        """The stage's emits; its dead letters go to the run."""
        emits = []
        for result in results:
            if isinstance(result, DeadLetter):
                self.run.dead_letters.append(result)
            else:
                emits.append(result)
        return emits

    @staticmethod
    def _withdrawal(emit: Emit, withdrawn: list[Emit]) -> bool:
        if emit.output == WITHDRAWN:
            withdrawn.append(emit)
            return True
        return False

    def _finish(self, partials: Sequence[InputRecord], withdrawn: Sequence[Emit]) -> None:
        """Write the last stage's answers: numbered, or as they come without revisions."""
        ordered = sorted(partials, key=_rank_and_identity)
        if self.numbering is None:
            for partial in ordered:
                self.run.outputs.append(
                    Emit(
                        key=partial.kafka_key,
                        value=enriched(partial.value or {}),
                        headers=partial.headers,
                    )
                )
            return
        joined = [*ordered, *(read_back(emit) for emit in withdrawn)]
        groups: dict[str, list[InputRecord]] = {}
        for record in sorted(joined, key=_rank_and_identity):
            groups.setdefault(str(meta(record)["id"]), []).append(replace(record, role="joined"))
        ctx = self.numbering.context
        for key, records in groups.items():
            state = self.numbered.setdefault(key, self.numbering.initial_state())
            records.sort(key=lambda r: (tuple(meta(r)["rank"]), tuple(meta(r)["gen"])))
            self.run.outputs += self.numbering.process(key, state, records, ctx)
            if self.numbering.is_empty(state):  # as the engine drops an empty key's state
                del self.numbered[key]
        self.run.numbered_after.append(len(self.numbered))

    def _partial(self, offset: int, line: Mapping[str, Any]) -> InputRecord:
        """A stream record as the first stage takes it."""
        value, timestamp = line["value"], int(line["timestamp"])
        event_time = _event_time(value, self.stream.time, timestamp)
        record = InputRecord(
            "stream",
            "",
            value,
            event_time,
            self.stream.role,
            0,
            offset,
            _key_bytes(line.get("key")),
            timestamp,
        )
        return as_partial(record, self.stream.field)

    def _row(self, role: str, offset: int, line: Mapping[str, Any]) -> InputRecord:
        """A table row, keyed by its own key (a tombstone by its Kafka key).

        A key part ``kafka_key.FIELD`` is that field of the line's key (a JSON key, as a
        dict), so a tombstone of a table keyed by its Kafka key's fields reaches its row.
        """
        value, timestamp = line["value"], int(line["timestamp"])
        paths = self.row_keys[role]
        paths = [paths] if isinstance(paths, str) else list(paths)
        if value is None and not all(path.startswith(f"{KAFKA_KEY}.") for path in paths):
            key = str(line["key"])
        else:
            found = {**(value or {}), KAFKA_KEY: line.get("key")}
            key = join_key([field_at(found, path) for path in paths])
        event_time = _event_time(value, self.times.get(role), timestamp)
        return InputRecord(
            "table", key, value, event_time, role, 0, offset, _key_bytes(line.get("key")), timestamp
        )


def _rank_and_identity(record: InputRecord) -> tuple[Any, ...]:
    book = meta(record)
    return (tuple(book["rank"]), str(book["id"]))


def _event_time(value: Mapping[str, Any] | None, time: str | None, timestamp: int) -> int:
    """A record's event time: its ``time`` field, else (and for tombstones) its timestamp."""
    if value is None or time is None:
        return timestamp
    return int(field_at(value, time))


def _key_bytes(key: Any) -> bytes | None:
    return None if key is None else str(key).encode()


def run_chain(
    stream: ChainStream,
    tables: Sequence[ChainTable],
    inputs: Mapping[str, Lines],
    *,
    row_keys: Mapping[str, str | Sequence[str]],
    times: Mapping[str, str] | None = None,
    max_batch: int | None = None,
    retractions: bool = False,
    end: bool = True,
    bootstrap: Collection[str] = (),
) -> ChainRun:
    """Replay ``inputs`` (per role; the stream's and each table's) through a chain.

    Args:
        stream: the stream input.
        tables: the tables, in the pipeline file's order (it ranks their rows at equal
            timestamps: stream first, then the tables as written).
        inputs: each input's records, in its partition's order.
        row_keys: each table's own key (its input's ``key``): a field or a list of them; a
            part ``kafka_key.FIELD`` reads the line's key (a dict, as a JSON key).
        times: event-time fields per role; a role without one uses the Kafka timestamp.
        max_batch: records per micro-batch; None: one micro-batch.
        retractions: write the answer each revision replaces (for running totals).
        end: let every stage out at the end of input, as end-of-input markers for every key
            do; False: stop after the last micro-batch.
        bootstrap: tables with ``bootstrap = true``: as a new query reads them, all their
            records come first, in micro-batches of their own (of ``max_batch`` records),
            then every other record in arrival order.

    Returns:
        What the chain wrote and refused.
    """
    chain = _Chain(stream, tables, row_keys, dict(times or {}), retractions)
    order = [stream.role, *(table.role for table in tables)]
    arrival = sorted(
        (
            (int(line["timestamp"]), index, offset, role, line)
            for index, role in enumerate(order)
            for offset, line in enumerate(inputs.get(role, ()))
        ),
        key=lambda item: item[:3],
    )
    first = [item for item in arrival if item[3] in bootstrap]
    then = [item for item in arrival if item[3] not in bootstrap]
    for part in (first, then):
        size = max_batch or max(len(part), 1)
        for start in range(0, len(part), size):
            chain.batch([(i, o, role, line) for _, i, o, role, line in part[start : start + size]])
    if end:
        chain.end()
    run = chain.run
    run.numbered = len(chain.numbered)
    for stage in chain.stages:
        for name, n in stage.context.metrics.items():
            run.metrics[f"{stage.table.role}.{name}"] = n
    if chain.numbering is not None:
        run.metrics.update(chain.numbering.context.metrics)
    return run
