"""Results do not depend on how records fall into micro-batches, through the real engine.

Every built-in joiner replays the same input with ``max_batch`` unset and 1 (the joiners
take turns to run that replay with the Python workers' state cache and state deltas off,
``[state] cache`` and ``deltas``, or on), and in continuous mode with sub-batches of 1, and
must write the same outputs and dead letters (as multisets: the engine promises no order
across keys). The inputs are random (hypothesis),
many keys to a replay (every drawn input's, each in key spaces of its own, side by side),
with timestamps from a small range so that records of different inputs tie, and each key
ends with a record that matters: a partner on the other input with the same timestamp as the
one before, a late record, or a tombstone. Event time is the Kafka timestamp for the joiners
that apply records in event-time order (comap, lookup, table), so that arrival and event
time agree; asof, window and a versioned lookup with a grace and revisions take it from a
field, with delays that make some records late (revised, or past the retention).

The case that opened this file: a window join whose key's end of input was admitted before
the other input's last record with the same timestamp, so that record was never flushed
(:func:`test_the_last_record_of_a_replay_is_joined_with_every_cap`).
"""

from __future__ import annotations

import json
import os
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from daemon.model.config import Mode
from daemon.replay import ReplayResult
from daemon.testing import replay_joiner

SCHEMAS = Path(__file__).resolve().parents[2] / "schemas"
T0 = 1_000_000
"""The first Kafka timestamp of every replay here; a step's tick is added to it."""
CAP = 1
"""The capped replay's ``max_batch``: one record a batch, the finest split. A replay is a
query's start plus half a second or more a batch: a third replay of every joiner at a cap of
2 or 3 cost the suite about 3 minutes of test time, and splits no record pair that a cap of 1
leaves together (``test_the_last_record_of_a_replay_is_joined_with_every_cap`` replays one
case at 2 too)."""
EXAMPLES = int(os.environ.get("ENRICHD_BATCH_EXAMPLES", "2"))
"""Inputs per joiner. Hypothesis draws them (the simplest first: here the smallest distinct
key histories, each ending at the end of the input; then random ones) and they are replayed
side by side, each in key spaces of its own, so that a query's start and its topics are paid
once per cap, not once per input. Raise it for a longer search."""
SPACES = 3
"""Key spaces (join keys) per replay, each with a history of its own."""
END_TICK = 7
"""The tick of the newest records, and so of the end-of-input markers."""

Final = Literal["tie", "late", "tombstone"]


@dataclass(frozen=True)
class Step:
    """One record of a key's history: which input, when it arrives, how late its event is."""

    role: str
    tick: int
    """Arrival: the Kafka timestamp is ``T0 + tick``, shared by every key, so ties abound."""
    delay: int = 0
    """Event time is the arrival minus this (joiners that read event time from a field)."""
    tombstone: bool = False


