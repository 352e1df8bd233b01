"""The joiner contract: what a built-in or third-party joiner implements.

How it works: the engine reads every input topic, decodes each record, takes its join key and
event time, and groups the records of one micro-batch by join key. For each key it loads the
joiner's state (one picklable Python object per key, made by :meth:`Joiner.initial_state`),
calls :meth:`Joiner.process` with that key's records already in apply order (see
:attr:`Joiner.order`), stores the state back and writes what the joiner yielded:
:class:`Emit` records to the output topic (or a secondary output), :class:`DeadLetter` records
to the pipeline's dead-letter topic. Because records arrive in apply order and the state
carries everything between micro-batches, a joiner written this way gives the same results
however the input falls into micro-batches.

Time: a joiner that holds results back until event time passes a point (a window closes, a
re-join falls due) tracks its key's event time in its state as records arrive, and implements
:meth:`Joiner.advance` for the two moments time moves without a record of the key: at the
end of input (``daemon replay``, or a producer's end-of-input marker), event time jumps to
:data:`END_OF_TIME`; and when the key has been quiet for :meth:`Joiner.wakeup_ms` of
processing time, event time moves on by the processing time that passed.

Types: ``Joiner`` is generic over its options model and its state, so that ``self.options``
and the ``state`` arguments have the joiner's own types under mypy: ``class Mine(Joiner[
MineOptions, MineState])``. The options class there is also the joiner's :attr:`Joiner.Options`
(the model ``[pipeline.options]`` is validated with), unless the class sets ``Options`` itself.

Dropping state: after each :meth:`Joiner.process` and :meth:`Joiner.advance` call the engine
asks :meth:`Joiner.is_empty`; a key whose state is empty is deleted from the state store, and
its next record starts from :meth:`Joiner.initial_state` again. By default a state is empty
when it equals a new key's (``initial_state()``): dropping it then changes nothing.

Why this module is long: it is the contract a plugin author reads, the records a joiner
reads and writes beside the joiner and chain classes; and checkpoints name the records and
their makers (:func:`input_record`) by this module's path in the state they pickled, so the
records stay here.

Example:
    A joiner that forwards each record of role ``left`` with a running count per key::

        class Counting(Joiner[JoinerOptions, dict[str, int]]):
            name = "counting"
            description = "Each left record with the number of left records of its key so far."
            roles = ("left",)

            def initial_state(self) -> dict[str, int]:
                return {"count": 0}

            def process(self, key, state, records, ctx):
                for record in records:
                    state["count"] += 1
                    yield Emit(key=key, value={"left": record.value, "n": state["count"]},
                               source=record)
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from functools import cached_property
from typing import Any, ClassVar, Final, Generic, Literal, get_args, get_origin

from pydantic import BaseModel, ConfigDict
from typing_extensions import TypeVar

from daemon.model.constants import END_OF_TIME as END_OF_TIME  # where joiners have long found it
from daemon.model.headers import Headers, HeadersFrom, pickled_fields
from daemon.plugin.fields import OutputValue

Order = Literal["event_time", "arrival"]
"""How a key's records of one micro-batch are put in apply order (:attr:`Joiner.order`)."""


class JoinerOptions(BaseModel):
    """Base of a joiner's ``[pipeline.options]`` model: unknown options are rejected."""

    model_config = ConfigDict(extra="forbid", frozen=True)


OptionsT = TypeVar("OptionsT", bound=JoinerOptions, default=JoinerOptions, covariant=True)
"""A joiner's options model: the type of ``self.options`` (covariant: a joiner of
``MineOptions`` is a joiner of :class:`JoinerOptions`, which is all the engine needs)."""
StateT = TypeVar("StateT", default=Any)
"""A joiner's per-key state: what :meth:`Joiner.initial_state` returns and ``process`` gets."""


