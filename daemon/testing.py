"""A test kit for joiner authors: run a joiner over ordered inputs, with or without the engine.

How it works: inputs are given per role in the format of ``daemon replay`` input files, one
dict per record: ``{"key": ..., "value": {...} or None, "timestamp": epoch_ms}``. The ``key``
is the Kafka key, as text (it routes tombstones of roles in ``Joiner.keyed_tombstones``); the
join key comes from the value's field named in ``keys``, as in a pipeline file: a field, a
list of fields for a composite key, or ``kafka_key`` for the Kafka key.

- :func:`run_joiner` runs the joiner through the engine's own apply loop
  (:class:`daemon.operator.core.EngineCore`, the one the Spark operator runs) in plain Python:
  records arrive in timestamp order across all inputs (ties: the joiner's role order, then
  list order; the roles of :meth:`Joiner.bootstrap_roles` first, all of them, as a new
  pipeline reads them), are cut into micro-batches of ``batch_size`` and grouped by join key;
  the core puts each key's records in apply order (:func:`daemon.plugin.joiner.apply_order`),
  keeps each key's state pickled between micro-batches (stashes in a stash log, as in the
  state store) and drops it when :meth:`Joiner.is_empty` says so; at the end, every join key
  seen gets its end of input, as replay sends. Tombstones that cannot be routed, records
  without a join key or event time, and outputs the output schema rejects become dead
  letters, with the engine's ``kind``. No broker, no Spark: milliseconds per test.
- :class:`JoinerHarness` does the same step by step, with a processing-time clock a test
  moves by hand (:meth:`JoinerHarness.wait`), for joiners that act when keys go quiet or that
  have a ``state_ttl``.
- :func:`replay_joiner` runs the same inputs through the real engine (broker, Spark, Avro),
  via :func:`pipeline_file` and :func:`daemon.replay.replay`. The joiner must be installed
  (registered through the ``enrichd`` entry points), since Spark's workers load it by name.
- :func:`installed` shows a plugin's joiner as enrichd loads it, and :func:`validate` what
  ``daemon validate`` says of a pipeline file that uses it.

Differences from the engine, on purpose: an exception in ``process`` or ``advance``
propagates, so a test shows the traceback (the engine dead-letters that key's records as
``JoinerFailed``); offsets are positions in each role's list (the engine's are per Kafka
partition), so records of one role with equal event times keep list order here; every key
shares one state bucket; and processing time moves only when the test says so
(:meth:`JoinerHarness.wait`), so :func:`run_joiner`, which never waits, runs its micro-batches
at one instant: no wake-up fires and no ``state_ttl`` runs out in it.

Example:
    The built-in ``comap`` joiner, a user and then a tweet of that user::

        >>> from daemon.joiners.comap import CoMap
        >>> from daemon.testing import run_joiner
        >>> run = run_joiner(
        ...     CoMap,
        ...     {
        ...         "one": [{"key": 1, "value": {"id": 1, "name": "ada"}, "timestamp": 1}],
        ...         "many": [{"key": 7, "value": {"id": 7, "author_id": 1}, "timestamp": 2}],
        ...     },
        ...     keys={"one": "id", "many": "author_id"},
        ...     options={"many_id": "id"},
        ...     fields={"one": "author", "many": "tweet"},
        ... )
        >>> [(out.key, out.value["author"]["name"]) for out in run.outputs]
        [('7', 'ada')]
        >>> run.batches, run.dead_letters
        (1, [])
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from daemon.formats.avro.codec import AvroCodec, load_schema_file, record_fields
from daemon.model.config import JoinKey, PipelineFile, parse_pipeline_file
from daemon.model.keys import key_parts
from daemon.operator.core import EngineCore, KeyBatch
from daemon.operator.stash_log import MemoryChunks, StashLog
from daemon.operator.state_format import STATE, Bucket, dump_portable, load_state
from daemon.pipeline.validation import validate_pipeline_file
from daemon.plugin.configured import configure
from daemon.plugin.host import RegisteredJoiner, build_registry, registry
from daemon.plugin.joiner import DeadLetter, Emit, InputRecord, Joiner, JoinerOptions
from daemon.replay import ReplayRecord, ReplayResult, arrival_order, key_bytes, replay
from daemon.source.router import Router

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
    """

    outputs: list[Emit] = field(default_factory=list)
    dead_letters: list[DeadLetter] = field(default_factory=list)
    states: dict[str, Any] = field(default_factory=dict)
    batches: int = 0
    metrics: dict[str, int] = field(default_factory=dict)


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
        stage = self.joiner.downstream()
        retractions = stage.retractions if stage is not None else None
        self._outputs = (*joiner_cls.outputs, *([retractions] if retractions else []))
        """The secondary outputs the joiner may write: its own and the engine-made one of
        retractions a revising joiner writes for its second stage."""

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

    def emit(self, emit: Emit) -> None:
        """Take an output record (the core's :class:`~daemon.operator.core.Outlet`)."""
        if emit.output is not None and emit.output not in self._outputs:
            raise ValueError(
                f"{self.cls.name!r} emitted to output {emit.output!r}, not in its outputs "
                f"{self._outputs}"
            )
        codec = self.output_codecs.get(emit.output)
        if codec is None or emit.value is None:
            self.run.outputs.append(emit)
            return
        try:
            value = codec.decode(codec.encode(emit.value))
        except ValueError as exc:
            if emit.source is None:
                raise
            self.run.dead_letters.append(DeadLetter(emit.source, str(exc), "UnencodableOutput"))
            return
        self.run.outputs.append(replace(emit, value=value))

    def reject(self, letter: DeadLetter) -> None:
        """Take a dead letter the joiner yielded."""
        self.run.dead_letters.append(letter)

    def failed(self, records: Sequence[InputRecord], error: Exception) -> None:
        """The joiner raised: raise it here, so that the test shows the traceback."""
        raise error

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
        records.append(ReplayRecord(role, line.get("key"), value, timestamp, index))
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
    )
    router = Router(item.role, key_parts(key), time_field, item.role in joiner.keyed_tombstones)
    routing = router.route(item.value, kafka_key, item.timestamp)
    if routing.error is not None or routing.key is None:
        kind, _, reason = (routing.error or "MissingKey: no join key").partition(": ")
        return DeadLetter(record, reason, kind)
    return replace(record, key=routing.key, event_time=routing.event_time, timestamp=item.timestamp)