@dataclass(frozen=True)
class Case:
    """A joiner's pipeline and how to make its records."""

    name: str
    joiner: str
    schemas: dict[str, Path]
    output: Path
    keys: dict[str, str]
    value: Callable[[str, int, int, int, int], dict[str, Any]]
    """(role, key space, step number, timestamp, event time) -> the record's value."""
    kafka_key: Callable[[str, int, int], Any]
    """(role, key space, step number) -> the record's Kafka key (a tombstone's routes it)."""
    options: dict[str, Any] = field(default_factory=dict)
    times: dict[str, str] | None = None
    fields: dict[str, str] | None = None
    max_delay: int = 0
    """How late events may be, in ticks; 0 where event time is the Kafka timestamp."""
    explicit: tuple[tuple[tuple[Step, ...], ...], ...] = ()
    """Key spaces' histories replayed beside the random ones: stories the random ones reach
    too rarely."""

    @property
    def roles(self) -> tuple[str, ...]:
        return tuple(self.schemas)

    def history(self) -> st.SearchStrategy[tuple[Step, ...]]:
        """A key's records: one or two random ones, then a last one that matters."""
        step = st.builds(
            Step,
            role=st.sampled_from(self.roles),
            tick=st.integers(0, END_TICK - 1),
            delay=st.integers(0, self.max_delay),
            tombstone=st.booleans(),
        )
        final: st.SearchStrategy[Final] = st.sampled_from(["tie", "late", "tombstone"])
        at_end = st.sampled_from([True, False])
        return st.tuples(st.lists(step, min_size=1, max_size=2), final, at_end).map(
            lambda drawn: self.ending(*drawn)
        )

    def ending(self, steps: list[Step], final: Final, at_end: bool) -> tuple[Step, ...]:
        """``steps`` in arrival order, then a last record on the other input: a partner, an
        event too late (where there is event time) or a tombstone. It arrives with the step
        before it, or at the end of the whole input, where it ties with the end-of-input
        markers that replay sends with the newest timestamp."""
        steps = sorted(steps, key=lambda step: step.tick)
        last = steps[-1]
        other = next(role for role in self.roles if role != last.role)
        tick = END_TICK if at_end else last.tick
        if final == "tombstone":
            tail = Step(other, tick, tombstone=True)
        elif final == "late" and self.max_delay:
            tail = Step(other, tick, delay=3 * self.max_delay)
        else:
            tail = Step(other, tick)
        return (*steps, tail)

    def inputs(self, spaces: list[tuple[Step, ...]]) -> dict[str, list[dict[str, Any]]]:
        """Replay lines per role for every key space."""
        lines: dict[str, list[dict[str, Any]]] = {role: [] for role in self.roles}
        for space, history in enumerate(spaces):
            for n, step in enumerate(history):
                timestamp = T0 + step.tick
                value = (
                    None
                    if step.tombstone
                    else self.value(step.role, space, n, timestamp, timestamp - step.delay)
                )
                key = self.kafka_key(step.role, space, n)
                lines[step.role].append({"key": key, "value": value, "timestamp": timestamp})
        return lines

    def replay(
        self,
        inputs: dict[str, list[dict[str, Any]]],
        cap: int | None,
        broker: Any,
        state_cache: bool = True,
        state_deltas: bool = True,
        mode: Mode = "micro_batch",
    ) -> ReplayResult:
        return replay_joiner(
            self.joiner,
            inputs,
            schemas=self.schemas,
            output_schema=self.output,
            keys=self.keys,
            options=self.options,
            fields=self.fields,
            times=self.times,
            max_batch=cap,
            bootstrap_servers=broker.bootstrap_servers,
            state_cache=state_cache,
            state_deltas=state_deltas,
            mode=mode,
        )


def _pairs(role: str, space: int, n: int, timestamp: int, event_time: int) -> dict[str, Any]:
    return {"k": space, "v": f"{role}{space}-{n}", "at": event_time}


def _window(mode: str) -> Case:
    return Case(
        name=f"window-{mode}",
        joiner="window",
        schemas={"left": SCHEMAS / "left_event.avsc", "right": SCHEMAS / "right_event.avsc"},
        output=SCHEMAS / "joined_pair.avsc",
        keys={"left": "k", "right": "k"},
        times={"left": "at", "right": "at"},
        value=_pairs,
        kafka_key=lambda role, space, n: space,
        options={"window": "3ms", "grace": "1ms", "mode": mode, "idle_timeout": "1h"},
        max_delay=6,
    )


