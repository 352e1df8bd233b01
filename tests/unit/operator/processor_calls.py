"""One call of the joiner processor at a time, on an in-memory stand-in for its state handle.

What ``test_processor.py`` and ``test_bucket_store.py`` share: the handle counts the reads and
writes of the state variables and the timer calls; the plans run the lookup and window
joiners over the project's schemas.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from types import SimpleNamespace
from typing import Any

import pyarrow as pa

from daemon.formats.avro.codec import AvroCodec, load_schema_file
from daemon.joiners.lookup import Lookup, LookupOptions
from daemon.joiners.window import Window, WindowOptions
from daemon.model.headers import pack as pack_headers
from daemon.model.wire import INPUT, OutputRow, pack
from daemon.operator import bucket_delta
from daemon.operator.processor import JoinerProcessor
from daemon.operator.spec import OperatorPlan
from daemon.operator.state_format import Bucket
from daemon.plugin.joiner import DeadLetter, Emit, InputRecord, Joiner, JoinerContext, JoinerOptions
from daemon.sink.spec import OutputSpec
from tests.kafka_helpers import SCHEMAS

INPUTS = (("stream", "clicks"), ("table", "regions"))
NOW = 1_700_000_000_000
BUCKET = (7,)
"""The grouping key of every call here: one bucket."""


class ValueState:
    """A value state that counts the reads and writes it is asked for."""

    def __init__(self) -> None:
        self.value: tuple[Any] | None = None
        self.writes = 0
        self.reads = 0

    def get(self) -> tuple[Any] | None:
        self.reads += 1
        return self.value

    def update(self, value: tuple[Any]) -> None:
        self.writes += 1
        self.value = value

    def clear(self) -> None:
        self.writes += 1
        self.value = None


class ListState:
    """A list state that counts the calls it is asked for."""

    def __init__(self) -> None:
        self.items: list[tuple[Any]] = []
        self.writes = 0
        self.reads = 0

    def get(self) -> Iterator[tuple[Any]]:
        self.reads += 1
        return iter(list(self.items))

    def appendValue(self, value: tuple[Any]) -> None:  # noqa: N802
        self.writes += 1
        self.items.append(value)

    def clear(self) -> None:
        self.writes += 1
        self.items = []


class Handle:
    def __init__(self) -> None:
        self.values: dict[str, ValueState] = {}
        """Each value state by name (the bucket, its stamp)."""
        self.lists: dict[str, ListState] = {}
        """Each list state by name (the bucket's deltas)."""
        self.timers: list[tuple[str, int]] = []
        """The timer calls, in order: ("register" or "delete", time)."""

    @property
    def state(self) -> ValueState:
        return self.values.setdefault("state_bucket", ValueState())

    def getValueState(self, name: str, schema: Any) -> ValueState:  # noqa: N802
        return self.values.setdefault(name, ValueState())

    def getListState(self, name: str, schema: Any) -> ListState | None:  # noqa: N802
        if name == "stash_chunks":
            return None  # neither lookup nor window stashes anything
        return self.lists.setdefault(name, ListState())

    def registerTimer(self, at: int) -> None:  # noqa: N802
        self.timers.append(("register", at))

    def deleteTimer(self, at: int) -> None:  # noqa: N802
        self.timers.append(("delete", at))


class Clock:
    def __init__(self, now: int = NOW) -> None:
        self.now = now

    def getCurrentProcessingTimeInMs(self) -> int:  # noqa: N802
        return self.now


def codec(name: str) -> AvroCodec:
    return AvroCodec(load_schema_file(SCHEMAS / f"{name}.avsc"))


def plan_of(joiner: Any, codecs: dict[str, str], output: str, inputs: Any) -> OperatorPlan:
    return OperatorPlan(
        joiner=joiner,
        codecs={role: codec(schema) for role, schema in codecs.items()},
        output_codec=codec(output),
        output_topic="out",
        dead_letter_topic="out.dlq",
        plugin="enrichd",
        inputs=inputs,
    )


def lookup_plan() -> OperatorPlan:
    context = JoinerContext(pipeline="p", fields={"stream": "click", "table": "region"})
    joiner = Lookup(LookupOptions(mode="left"), context)
    codecs = {"stream": "click", "table": "user_region"}
    return plan_of(joiner, codecs, "enriched_click", INPUTS)


def window_plan() -> OperatorPlan:
    context = JoinerContext(pipeline="p", fields={"left": "left", "right": "right"})
    joiner = Window(WindowOptions(window=10_000, idle_timeout=60_000), context)
    codecs = {"left": "left_event", "right": "right_event"}
    return plan_of(joiner, codecs, "joined_pair", (("left", "lefts"), ("right", "rights")))


def stored_bucket(handle: Handle) -> Bucket:
    """The bucket the store holds: its value with its deltas applied."""
    value = handle.state.value
    deltas = handle.lists.get("bucket_delta", ListState()).items
    return bucket_delta.load(value[0] if value else None, [d for (d,) in deltas]).bucket


def processor_on(
    plan: OperatorPlan | None = None, handle: Handle | None = None
) -> tuple[JoinerProcessor, ValueState]:
    processor = JoinerProcessor(plan or lookup_plan(), OutputSpec("p", {}, "exactly_once", "out"))
    handle = handle or Handle()
    processor.init(handle)  # type: ignore[arg-type]
    return processor, handle.state


def call(
    processor: JoinerProcessor, records: list[dict[str, Any]], now: int = NOW
) -> list[tuple[Any, ...]]:
    """One call with ``records`` (input, key, value, event_time, maybe headers) of one bucket;
    its output."""
    plan = processor.plan
    offsets = range(len(records))
    batch = pa.RecordBatch.from_pylist(
        [
            {
                "input": r["input"],
                "key": r["key"],
                "event_time": r["event_time"],
                "partition": 0,
                "offset": offset,
                "timestamp": r["event_time"],
                "kafka_key": r["key"].encode(),
                "value": plan.codecs[plan.inputs[r["input"]][0]].encode(r["value"]),
                "error": None,
                "headers": pack_headers(r.get("headers")),
            }
            for offset, r in zip(offsets, records, strict=True)
        ],
        schema=INPUT.arrow,
    )
    blob = pack(batch, [0] * len(records)).column("records")[0].as_py()
    sent: list[tuple[Any, ...]] = []
    # The fields of a Spark row the call reads.
    pack_row: Any = SimpleNamespace(records=blob, read_range=f"t/0:0-{len(records)}")
    processor._input_rows(BUCKET, iter([pack_row]), Clock(now), sent.append)
    return sent


def region_update(user: str, region: str, at: int) -> dict[str, Any]:
    return {"input": 1, "key": user, "value": {"user": user, "region": region}, "event_time": at}


def click(user: str, at: int) -> dict[str, Any]:
    value = {"id": f"c{at}", "user": user, "clicks": 1}
    return {"input": 0, "key": user, "value": value, "event_time": at}


def event(side: int, key: int, at: int) -> dict[str, Any]:
    return {
        "input": side,
        "key": str(key),
        "value": {"k": key, "v": "e", "at": at},
        "event_time": at,
    }


class Regions(Joiner[JoinerOptions, dict[str, Any]]):
    """Keeps each user's region; an empty region forgets it. Uses the default ``is_empty``."""

    name, description, roles = "regions", "regions", ("stream", "table")

    def initial_state(self) -> dict[str, Any]:
        return {"region": None}

    def process(
        self, key: str, state: dict[str, Any], records: Sequence[InputRecord], ctx: JoinerContext
    ) -> Iterator[Emit | DeadLetter]:
        for record in records:
            if record.role == "table" and record.value is not None:
                state["region"] = record.value["region"] or None
        return iter(())


def region_of(row: tuple[Any, ...]) -> Any:
    return codec("enriched_click").decode(OutputRow._make(row).value)["region"]