def pipeline_file(
    joiner: str,
    *,
    schemas: Mapping[str, Path],
    output_schema: Path,
    keys: Mapping[str, JoinKey],
    options: Mapping[str, Any] | None = None,
    fields: Mapping[str, str] | None = None,
    times: Mapping[str, str] | None = None,
    checkpoint: Path,
    bootstrap_servers: str | None = None,
    output_schemas: Mapping[str, Path] | None = None,
) -> PipelineFile:
    """A one-pipeline file for ``joiner``, built in code rather than read from TOML.

    Topics are named ``JOINER.ROLE``, ``JOINER.out`` and ``JOINER.NAME`` for a secondary
    output; replay suffixes them afresh per run.

    Args:
        joiner: the installed joiner's name.
        schemas: per role, its .avsc file (the roles of the pipeline).
        output_schema: the output's .avsc file.
        keys: per role, the join key, as ``key`` in a pipeline file.
        options: the joiner's options.
        fields: per role, its field in the output.
        times: per role, its event-time field.
        checkpoint: the pipeline's checkpoint folder.
        bootstrap_servers: the broker; None for the embedded one.
        output_schemas: per secondary output (``[pipeline.outputs.NAME]``), its .avsc file.

    Raises:
        daemon.model.config.ConfigProblems: the pieces do not make a valid pipeline file.
    """
    inputs = {}
    for role, schema in schemas.items():
        spec: dict[str, Any] = {
            "topic": f"{joiner}.{role}",
            "schema": str(schema),
            "key": keys[role],
        }
        if fields and role in fields:
            spec["field"] = fields[role]
        if times and role in times:
            spec["time"] = times[role]
        inputs[role] = spec
    data: dict[str, Any] = {
        "kafka": {} if bootstrap_servers is None else {"bootstrap_servers": bootstrap_servers},
        "pipeline": [
            {
                "name": f"test-{joiner}",
                "joiner": joiner,
                "checkpoint": str(checkpoint),
                "inputs": inputs,
                "output": {"topic": f"{joiner}.out", "schema": str(output_schema)},
                "outputs": {
                    name: {"topic": f"{joiner}.{name}", "schema": str(path)}
                    for name, path in (output_schemas or {}).items()
                },
                "options": dict(options or {}),
            }
        ],
    }
    return parse_pipeline_file(Path(checkpoint) / "pipeline.toml", data)