CASES = [
    Case(
        name="comap",
        joiner="comap",
        schemas={"one": SCHEMAS / "user.avsc", "many": SCHEMAS / "tweet.avsc"},
        output=SCHEMAS / "tweet_view.avsc",
        keys={"one": "id", "many": "author_id"},
        fields={"one": "author", "many": "tweet"},
        # Tweets of a user take three ids in turn, so later ones update earlier ones.
        value=lambda role, space, n, timestamp, _: (
            {"id": space, "name": f"u{space}-{n}", "avatar": None, "updated_at": timestamp}
            if role == "one"
            else {"id": 10 * space + n % 3, "author_id": space, "content": f"t{n}"}
        ),
        kafka_key=lambda role, space, n: space if role == "one" else 10 * space + n % 3,
        options={"many_id": "id", "max_many_per_key": 2},
    ),
    Case(
        name="asof",
        joiner="asof",
        schemas={"left": SCHEMAS / "recommendation.avsc", "right": SCHEMAS / "mood.avsc"},
        output=SCHEMAS / "recommendation_view.avsc",
        keys={"left": "consultant", "right": "name"},
        times={"left": "event_time", "right": "event_time"},
        fields={"left": "recommendation", "right": "mood"},
        value=lambda role, space, n, timestamp, event_time: (
            {
                "consultant": f"c{space}",
                "event_time": event_time,
                "ingestion_time": timestamp,
                "recommendation": f"r{space}-{n}",
            }
            if role == "left"
            else {
                "name": f"c{space}",
                "event_time": event_time,
                "ingestion_time": timestamp,
                "mood": f"m{space}-{n}",
            }
        ),
        kafka_key=lambda role, space, n: f"c{space}",
        options={"history_retention": "6ms", "rejoin_horizon": "4ms", "rejoin_interval": "2ms"},
        max_delay=6,
    ),
    Case(
        name="lookup",
        joiner="lookup",
        schemas={"stream": SCHEMAS / "click.avsc", "table": SCHEMAS / "user_region.avsc"},
        output=SCHEMAS / "enriched_click.avsc",
        keys={"stream": "user", "table": "user"},
        fields={"stream": "click", "table": "region"},
        value=lambda role, space, n, timestamp, _: (
            {"id": f"c{space}-{n}", "user": f"u{space}", "clicks": n}
            if role == "stream"
            else {"user": f"u{space}", "region": f"r{n}"}
        ),
        kafka_key=lambda role, space, n: f"c{space}-{n}" if role == "stream" else f"u{space}",
        options={"mode": "left", "default": {"user": "", "region": "none"}},
    ),
    Case(
        name="lookup-versioned",
        joiner="lookup",
        schemas={"stream": SCHEMAS / "timed_click.avsc", "table": SCHEMAS / "region_change.avsc"},
        output=SCHEMAS / "revised_click.avsc",
        keys={"stream": "user", "table": "user"},
        times={"stream": "at", "table": "since"},
        fields={"stream": "click", "table": "region"},
        value=lambda role, space, n, timestamp, event_time: (
            {"id": f"c{space}-{n}", "user": f"u{space}", "clicks": n, "at": event_time}
            if role == "stream"
            else {"user": f"u{space}", "region": f"r{n}", "since": event_time}
        ),
        kafka_key=lambda role, space, n: f"c{space}-{n}" if role == "stream" else f"u{space}",
        # Delays past the grace revise, past the retention are late; tombstones end versions.
        options={
            "mode": "left",
            "default": {"user": "", "region": "none", "since": 0},
            "versioned": True,
            "history_retention": "6ms",
            "grace": "1ms",
            "revisions": True,
            "idle_timeout": "1h",
        },
        max_delay=6,
        explicit=(
            (
                # A row valid from 1 arrives at 4, after the click at 1 went out: revised.
                (Step("table", 0), Step("stream", 1), Step("stream", 3), Step("table", 4, 3)),
                # A row valid from 1 arrives at 3, within the click at 2's grace: joined;
                # a tombstone at 5 ends the version before the click at 6.
                (
                    Step("stream", 2),
                    Step("table", 3, 2),
                    Step("stream", 4),
                    Step("table", 5, tombstone=True),
                    Step("stream", 6),
                ),
                # Past the retention (stream time 7 - 6 ms): a row and a click, both late.
                (Step("table", 0), Step("stream", 7), Step("table", 7, 7), Step("stream", 7, 7)),
            ),
        ),
    ),
    _window("inner"),
    _window("left"),
    _window("outer"),
    Case(
        name="table",
        joiner="table",
        schemas={"left": SCHEMAS / "left_event.avsc", "right": SCHEMAS / "right_event.avsc"},
        output=SCHEMAS / "joined_pair.avsc",
        keys={"left": "k", "right": "k"},
        value=_pairs,
        kafka_key=lambda role, space, n: space,
        options={"mode": "outer"},
    ),
]

_REPLAY_SUFFIX = re.compile(r"\.replay-[0-9a-f]{8}")


def written(result: ReplayResult) -> Counter[str]:
    """Outputs and dead letters as a multiset, without the replay's fresh topic names."""
    lines = [("out", record) for record in result.outputs]
    lines += [("dead", record) for record in result.dead_letters]
    return Counter(_REPLAY_SUFFIX.sub("", json.dumps(line, sort_keys=True)) for line in lines)


def drawn_inputs(case: Case) -> list[tuple[Step, ...]]:
    """The explicit key histories of ``case``, then :data:`EXAMPLES` inputs' worth drawn by
    hypothesis (:data:`SPACES` histories each), in one list: key space N is entry N."""
    drawn: list[tuple[Step, ...]] = [history for spaces in case.explicit for history in spaces]

    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        database=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(spaces=st.lists(case.history(), min_size=SPACES, max_size=SPACES, unique=True))
    def draw(spaces: list[tuple[Step, ...]]) -> None:
        drawn.extend(spaces)

    draw()
    return drawn


