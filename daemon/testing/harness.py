"""A joiner through the engine's apply loop, in plain Python.

:func:`run_joiner` and :class:`JoinerHarness`; how they differ from the engine, on purpose:
:mod:`daemon.testing`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from daemon.formats.avro.codec import AvroCodec, load_schema_file, record_fields
from daemon.model.config import JoinKey
from daemon.model.headers import HeadersFrom
from daemon.model.keys import key_parts
from daemon.operator.core import ContractBreach, EngineCore, JoinerFailure, KeyBatch
from daemon.operator.stash_log import MemoryChunks, StashLog
from daemon.operator.state_format import STATE, Bucket, dump_portable, load_state
from daemon.plugin.configured import configure
from daemon.plugin.joiner import DeadLetter, Emit, InputRecord, Joiner, JoinerOptions
from daemon.replay import ReplayRecord, arrival_order, headers_of_line, key_bytes
from daemon.source.key_router import KeyRouter

Inputs = Mapping[str, Sequence[Mapping[str, Any]]]
"""Records per role, each ``{"key": ..., "value": ..., "timestamp": ...}`` as in replay files."""


@dataclass
class JoinerRun:
    """What a joiner produced in :func:`run_joiner`.

    Attributes:
        outputs: every :class:`Emit`, in the order written (micro-batch, then key, then yield).
        dead_letters: every :class:`DeadLetter`, from routing, the joiner or the output schema.
        states: the state of each key still held at the end.
        batches: how many micro-batches ran.
        metrics: the counters the joiner added with ``ctx.count``.
        failures: every joiner call that failed, in order: the engine dead-letters a failed
            ``process``'s records as ``JoinerFailed`` (they are in :attr:`dead_letters`
            too) and writes one dead letter keyed by the join key for a failed
            ``advance``. Each holds the exception, with its traceback: ``raise
            run.failures[0].error`` shows it.
    """

    outputs: list[Emit] = field(default_factory=list)
    dead_letters: list[DeadLetter] = field(default_factory=list)
    states: dict[str, Any] = field(default_factory=dict)
    batches: int = 0
    metrics: dict[str, int] = field(default_factory=dict)
    failures: list[JoinerFailure] = field(default_factory=list)


def by_key(outputs: Iterable[Emit] | Iterable[Mapping[str, Any]]) -> dict[str, list[Any]]:
    """Output values per output key, in order: comparable across micro-batchings and engines.

    Takes :attr:`JoinerRun.outputs` or :attr:`daemon.replay.ReplayResult.outputs` (the engine
    spreads keys over partitions, so only the order within a key is defined).
    """
    seen: dict[str, list[Any]] = {}
    for out in outputs:
        if isinstance(out, Emit):
            key, value = out.key, out.value
            key = key.decode("utf-8", "replace") if isinstance(key, bytes) else key
        else:
            key, value = out["key"], out["value"]
        seen.setdefault(str(key), []).append(value)
    return seen


class JoinerHarness:
    """Drive a joiner step by step through the engine's apply loop: micro-batches, a clock, end.

    :func:`run_joiner` covers the common case; the harness is for tests of time: what a joiner
    emits when its keys go quiet (:meth:`wait` moves the processing-time clock and fires the
    wake-ups the joiner asked for with :meth:`Joiner.wakeup_ms`, and drops keys whose
    ``state_ttl`` ran out, as the engine's timers do) and at the end of input (:meth:`end`).
    Each step runs :class:`daemon.operator.core.EngineCore`, the loop the engine runs in Spark,
    on one state bucket kept in memory. It takes the arguments of :func:`run_joiner`, and
    ``output_schemas`` per secondary output.

    Example:
        >>> from daemon.joiners.comap import CoMap
        >>> harness = JoinerHarness(
        ...     CoMap, keys={"one": "id", "many": "author_id"}, options={"many_id": "id"}
        ... )
        >>> harness.feed({"many": [{"key": 7, "value": {"id": 7, "author_id": 1}, "timestamp": 2}]})
        >>> harness.wait(60_000)  # comap holds nothing back: a quiet minute emits nothing
        >>> harness.run.outputs, sorted(harness.run.states)
        ([], ['1'])
    """

    def __init__(
        self,
        joiner_cls: type[Joiner],
        *,
        keys: Mapping[str, JoinKey],
        options: Mapping[str, Any] | JoinerOptions | None = None,
        fields: Mapping[str, str] | None = None,
        times: Mapping[str, str] | None = None,
        schemas: Mapping[str, Path] | None = None,
        output_schema: Path | None = None,
        output_schemas: Mapping[str, Path] | None = None,
        headers_from: HeadersFrom = "record",
    ) -> None:
        self.cls = joiner_cls
        self.keys = dict(keys)
        self.times = dict(times or {})
        self.codecs = {
            role: AvroCodec(load_schema_file(path)) for role, path in (schemas or {}).items()
        }
        self.output_codecs: dict[str | None, AvroCodec] = {
            name: AvroCodec(load_schema_file(path)) for name, path in (output_schemas or {}).items()
        }
        if output_schema is not None:
            self.output_codecs[None] = AvroCodec(load_schema_file(output_schema))
        main = self.output_codecs.get(None)
        self.joiner = configure(
            joiner_cls,
            options,
            pipeline=f"test-{joiner_cls.name}",
            fields=fields,
            output_fields=record_fields(main.schema) if main else (),
            headers_from=headers_from,
        )
        self.context = self.joiner.context
        self.run = JoinerRun(metrics=self.context.metrics)
        self.clock_ms = 0
        """Processing time, in milliseconds since the harness started; moved by :meth:`wait`."""
        self._core = EngineCore(self.joiner, self)
        self._bucket = Bucket()
        self._chunks = MemoryChunks()
        self._seen: dict[str, None] = {}
        """Every join key routed so far, in first-seen order: :meth:`end` ends each."""
        self._stored: dict[str, bytes] = {}
        """Each key's stored state as :attr:`JoinerRun.states` last showed it."""
        self._shown: dict[str, Any] = {}
        """The objects :attr:`JoinerRun.states` last showed, to see which a test replaced."""
        self._lines: dict[str, int] = {}

    def feed(self, inputs: Inputs) -> None:
        """Run one micro-batch of ``inputs`` (records per role, as :func:`run_joiner` takes)."""
        for role in inputs:
            self._check_role(role)
        records = arrival_order(
            {role: self._numbered(role, inputs[role]) for role in self.cls.roles if role in inputs}
        )
        self.batch(records)

    def batch(self, records: Sequence[ReplayRecord]) -> None:
        """Run one micro-batch of records already in arrival order."""
        self.run.batches += 1
        grouped: dict[str, list[InputRecord]] = {}  # by join key, in first-seen order
        for item in records:
            record = _route(item, self.keys[item.role], self.times.get(item.role), self.joiner)
            if isinstance(record, DeadLetter):
                self.run.dead_letters.append(record)
            else:
                grouped.setdefault(record.key, []).append(record)
        self._seen.update(dict.fromkeys(grouped))
        self._apply([(key, group, False) for key, group in grouped.items()])

    def wait(self, ms: int) -> None:
        """Let ``ms`` of processing time pass without input, firing due timers in time order.

        The engine's timer fires when the earliest key of a bucket is due: each key due by
        then has its event time moved on by the processing time since its last record
        (:meth:`Joiner.advance`), or is dropped when its ``state_ttl`` ran out.
        """
        if ms < 0:
            raise ValueError("the clock does not go backwards")
        target = self.clock_ms + ms
        while (due := min(self._bucket.due.values(), default=None)) is not None:
            if due - _START_MS > target:
                break
            self.clock_ms = max(self.clock_ms, due - _START_MS)
            log = self._log()
            self._core.tick(self._bucket, log, self._now())
            self._stored_back(log)
        self.clock_ms = target

    def end(self) -> None:
        """End of input for every join key seen, as replay sends: event time jumps to the end.

        Every key's :meth:`Joiner.advance` gets :data:`END_OF_TIME`. The end is final: a
        record fed after it is applied and flushed at once, and counted as
        ``after_end_of_input`` in :attr:`JoinerRun.metrics`.
        """
        self._apply([(key, [], True) for key in self._seen])

    def rows(self, results: Sequence[Emit | DeadLetter]) -> list[Emit | DeadLetter]:
        """What a call's yields become (the core's :class:`~daemon.operator.core.Outlet`).

        An output's value goes through its schema, if the harness has it: one the schema
        refuses becomes an ``UnencodableOutput`` dead letter of its source record, or, with
        none, fails the call, as in the engine.
        """
        return [self._through_schema(r) if isinstance(r, Emit) else r for r in results]

    def send(self, rows: Sequence[Emit | DeadLetter]) -> None:
        """Keep a completed call's outputs and dead letters in :attr:`run`."""
        for row in rows:
            if isinstance(row, Emit):
                self.run.outputs.append(row)
            else:
                self.run.dead_letters.append(row)

    def failed(self, failure: JoinerFailure) -> None:
        """A joiner call failed: its records become ``JoinerFailed`` dead letters (as in Spark)."""
        self.run.failures.append(failure)
        reason = failure.reason()
        self.run.dead_letters += [DeadLetter(r, reason, "JoinerFailed") for r in failure.records]

    def _through_schema(self, emit: Emit) -> Emit | DeadLetter:
        codec = self.output_codecs.get(emit.output)
        if codec is None or emit.value is None:
            return emit
        try:
            value = codec.decode(codec.encode(emit.value))
        except ValueError as exc:
            if emit.source is None:
                raise ContractBreach(
                    f"the schema of its output refuses a value it emitted ({exc}), which no "
                    "input record made"
                ) from exc
            return DeadLetter(emit.source, str(exc), "UnencodableOutput")
        return replace(emit, value=value)

    def _apply(self, batch: list[KeyBatch]) -> None:
        log = self._log()
        self._core.apply(self._bucket, log, batch, self._now())
        self._stored_back(log)

    def _log(self) -> StashLog:
        """The bucket's stash log for a step, with any state a test put in the run stored.

        A test may set ``harness.run.states[key]`` (a state an older release pickled, say):
        it becomes the key's stored state, with a clock that knows nothing yet.
        """
        log = StashLog(self._chunks, self._bucket.stash)
        keys = self._bucket.keys
        for key, state in self.run.states.items():
            if self._shown.get(key, self) is state:
                continue
            entry = keys.get(key)
            if entry is not None:
                log.loads(key, entry[STATE])  # so that its stashed values count as dead
                log.forget(key)
            keys[key] = (*(entry[:STATE] if entry else (0, 0, 0, 0)), log.dumps(state))
            self._seen.setdefault(key)
        return log

    def _now(self) -> int:
        return _START_MS + self.clock_ms

    def _stored_back(self, log: StashLog) -> None:
        """End a step as the engine stores a bucket; show the keys' states in the run."""
        log.flush(self._bucket.keys)
        self._bucket.touched.clear()  # what the engine's delta would hold: written now
        keys, states = self._bucket.keys, self.run.states
        for key in [key for key in self._stored if key not in keys]:
            del self._stored[key]
            states.pop(key, None)
            self._shown.pop(key, None)
        reader = None
        for key, entry in keys.items():
            blob = entry[STATE]
            if self._stored.get(key) == blob:
                continue
            self._stored[key] = blob
            reader = reader or StashLog(self._chunks, self._bucket.stash)
            # A copy with its stashes' values inline: a test may read it after later steps.
            state = load_state(dump_portable(reader.loads(key, blob)), None)
            if self.joiner.is_empty(state):  # an ended key's clock, nothing held
                states.pop(key, None)
                self._shown.pop(key, None)
            else:
                states[key] = self._shown[key] = state

    def _check_role(self, role: str) -> None:
        if role not in self.cls.roles:
            raise ValueError(f"{self.cls.name!r} has no role {role!r}; its roles: {self.cls.roles}")
        if role not in self.keys:
            raise ValueError(f"no join key field for role {role!r}: give keys={{{role!r}: ...}}")

    def _numbered(self, role: str, lines: Sequence[Mapping[str, Any]]) -> list[ReplayRecord]:
        """Replay records whose offsets continue the role's earlier ones."""
        first = self._lines.get(role, 0)
        self._lines[role] = first + len(lines)
        return [
            replace(record, line=first + record.line)
            for record in _replay_records(role, lines, self.codecs.get(role))
        ]


_START_MS = 1
"""The processing time the harness's clock starts at, in epoch milliseconds: above 0, which
the state format reads as "not known" for a key's last update (and so as no TTL yet)."""


def run_joiner(
    joiner_cls: type[Joiner],
    inputs: Inputs,
    *,
    keys: Mapping[str, JoinKey],
    options: Mapping[str, Any] | JoinerOptions | None = None,
    fields: Mapping[str, str] | None = None,
    times: Mapping[str, str] | None = None,
    batch_size: int | None = None,
    schemas: Mapping[str, Path] | None = None,
    output_schema: Path | None = None,
    output_schemas: Mapping[str, Path] | None = None,
    end_of_input: bool = True,
    headers_from: HeadersFrom = "record",
) -> JoinerRun:
    """Run a joiner's logic over ordered inputs as ``daemon replay`` would, in plain Python.

    Args:
        joiner_cls: the joiner class (need not be installed).
        inputs: records per role (see :data:`Inputs`); roles may be left out.
        keys: per role, the join key as ``key`` in a pipeline file: a value field, a list of
            them, or ``kafka_key``.
        options: the joiner's options, as in ``[pipeline.options]`` or already validated.
        fields: per role, its field in the output (``field``); by default the role's name.
        times: per role, the value field with the event time (``time``); by default the
            record's ``timestamp``.
        batch_size: records per micro-batch (``max_records_per_batch``); None: one batch.
        schemas: per role, an .avsc file; values then go through Avro as in the engine
            (defaults filled in), and a value the schema rejects raises ``ValueError``.
        output_schema: the output's .avsc file; outputs it rejects become dead letters of
            kind ``UnencodableOutput``, and ``ctx.output_fields`` is set from it.
        output_schemas: per secondary output (:attr:`Joiner.outputs`), its .avsc file.
        end_of_input: after the last batch, end every join key's input, as replay does:
            its event time jumps to :data:`daemon.plugin.joiner.END_OF_TIME`, so that
            everything held back is out.
        headers_from: whose headers an output carries (``headers_from``): ``"inputs"``
            gives the joiner's outputs the merged headers of every record that made them.

    Returns:
        The outputs, dead letters, final states, batch count and metrics.

    Raises:
        ValueError: an unknown role, a role without a key field, a malformed record or a
            ``batch_size`` below 1.
        pydantic.ValidationError: the options do not fit the joiner's ``Options``.
    """
    if batch_size is not None and batch_size < 1:
        raise ValueError("batch_size must be at least 1")
    harness = JoinerHarness(
        joiner_cls,
        keys=keys,
        options=options,
        fields=fields,
        times=times,
        schemas=schemas,
        output_schema=output_schema,
        output_schemas=output_schemas,
        headers_from=headers_from,
    )
    for role in inputs:
        harness._check_role(role)
    # Arrival ties go by role order, as when a pipeline file lists its inputs in that order.
    records = arrival_order(
        {
            role: _replay_records(role, inputs[role], harness.codecs.get(role))
            for role in joiner_cls.roles
            if role in inputs
        }
    )
    # Bootstrapped roles are read to their end first, in batches of their own, as the engine
    # reads them at a pipeline's start (every input is there at the start here).
    first = harness.joiner.bootstrap_roles()
    step = batch_size or max(len(records), 1)
    for part in (
        [r for r in records if r.role in first],
        [r for r in records if r.role not in first],
    ):
        for start in range(0, len(part), step):
            harness.batch(part[start : start + step])
    if end_of_input:
        harness.end()
    return harness.run


def _replay_records(
    role: str, lines: Sequence[Mapping[str, Any]], codec: AvroCodec | None
) -> list[ReplayRecord]:
    records = []
    for index, line in enumerate(lines):
        timestamp = line.get("timestamp")
        if not isinstance(timestamp, int) or isinstance(timestamp, bool) or timestamp < 1:
            raise ValueError(f"{role}[{index}]: 'timestamp' must be epoch milliseconds, >= 1")
        value = line.get("value")
        if value is not None and codec is not None:
            try:
                value = codec.decode(codec.encode(dict(value)))
            except ValueError as exc:
                raise ValueError(
                    f"{role}[{index}]: value does not match its schema: {exc}"
                ) from None
        try:
            headers = headers_of_line(line.get("headers"))
        except ValueError as exc:
            raise ValueError(f"{role}[{index}]: 'headers' {exc}") from None
        records.append(ReplayRecord(role, line.get("key"), value, timestamp, index, headers))
    return records


def _route(
    item: ReplayRecord, key: JoinKey, time_field: str | None, joiner: Joiner
) -> InputRecord | DeadLetter:
    """The input record the engine's source would make, or the dead letter it would route."""
    kafka_key = key_bytes(item.key)
    record = InputRecord(
        role=item.role,
        key="",
        value=item.value,
        event_time=item.timestamp,
        topic=item.role,
        partition=0,
        offset=item.line,
        kafka_key=kafka_key,
        timestamp=item.timestamp,
        headers=item.headers,
    )
    router = KeyRouter(item.role, key_parts(key), time_field, item.role in joiner.keyed_tombstones)
    routing = router.route(item.value, kafka_key, item.timestamp)
    if routing.error is not None or routing.key is None:
        kind, _, reason = (routing.error or "MissingKey: no join key").partition(": ")
        return DeadLetter(record, reason, kind)
    return replace(record, key=routing.key, event_time=routing.event_time, timestamp=item.timestamp)