def replay_joiner(
    joiner: str | type[Joiner],
    inputs: Inputs,
    *,
    schemas: Mapping[str, Path],
    output_schema: Path,
    keys: Mapping[str, JoinKey],
    options: Mapping[str, Any] | None = None,
    fields: Mapping[str, str] | None = None,
    times: Mapping[str, str] | None = None,
    max_batch: int | None = None,
    bootstrap_servers: str | None = None,
    output_schemas: Mapping[str, Path] | None = None,
    state_cache: bool = True,
    state_deltas: bool = True,
) -> ReplayResult:
    """Run an installed joiner over ``inputs`` through the real broker and Spark engine.

    Takes the same arguments as :func:`run_joiner` (``max_batch`` for ``batch_size``), so a
    test can check that both give the same :func:`by_key` outputs. Needs Java; reuses the
    process's Spark session (a session-scoped fixture keeps one for a test run), or starts
    one for the call and stops it after.

    Args:
        joiner: the joiner's name, or its class (its ``name`` is used).
        inputs: records per role, as for :func:`run_joiner`.
        schemas: per role, its .avsc file; every role of the joiner needs one.
        output_schema: the output's .avsc file.
        keys: per role, the join key, as ``key`` in a pipeline file.
        options: the joiner's options.
        fields: per role, its field in the output.
        times: per role, its event-time field.
        max_batch: cap on records per micro-batch; None for the engine's default.
        bootstrap_servers: a running broker; None starts the embedded one for this call.
        output_schemas: per secondary output, its .avsc file (its records come back in
            :attr:`ReplayResult.extra`).
        state_cache: whether the Python workers keep decoded state between micro-batches
            (``[state] cache``); the outputs are the same either way.
        state_deltas: whether a micro-batch writes only the keys it changed (``[state]
            deltas``); the outputs are the same either way.

    Returns:
        The outputs and dead letters as JSON-ready dicts (see :class:`ReplayResult`).
    """
    cls = registry().get(joiner).cls if isinstance(joiner, str) else joiner
    schemas = {role: schemas[role] for role in cls.roles if role in schemas}
    with tempfile.TemporaryDirectory(prefix="enrichd-test-") as folder:
        work = Path(folder)
        file = pipeline_file(
            cls.name,
            schemas=schemas,
            output_schema=output_schema,
            keys=keys,
            options=options,
            fields=fields,
            times=times,
            checkpoint=work / "checkpoint",
            bootstrap_servers=bootstrap_servers,
            output_schemas=output_schemas,
        )
        settings = {"cache": state_cache, "deltas": state_deltas}
        file = file.model_copy(update={"state": file.state.model_copy(update=settings)})
        files = {}
        for role, lines in inputs.items():
            path = work / f"{role}.jsonl"
            path.write_text("".join(json.dumps(dict(line)) + "\n" for line in lines), "utf-8")
            files[role] = path
        return replay(file, files, max_batch=max_batch, bootstrap_servers=bootstrap_servers)


def installed(name: str) -> RegisteredJoiner:
    """The joiner registered as ``name``, loaded afresh as ``daemon plugins list`` loads it.

    Its ``cls`` is the class and its ``plugin`` the entry point (``name``) and the
    distribution (``distribution``, ``version``) that registered it.

    Raises:
        daemon.errors.UnknownJoinerError: no installed plugin registers ``name``.
    """
    return build_registry().get(name)


def validate(path: Path) -> list[str]:
    """What ``daemon validate --offline`` says of a pipeline file: one line per problem.

    An empty list means the file is valid. No broker or Schema Registry is asked.
    """
    return validate_pipeline_file(path, check_registry=False)[1]