def differences(result: Counter[str], whole: Counter[str]) -> str:
    """What a capped replay wrote that the whole one did not, and the other way round."""
    extra = sorted((result - whole).elements())
    missing = sorted((whole - result).elements())
    return f"written only capped: {extra}; written only whole: {missing}"


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.name)
def test_outputs_and_dead_letters_do_not_depend_on_micro_batches(
    case: Case, broker: Any, spark: Any
) -> None:
    spaces = drawn_inputs(case)
    assert len(spaces) == len(case.explicit) * SPACES + EXAMPLES * SPACES
    inputs = case.inputs(spaces)
    # One after the other: four replays started at once in a fresh session failed their
    # first tasks inside Spark (java.io.OptionalDataException deserializing a task).
    # Every other joiner's capped replay runs with the workers' state cache and the state
    # deltas off, the rest with both on (the default): so the same outputs also mean neither
    # changes anything.
    kept = CASES.index(case) % 2 == 0
    whole = case.replay(inputs, None, broker, state_cache=True, state_deltas=True)
    capped = case.replay(inputs, CAP, broker, state_cache=kept, state_deltas=kept)
    assert whole.batches == 1
    histories = "\n".join(f"key space {n}: {history}" for n, history in enumerate(spaces))
    assert capped.batches > 1, f"max_batch {CAP} did not split the input"
    assert written(capped) == written(whole), (
        f"max_batch {CAP}: {differences(written(capped), written(whole))}\n{histories}"
    )
    # Continuous mode, its sub-batches capped alike: the same outputs as micro-batches.
    continuous = case.replay(inputs, CAP, broker, mode="continuous")
    assert continuous.batches > 1, f"sub-batches of {CAP} did not split the input"
    assert written(continuous) == written(whole), (
        f"continuous: {differences(written(continuous), written(whole))}\n{histories}"
    )


def pairs_of(result: ReplayResult) -> list[tuple[str | None, str | None]]:
    """The (left, right) names of a window join's outputs."""
    return [
        ((out["value"]["left"] or {}).get("v"), (out["value"]["right"] or {}).get("v"))
        for out in result.outputs
    ]


def test_the_last_record_of_a_replay_is_joined_with_every_cap(broker: Any, spark: Any) -> None:
    """Issue 38's replay: the key's end of input and its last right record share a timestamp.

    The marker travels on the left topic; before the fix it was admitted first with a cap
    of 1 or 2, flushed the key, and Z arrived after its end of input and was never written.
    """
    inputs = {
        "left": [
            {"key": 1, "value": {"k": 1, "v": "N", "at": 200_000}, "timestamp": 1000},
            {"key": 1, "value": {"k": 1, "v": "M", "at": 225_000}, "timestamp": 1001},
        ],
        "right": [
            {"key": 1, "value": {"k": 1, "v": "P", "at": 211_000}, "timestamp": 1002},
            {"key": 1, "value": {"k": 1, "v": "Z", "at": 226_000}, "timestamp": 1003},
        ],
    }
    for cap in (1, 2):  # the caps that lost Z (the whole input in one batch never did)
        result = replay_joiner(
            "window",
            inputs,
            schemas={"left": SCHEMAS / "left_event.avsc", "right": SCHEMAS / "right_event.avsc"},
            output_schema=SCHEMAS / "joined_pair.avsc",
            keys={"left": "k", "right": "k"},
            times={"left": "at", "right": "at"},
            options={"window": "10s", "grace": "5s", "mode": "outer", "idle_timeout": "1h"},
            max_batch=cap,
            bootstrap_servers=broker.bootstrap_servers,
        )
        assert sorted(pairs_of(result), key=str) == sorted(
            [("N", None), ("M", "Z"), (None, "P")], key=str
        ), f"max_batch {cap}"
        assert result.dead_letters == []