@dataclass(frozen=True, slots=True)
class InputRecord:
    """One decoded input record as a joiner sees it.

    Attributes:
        role: the role of the input it came from.
        key: the join key (the configured key field, as a string).
        value: the decoded Avro record, or None for a tombstone.
        event_time: event time in epoch milliseconds.
        topic: source topic.
        partition: source partition.
        offset: source offset.
        kafka_key: the Kafka record key as bytes, or None.
        timestamp: the Kafka record timestamp (when the record arrived), epoch milliseconds.
        headers: the record's Kafka headers that its outputs carry, by the pipeline's
            ``headers`` policy (``(name, value)`` pairs in order), or None when none is. A
            joiner that keeps the record in its state keeps them with it.
    """

    role: str
    key: str
    value: dict[str, Any] | None
    event_time: int
    topic: str
    partition: int
    offset: int
    kafka_key: bytes | None = None
    timestamp: int = 0
    headers: Headers | None = None

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickle as :func:`input_record` and the fields (the headers only when it has some).

        Joiners keep records in their state (window's held records), which the engine
        pickles every micro-batch. A slotted dataclass pickles through Python-level
        ``__getstate__`` and ``__setstate__``; this pickles and loads a record in about half
        the time. Records pickled the old way, or before records had headers, still load.
        """
        fields: tuple[Any, ...] = (
            self.role,
            self.key,
            self.value,
            self.event_time,
            self.topic,
            self.partition,
            self.offset,
            self.kafka_key,
            self.timestamp,
        )
        return (input_record, pickled_fields(fields, self.headers))

    def __setstate__(self, state: Sequence[Any]) -> None:
        """Load a record pickled the slotted dataclass's way: its fields, in order.

        One pickled before records had headers has nine; it gets none.
        """
        for each, value in zip(fields(self), state, strict=False):
            object.__setattr__(self, each.name, value)
        if len(state) < len(fields(self)):
            object.__setattr__(self, "headers", None)


(
    _ROLE,
    _KEY,
    _VALUE,
    _EVENT_TIME,
    _TOPIC,
    _PARTITION,
    _OFFSET,
    _KAFKA_KEY,
    _TIMESTAMP,
    _HEADERS,
) = (getattr(InputRecord, f.name).__set__ for f in fields(InputRecord))


def input_record(
    role: str,
    key: str,
    value: Any,
    event_time: int,
    topic: str,
    partition: int,
    offset: int,
    kafka_key: bytes | None,
    timestamp: int,
    headers: Headers | None = None,
) -> InputRecord:
    """``InputRecord(...)``, made by setting its slots directly (the engine's hot path).

    A frozen dataclass's ``__init__`` sets each field through ``object.__setattr__``; the
    slots' own setters take less time, on the engine's hot path. The result is the same
    record.
    """
    record: InputRecord = object.__new__(InputRecord)
    _ROLE(record, role)
    _KEY(record, key)
    _VALUE(record, value)
    _EVENT_TIME(record, event_time)
    _TOPIC(record, topic)
    _PARTITION(record, partition)
    _OFFSET(record, offset)
    _KAFKA_KEY(record, kafka_key)
    _TIMESTAMP(record, timestamp)
    _HEADERS(record, headers)
    return record


def recast(record: InputRecord, role: str, key: str, value: Any) -> InputRecord:
    """``record`` under another ``role``, join ``key`` and ``value``, kept where Kafka had it.

    How a stage of a chain hands a record on: the next stage reads it under its own role
    and join key, and its topic, partition, offset, Kafka key, timestamp and headers still
    name the input record it came from. Made as :func:`input_record` makes one.
    """
    return input_record(
        role,
        key,
        value,
        record.event_time,
        record.topic,
        record.partition,
        record.offset,
        record.kafka_key,
        record.timestamp,
        record.headers,
    )


@dataclass(frozen=True, slots=True)
class Emit:
    """An output record: ``value`` None is a tombstone; ``source`` gives provenance headers.

    ``output`` names one of the joiner's secondary outputs (:attr:`Joiner.outputs`, configured
    as ``[pipeline.outputs.NAME]``); None is the pipeline's main output.

    ``headers``: the input headers the output carries (a kept record's
    :attr:`InputRecord.headers`, which the pipeline's policy has already chosen); None: those
    of ``source``. A joiner sets it where the output is of another record than the one that
    caused it: a revision carries its event's headers, not those of the late record that
    revised it. Under ``headers_from = "inputs"`` a joiner that :attr:`Joiner.merges_headers`
    sets it to :func:`~daemon.model.headers.merge_headers` of every record that made the
    output (an empty tuple: no header, where None would mean the source's).
    """

    key: str | bytes | None
    value: dict[str, Any] | None
    source: InputRecord | None = None
    output: str | None = None
    headers: Headers | None = None


(_EMIT_KEY, _EMIT_VALUE, _EMIT_SOURCE, _EMIT_OUTPUT, _EMIT_HEADERS) = (
    getattr(Emit, f.name).__set__ for f in fields(Emit)
)


def emit_record(
    key: str | bytes | None,
    value: dict[str, Any] | None,
    source: InputRecord | None = None,
    output: str | None = None,
    headers: Headers | None = None,
) -> Emit:
    """``Emit(...)``, made by setting its slots directly, as :func:`input_record` makes records.

    For a joiner that emits once per record on a hot path (each stage of a chain does, for
    every record); the result is the same emit.
    """
    made: Emit = object.__new__(Emit)
    _EMIT_KEY(made, key)
    _EMIT_VALUE(made, value)
    _EMIT_SOURCE(made, source)
    _EMIT_OUTPUT(made, output)
    _EMIT_HEADERS(made, headers)
    return made


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """An input record the joiner refuses, with the reason, for the dead-letter topic.

    ``kind`` is a short class name of the reason (``LateRecord``, ``FanOutCapExceeded``, ...),
    written to the ``enrichd.error.class`` header so operators can count and filter by it.
    """

    record: InputRecord
    reason: str
    kind: str = "Rejected"


@dataclass(frozen=True)
class JoinerContext:
    """What a joiner knows about the pipeline it runs in.

    Attributes:
        pipeline: the pipeline's name.
        fields: for each role, the name of its field in the default output record.
        output_fields: field names of the output schema, for joiners that shape output to it.
        headers_from: whose headers an output carries (the pipeline's ``headers_from``):
            ``"record"``, the record it is about (an emit's ``source``, or its ``headers``);
            ``"inputs"``, every input record that made it, which a joiner that
            :attr:`Joiner.merges_headers` gives each emit as ``headers``
            (:func:`~daemon.model.headers.merge_headers`), keeping the headers of the
            records it holds in state for that.
    """

    pipeline: str
    fields: dict[str, str]
    output_fields: tuple[str, ...] = ()
    headers_from: HeadersFrom = "record"
    metrics: dict[str, int] = field(default_factory=dict)

    @property
    def carries_inputs(self) -> bool:
        """Whether outputs carry every input's headers (``headers_from = "inputs"``).

        A joiner that merges headers then keeps those of the records it holds in state.
        """
        return self.headers_from == "inputs"

    def count(self, metric: str, n: int = 1) -> None:
        """Add ``n`` to a named counter (exported as a metric by the engine)."""
        self.metrics[metric] = self.metrics.get(metric, 0) + n


JOINED: Final = "joined"
"""The role of a :class:`Downstream` stage's input that is the first stage's main output."""
RETRACTED: Final = "retracted"
"""The role of a :class:`Downstream` stage's input of retractions (see
:attr:`Downstream.retractions`)."""


@dataclass(frozen=True)
class Downstream:
    """A second keyed stage fed by a joiner's main output, re-keyed by a field of it.

    Like a Kafka Streams ``groupBy`` (which writes a repartition topic), the engine runs it as
    its own query that reads the pipeline's output topic (as role :data:`JOINED` of its
    joiner), groups by ``key`` (a dotted path
    into the output record, e.g. ``"region.region"``) and writes the secondary output named
    ``output``. Its state lives in the pipeline's checkpoint under ``downstream/``. A first
    stage that revises its outputs also names ``retractions`` (see below), so that the stage
    can take back what a revision replaces.
    """

    joiner: Joiner
    key: str
    output: str
    retractions: str | None = None
    """The output, written by the first stage, that retracts earlier outputs (the old answer
    a revision replaces), or None. The engine makes its topic itself (the main output's topic
    with ``.retractions`` appended, the main output's schema) and the stage reads it as a
    second input, role :data:`RETRACTED`, which its joiner ranks before :data:`JOINED`."""


class Joiner(ABC, Generic[OptionsT, StateT]):
    """Base class of every joiner, generic over its options model and its state.

    Subclasses set the class attributes and implement :meth:`initial_state` and
    :meth:`process`. Options arrive validated by :attr:`Options`; the joiner must keep no
    per-key data outside the state object the engine hands it, since one instance serves
    every key of a partition and the state is what survives restarts.

    ``class Mine(Joiner[MineOptions, MineState])`` types ``self.options`` as ``MineOptions``
    and the state arguments as ``MineState`` for mypy, and makes ``MineOptions`` the class's
    :attr:`Options`. A plain ``class Mine(Joiner)`` is ``Joiner[JoinerOptions, Any]``.
    """

    name: ClassVar[str]
    """The name pipelines use in ``joiner = "..."``."""
    description: ClassVar[str]
    """One line for `daemon plugins list`."""
    roles: ClassVar[tuple[str, ...]]
    """The input roles, in tie-breaking order for records with equal event time."""
    Options: ClassVar[type[JoinerOptions]] = JoinerOptions
    """The pydantic model of ``[pipeline.options]``."""
    keyed_tombstones: ClassVar[frozenset[str]] = frozenset()
    """Roles whose Kafka key is the join key, so a tombstone (which has no fields) can be
    routed by it. A tombstone on any other role goes to the dead-letter topic."""
    implemented: ClassVar[bool] = True
    """False for a joiner registered before its logic is written: ``daemon plugins list``
    shows it (marked not implemented) and pipeline files that name it are refused."""
    order: Order = "event_time"
    """Apply order of a key's records within a micro-batch. ``"event_time"``: event time,
    then role order, then partition and offset (the common rule; right for joiners whose
    results depend on event times only). ``"arrival"``: Kafka timestamp, then role order,
    then partition and offset, for joiners whose output depends on what was known when
    (revisions, late records): the source admits records to micro-batches in this order, so
    it, and with it the output, is the same however the input falls into micro-batches.
    A class attribute, which a joiner whose options change the rule sets per instance in
    ``__init__`` (``lookup`` with ``versioned = true``)."""
    merges_headers: bool = False
    """Whether the joiner carries every input's headers under ``headers_from = "inputs"``:
    it sets each emit's ``headers`` to :func:`~daemon.model.headers.merge_headers` of the
    records that made it when ``context.headers_from`` says so. A pipeline that asks for
    ``"inputs"`` of a joiner that does not is refused, rather than given one record's. A
    class attribute, which a joiner whose options change it sets per instance in
    ``__init__`` (as :attr:`order`)."""
    inputs_headers: ClassVar[str] = ""
    """For ``daemon plugins describe``, when :attr:`merges_headers`: whose headers an output
    carries under ``headers_from = "inputs"``, in their order (``"the table row, then the
    stream record"``)."""
    outputs: ClassVar[tuple[str, ...]] = ()
    """Names of secondary outputs the joiner can write (``Emit(output=NAME)``); a pipeline
    configures each it uses as ``[pipeline.outputs.NAME]`` with a topic and a schema."""

    @classmethod
    def roles_for(cls, options: Mapping[str, Any]) -> tuple[str, ...]:
        """The input roles a pipeline with these options (as written) gives the joiner.

        By default :attr:`roles`, whatever the options. A joiner whose inputs the options
        name (``lookup`` with ``tables``: the stream and each table's input) says so here, so
        that a start and ``daemon validate`` check the inputs against them.
        """
        return cls.roles

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Take :attr:`Options` from ``Joiner[MineOptions, ...]`` unless the class sets it.

        Raises:
            TypeError: the class sets an ``Options`` that is not its options type.
        """
        super().__init_subclass__(**kwargs)
        declared = _declared_options(cls)
        if declared is None:
            return
        if "Options" not in cls.__dict__:
            cls.Options = declared
        elif not (isinstance(cls.Options, type) and issubclass(cls.Options, declared)):
            raise TypeError(
                f"{cls.__name__}: Options = {cls.Options!r} is not its options type "
                f"{declared.__name__} (Joiner[{declared.__name__}, ...])"
            )

    def __init__(self, options: OptionsT, context: JoinerContext) -> None:
        self.options: OptionsT = options
        self.context = context

    @classmethod
    def semantics(cls) -> str:
        """The joiner's semantics paragraph: its class docstring."""
        return (cls.__doc__ or cls.description).strip()

    @abstractmethod
    def initial_state(self) -> StateT:
        """Return the state of a key never seen before (picklable)."""

    @abstractmethod
    def process(
        self, key: str, state: StateT, records: Sequence[InputRecord], ctx: JoinerContext
    ) -> Iterable[Emit | DeadLetter]:
        """Apply one key's records of a micro-batch, in apply order, to its state.

        Args:
            key: the join key.
            state: the key's state, mutated in place.
            records: the key's records of this micro-batch in apply order.
            ctx: the pipeline context, also for counting metrics.

        Returns:
            Output and dead-letter records, in the order they are to be written.
        """

    def state_ttl_ms(self) -> int | None:
        """How long a key's state lives after its last update (processing time); None: forever.

        By default the ``state_ttl`` option, when the joiner's options have one.
        """
        return getattr(self.options, "state_ttl", None)

    def is_empty(self, state: StateT) -> bool:
        """Whether a key's state holds nothing, so the engine drops it from the state store.

        By default: when it equals a new key's state (``initial_state()``, compared with
        ``==``). Dropping such a state changes nothing, since the key's next record starts
        from an equal one. A state that is empty in some other sense (a window that holds no
        records but keeps a clock) overrides this; so does a state whose class has no
        ``__eq__`` (it is then never equal, and never dropped).
        """
        return bool(state == self._new_state)

    @cached_property
    def _new_state(self) -> StateT:
        """A new key's state, made once per joiner for :meth:`is_empty` to compare with."""
        return self.initial_state()

    def advance(
        self, key: str, state: StateT, to: int, ctx: JoinerContext
    ) -> Iterable[Emit | DeadLetter]:
        """Event time of ``key`` has reached ``to`` without a record: emit what waited for it.

        Called at the end of input with ``to`` = :data:`END_OF_TIME` (every window closes,
        every horizon passes) and, for keys that asked with :meth:`wakeup_ms`, after that much
        quiet processing time, with ``to`` = the key's latest event time plus the processing
        time since its last record. ``to`` never goes backwards for a key. By default nothing
        waits, so nothing is emitted.
        """
        return ()

    def writes(self) -> Sequence[OutputValue]:
        """What the joiner writes, with its options and context: one value per output.

        ``daemon validate`` checks each output's schema against it and ``daemon plugins
        describe`` shows it (:mod:`daemon.plugin.fields`). By default nothing is declared,
        and no output schema is checked. Called on the driver, never per record; field names
        that follow the pipeline come from ``self.context.fields``.
        """
        return ()

    def downstream(self) -> Downstream | None:
        """A second stage that consumes this joiner's output (see :class:`Downstream`); None."""
        return None

    def chain(self) -> Chain | None:
        """The stages the joiner runs as, chained in one query (see :class:`Chain`); None.

        A joiner that returns a chain is never called itself: the engine runs its stages.
        """
        return None

    def wakeup_ms(self, state: StateT) -> int | None:
        """After how much processing time without a record :meth:`advance` is wanted; None: never.

        Asked after every :meth:`process` and :meth:`advance` call; a joiner that holds results
        back returns its idle timeout (or re-join interval) while it holds any.
        """
        return None

    def wakes_up(self) -> bool:
        """Whether the joiner ever asks for wake-ups.

        By default, when it overrides :meth:`wakeup_ms`. A joiner that holds nothing back
        with some options (``lookup`` without ``grace``) says no here, and its pipeline then
        runs no batches for timers.
        """
        return type(self).wakeup_ms is not Joiner.wakeup_ms

    def bootstrap_roles(self) -> frozenset[str]:
        """Roles whose input a new pipeline reads to its end before any other record.

        When a pipeline starts without a checkpoint, the source first admits only these
        inputs' records, up to the high watermark each partition had at start, and only then
        the other inputs', as a Kafka Streams GlobalKTable is restored before processing
        (:mod:`daemon.source.planning`). A restart from a checkpoint does not bootstrap again.
        By default none.
        """
        return frozenset()


@dataclass(frozen=True)
class ChainStage:
    """One stage of a :class:`Chain`: a joiner of roles ``stream`` and ``table``.

    Attributes:
        joiner: the stage's joiner. Its ``stream`` records are the records so far (what the
            stage before it emitted, read back by :meth:`Chain.passed`); its ``table``
            records are the rows of the input ``table`` names, keyed by that input's key.
        table: the pipeline input whose records are the stage's ``table`` role.
        paths: where a record so far has its key at this stage: dotted paths into its value
            (several for a composite key). A record with a null there is answered by
            :meth:`Chain.without_key`, without state.
    """

    joiner: Joiner
    table: str
    paths: tuple[str, ...]


Answer = Callable[[dict[str, Any], Headers | None], tuple[dict[str, Any], Headers | None]]
"""A stage's answer to one record so far from its key's state: the value and headers of
the record it emits, from the record's value and headers (:meth:`Chain.reader`)."""
StateReader = Callable[[Any], Answer | None]
"""A key's :data:`Answer` from the key's stored state, None where the state calls for more."""


class RowAnswer:
    """An :data:`Answer` that adds one field to the record so far: a table's row.

    Called, it is the stage's answer, bookkeeping and all. Its parts say what the answer adds
    to the output record: ``row`` under ``field``, and, under ``headers_from = "inputs"``
    (``merges``), the row's ``headers`` before the record's. An engine that holds every
    stage's state in one worker answers a record at every stage from them alone, and writes
    the output without the records so far in between; it then ``count``s each stage's
    answer, as calling it would. ``encoded`` is the engine's: the row's bytes as it writes
    them in the output, kept with the answer once made (None: not yet).
    """

    __slots__ = ("answer", "count", "encoded", "field", "headers", "merges", "row")

    def __init__(
        self,
        answer: Answer,
        field: str,
        row: Any,
        headers: Headers | None,
        merges: bool,
        count: Callable[[], None],
    ) -> None:
        self.answer, self.field, self.row = answer, field, row
        self.headers, self.merges, self.count = headers, merges, count
        self.encoded: bytes | None = None

    def __call__(
        self, value: dict[str, Any], headers: Headers | None
    ) -> tuple[dict[str, Any], Headers | None]:
        """The answer: the record so far's value and headers, the row added."""
        return self.answer(value, headers)


class Chain(ABC):
    """A joiner run as stages chained in one query, each grouped by its own key.

    How the engine runs it: the pipeline's stream records enter the first stage
    (:meth:`enter`); what a stage emits goes to the next stage, re-keyed by that stage's
    :attr:`ChainStage.paths`, or, from the last stage, to :attr:`last` keyed by
    :meth:`identity` (without one, :meth:`output` makes it the output record). Emits that
    :meth:`withdrawn` says withdraw an answer skip the later stages and go to :attr:`last`.
    Rows of a later stage's table pass through the earlier stages, so every stage of a
    micro-batch sees that micro-batch's rows of its table, after the stages before it.
    Only the last operator writes to Kafka.
    """

    stages: tuple[ChainStage, ...]
    """The stages, in order."""
    last: Joiner | None
    """A joiner of role ``joined`` grouped by :meth:`identity` that writes the output
    (revisions numbered across stages); None: the last stage's answers are the output."""

    @abstractmethod
    def enter(self, record: InputRecord) -> InputRecord:
        """A stream record as the first stage takes it (its ``key`` kept)."""

    @abstractmethod
    def passed(self, emit: Emit) -> InputRecord:
        """What a stage emitted, as the next stage (or :attr:`last`) reads it; key unset."""

    def routed(self, emit: Emit) -> InputRecord:
        """:meth:`passed`, as far as the engine routes it to the next stage by.

        Its value, event time, timestamp and :meth:`identity` must be :meth:`passed`'s; where
        it was read may be left out. By default :meth:`passed` itself; a chain whose
        ``passed`` does more per record than routing needs can skip it here.
        """
        return self.passed(emit)

    def let_out(self, emit: Emit, timestamp: int | None) -> Emit:
        """An emit no record made, for its key's newest ``timestamp`` (None at a wake-up)."""
        return emit

    def reader(self, stage: int) -> StateReader | None:
        """How stage ``stage`` answers records so far from its key's stored state alone.

        None (the default): it cannot, and every key goes through the engine's apply loop.
        Else a function of a key's stored state giving the key's :data:`Answer` (None: not
        for this state). The engine then hands on, for a key whose records in a call are all
        records so far (no table row, no end of input) and whose input has not ended, each
        record's answer without calling the stage's ``process``: so an answer must be what
        ``process`` would emit for that record, on the main output with the record as its
        source, counting what it counts, and ``process`` must leave such a key's state as it
        was.
        """
        return None

    def ordered(self, stage: int, records: Sequence[InputRecord]) -> list[InputRecord]:
        """A key's records in the order stage ``stage`` applies them (its ``process``'s order).

        The order in which the engine writes a :meth:`reader`'s answers at the last stage, as
        ``process`` would have emitted them. By default as given.
        """
        return list(records)

    @abstractmethod
    def withdrawn(self, emit: Emit) -> bool:
        """Whether a stage's emit withdraws an answer (it goes to :attr:`last` only)."""

    @abstractmethod
    def identity(self, record: InputRecord) -> str:
        """The stream record a record so far comes from, as :attr:`last`'s join key."""

    @abstractmethod
    def without_key(self, stage: int, record: InputRecord) -> Emit:
        """Stage ``stage``'s answer to a record so far whose key there is null."""

    @abstractmethod
    def output(self, emit: Emit) -> Emit | None:
        """The output record of the last stage's emit, without :attr:`last`; None: none."""

    def output_base(self, record: InputRecord) -> dict[str, Any] | None:
        """The output value of a stream record before any stage adds to it; None: none.

        What :meth:`output` makes of the record as it enters (:meth:`enter`), unanswered:
        where every stage's answer is a :class:`RowAnswer`, the engine adds each row to it
        and writes it. By default made so; a chain may make it without the record so far.
        """
        entered = self.enter(record)
        out = self.output(emit_record(entered.kafka_key, entered.value, None, None, None))
        return None if out is None else dict(out.value or {})

    @abstractmethod
    def carried(self, record: InputRecord) -> InputRecord:
        """The stream record a record so far carries: what a dead letter of it holds."""


def _declared_options(cls: type) -> type[JoinerOptions] | None:
    """The options class in ``cls``'s own ``Joiner[Options, State]`` base, if it names one.

    Only the class's own bases: a subclass of a typed joiner inherits its ``Options``.
    """
    for base in cls.__dict__.get("__orig_bases__", ()):
        origin = get_origin(base)
        if isinstance(origin, type) and issubclass(origin, Joiner):
            args = get_args(base)
            if args and isinstance(args[0], type) and issubclass(args[0], JoinerOptions):
                return args[0]
    return None


def apply_order(
    records: Iterable[InputRecord], roles: Sequence[str], order: Order = "event_time"
) -> list[InputRecord]:
    """Sort into apply order: time, then role, partition and offset.

    Time is the event time, or with ``"arrival"`` the Kafka timestamp: then this is the order
    in which the source admits records to capped micro-batches
    (:func:`daemon.source.admission.admit_earliest`), so the cut between two micro-batches never
    falls against it.
    """
    records = list(records)
    if len(records) < 2:  # most keys of a micro-batch have one record: nothing to sort
        return records
    rank = {role: i for i, role in enumerate(roles)}
    if order == "arrival":
        return sorted(
            records,
            key=lambda r: (r.timestamp, rank.get(r.role, len(rank)), r.partition, r.offset),
        )
    return sorted(
        records, key=lambda r: (r.event_time, rank.get(r.role, len(rank)), r.partition, r.offset)
    )