def test_a_record_after_its_keys_end_of_input_is_flushed_at_once(
    broker: Any, spark: Any, fresh_topic: Callable[[str], str], tmp_path: Path
) -> None:
    """End of input is final: a record that reaches its key in a later micro-batch than the
    key's end-of-input marker is applied and its window closed at once, not kept in state
    that nothing flushes again. One record a batch: N and the marker (which rides along),
    then Z."""
    from confluent_kafka import Producer

    from daemon.formats.avro.codec import AvroCodec, load_schema_file
    from daemon.model.wire import END_OF_INPUT_HEADERS
    from daemon.testing import pipeline_file
    from tests.kafka_helpers import (
        In,
        client_conf,
        create_topic,
        on_topics,
        produce,
        read_topic,
        run_pipeline,
    )

    conf = client_conf(broker.bootstrap_servers)
    topics = {"left": fresh_topic("left"), "right": fresh_topic("right")}
    for topic in topics.values():
        create_topic(conf, topic)
    schemas = {"left": SCHEMAS / "left_event.avsc", "right": SCHEMAS / "right_event.avsc"}
    file = pipeline_file(
        "window",
        schemas=schemas,
        output_schema=SCHEMAS / "joined_pair.avsc",
        keys={"left": "k", "right": "k"},
        times={"left": "at", "right": "at"},
        options={"window": "10s", "mode": "outer", "idle_timeout": "1h"},
        checkpoint=tmp_path / "checkpoint",
        bootstrap_servers=broker.bootstrap_servers,
    )
    pipe = on_topics(file.pipeline[0], topics, fresh_topic("pairs"), max_records_per_batch=1)
    left, right = (AvroCodec(load_schema_file(schemas[role])) for role in ("left", "right"))
    produce(conf, topics["left"], [In(left.encode({"k": 1, "v": "N", "at": 1000}), b"1", 1000)])
    marker = Producer(conf)
    marker.produce(topics["left"], key=b"1", timestamp=1001, headers=END_OF_INPUT_HEADERS)
    assert marker.flush(30) == 0
    produce(conf, topics["right"], [In(right.encode({"k": 1, "v": "Z", "at": 1500}), b"1", 1002)])

    batches = run_pipeline(spark, file.model_copy(update={"pipeline": [pipe]}))

    assert len(batches) >= 2  # and more: a window pipeline's clock makes batches of its own
    pairs = AvroCodec(load_schema_file(SCHEMAS / "joined_pair.avsc"))
    outputs = [pairs.decode(out.value) for out in read_topic(conf, pipe.output.topic)]
    pairs_written = {((o["left"] or {}).get("v"), (o["right"] or {}).get("v")) for o in outputs}
    # Z alone, flushed in its own micro-batch, since its key's input had ended.
    assert pairs_written == {("N", None), (None, "Z")}
    assert len(outputs) == 2

    # The test kit runs the engine's own loop: the same cut gives the same records.
    from daemon.joiners.window import Window
    from daemon.testing import JoinerHarness

    harness = JoinerHarness(
        Window,
        keys={"left": "k", "right": "k"},
        times={"left": "at", "right": "at"},
        options={"window": "10s", "mode": "outer", "idle_timeout": "1h"},
        schemas=schemas,
        output_schema=SCHEMAS / "joined_pair.avsc",
    )
    harness.feed({"left": [{"key": 1, "value": {"k": 1, "v": "N", "at": 1000}, "timestamp": 1000}]})
    harness.end()  # the marker rode with N
    late = {"key": 1, "value": {"k": 1, "v": "Z", "at": 1500}, "timestamp": 1002}
    harness.feed({"right": [late]})
    assert sorted(map(json.dumps, (out.value for out in harness.run.outputs))) == sorted(
        map(json.dumps, outputs)
    )
    assert harness.run.metrics["after_end_of_input"] == 1


def test_the_source_ranks_inputs_by_role_whatever_order_the_file_lists_them(
    broker: Any, fresh_topic: Callable[[str], str], tmp_path: Path
) -> None:
    """Records of equal timestamp are admitted in the order of the source's inputs and applied
    in the joiner's role order: the two must agree, or a cut between them changes results."""
    from daemon.model.config import parse_pipeline_file
    from daemon.pipeline.plan import client_conf, plan_pipeline
    from tests.kafka_helpers import create_topic

    output = str(SCHEMAS / "joined_pair.avsc")
    conf = {"bootstrap.servers": broker.bootstrap_servers}
    topics = {role: fresh_topic(role) for role in ("right", "left")}
    for topic in topics.values():
        create_topic(conf, topic)
    schema = {"left": "left_event.avsc", "right": "right_event.avsc"}
    data = {
        "kafka": {"bootstrap_servers": broker.bootstrap_servers},
        "pipeline": [
            {
                "name": "listed-right-first",
                "joiner": "window",
                "checkpoint": str(tmp_path / "checkpoint"),
                "inputs": {  # right before left
                    role: {"topic": topic, "schema": str(SCHEMAS / schema[role]), "key": "k"}
                    for role, topic in topics.items()
                },
                "output": {"topic": fresh_topic("out"), "schema": output},
                "options": {"window": "1s"},
            }
        ],
    }
    file = parse_pipeline_file(tmp_path / "pipeline.toml", data)
    assert list(file.pipeline[0].inputs) == ["right", "left"]

    plan = plan_pipeline(file, file.pipeline[0], client_conf(file))

    assert [spec.role for spec in plan.source.inputs] == ["left", "right"]
    assert [role for role, _ in plan.operator.inputs] == ["left", "right"]
