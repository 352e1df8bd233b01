"""Time in the real engine without records: quiet keys woken by processing-time timers.

``daemon replay`` ends its input with end-of-input markers (checked by every joiner's replay
tests); this checks the other way event time moves: a key that has gone quiet is woken after
the joiner's wake-up time, with no marker and no other record, by the timer the processor
registers in Spark's state store: a window that closes, and a versioned ``lookup``'s stream
record held in its grace that goes out. The window's run also checks that the source's clock
moves only when a key is due: an idle query with no key due plans no micro-batch, and a key
that comes after the quiet spell is woken all the same.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from daemon.broker import EmbeddedBroker
from daemon.formats.avro.codec import AvroCodec, load_schema_file
from daemon.testing import pipeline_file
from tests.kafka_helpers import In, client_conf, create_topic, on_topics, produce, read_topic

ROOT = Path(__file__).resolve().parents[2]
SCHEMAS = {"left": ROOT / "schemas/left_event.avsc", "right": ROOT / "schemas/right_event.avsc"}
OUTPUT = ROOT / "schemas/joined_pair.avsc"


IDLE_S = 3.0
"""How long an idle query is watched for micro-batches: three periods of its 1 s clock."""


def first_outputs(
    spark: Any,
    file: Any,
    pipe: Any,
    conf: dict[str, str],
    then: Callable[[Any], None] | None = None,
) -> list[Any]:
    """Run ``pipe`` of ``file`` until its output topic has records; return them.

    Nothing but the idle timeout can make the output here, so the loop waits for it (at most
    two minutes, for a loaded machine) rather than for a record count. ``then`` is called with
    the running query after that, before it stops.
    """
    from daemon.pipeline.plan import plan_pipeline, start_query

    query = start_query(spark, plan_pipeline(file, pipe, conf))
    try:
        outputs = await_outputs(query, conf, pipe.output.topic, 1)
        if then is not None:
            then(query)
    finally:
        query.stop()
    return outputs


def await_outputs(query: Any, conf: dict[str, str], topic: str, count: int) -> list[Any]:
    """The output topic's records once it has ``count`` (at most two minutes)."""
    deadline = time.monotonic() + 120
    outputs: list[Any] = []
    while len(outputs) < count and time.monotonic() < deadline:
        assert query.exception() is None, query.exception()
        outputs = read_topic(conf, topic, timeout_s=5)
        time.sleep(0.5)
    return outputs


def planned_batches(checkpoint: Path) -> int:
    """How many micro-batches Spark has planned in the checkpoint (its ``offsets/`` log)."""
    from daemon.checkpoint.batch_logs import batches
    from daemon.checkpoint.layout import OFFSET_LOG

    return len(batches(checkpoint, OFFSET_LOG))


def await_nothing_due(checkpoint: Path, for_s: float) -> None:
    """Wait until no bucket's timer is due within ``for_s`` (the woken key is forgotten)."""
    from daemon.checkpoint import due_times

    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        due = due_times.read(checkpoint)
        assert due is not None, "a new checkpoint's due-time map is known"
        earliest = due.earliest
        if earliest is None or earliest > time.time_ns() // 1_000_000 + for_s * 1000:
            return
        time.sleep(0.2)
    raise AssertionError(f"a bucket stayed due: {due_times.read(checkpoint)}")


@pytest.mark.parametrize("trigger", [0, 500], ids=["default-trigger", "500ms-trigger"])
def test_a_quiet_keys_window_closes_after_the_idle_timeout(
    broker: EmbeddedBroker,
    spark: Any,
    fresh_topic: Callable[[str], str],
    tmp_path: Path,
    trigger: int,
) -> None:
    """With the default trigger the source's clock makes the batches that fire the timer; with
    a processing-time trigger, the trigger's interval does. Either way the clock moves only
    when a bucket's timer is due, so an idle query runs no batch in between."""
    conf = client_conf(broker.bootstrap_servers)
    file = pipeline_file(
        "window",
        schemas=SCHEMAS,
        output_schema=OUTPUT,
        keys={"left": "k", "right": "k"},
        times={"left": "at", "right": "at"},
        options={"window": "1s", "mode": "left", "idle_timeout": "2s"},
        checkpoint=tmp_path / "checkpoint",
        bootstrap_servers=broker.bootstrap_servers,
    )
    names = {"left": fresh_topic("left"), "right": fresh_topic("right")}
    pipe = on_topics(file.pipeline[0], names, fresh_topic("pairs"), trigger=trigger)
    for topic in names.values():
        create_topic(conf, topic)
    left = AvroCodec(load_schema_file(SCHEMAS["left"]))
    produce(conf, names["left"], [In(left.encode({"k": 1, "v": "alone", "at": 1000}), b"1")])

    pairs = AvroCodec(load_schema_file(OUTPUT))
    later: list[Any] = []
    idle: list[int] = []

    def idle_then_a_later_key(query: Any) -> None:
        """Once no key is due, an idle query runs no micro-batch; a key that comes after the
        quiet spell is still woken when it is due."""
        await_nothing_due(pipe.checkpoint, IDLE_S + 1)
        before = planned_batches(pipe.checkpoint)
        time.sleep(IDLE_S)
        idle.append(planned_batches(pipe.checkpoint) - before)
        produce(conf, names["left"], [In(left.encode({"k": 2, "v": "later", "at": 9000}), b"2")])
        later.extend(await_outputs(query, conf, pipe.output.topic, 2))

    # The left record's window (event time 1000 + 1 s) can only close by the idle timeout:
    # no right record, no marker, and nothing else arrives. After 2 s of quiet the key's
    # event time has moved on by those 2 s, past the window's end.
    then = idle_then_a_later_key if not trigger else None  # the clock's path is the same
    outputs = first_outputs(spark, file, pipe, conf, then)
    assert [pairs.decode(out.value) for out in outputs if out.value] == [
        {"left": {"k": 1, "v": "alone", "at": 1000}, "right": None}
    ]
    if then is not None:
        assert idle == [0], "micro-batches ran while no record came and no key was due"
        assert [pairs.decode(out.value) for out in later if out.value][1:] == [
            {"left": {"k": 2, "v": "later", "at": 9000}, "right": None}
        ]


def test_a_quiet_keys_held_stream_record_goes_out_after_the_idle_timeout(
    broker: EmbeddedBroker, spark: Any, fresh_topic: Callable[[str], str], tmp_path: Path
) -> None:
    """A versioned lookup holds a click for its grace; the user's only other record is older,
    so only the idle timeout moves her stream time past the click's time plus the grace."""
    schemas = {
        "stream": ROOT / "schemas/timed_click.avsc",
        "table": ROOT / "schemas/region_change.avsc",
    }
    revised = ROOT / "schemas/revised_click.avsc"
    conf = client_conf(broker.bootstrap_servers)
    file = pipeline_file(
        "lookup",
        schemas=schemas,
        output_schema=revised,
        keys={"stream": "user", "table": "user"},
        times={"stream": "at", "table": "since"},
        fields={"stream": "click", "table": "region"},
        options={"versioned": True, "revisions": True, "grace": "1s", "idle_timeout": "2s"},
        checkpoint=tmp_path / "checkpoint",
        bootstrap_servers=broker.bootstrap_servers,
    )
    names = {"stream": fresh_topic("clicks"), "table": fresh_topic("regions")}
    pipe = on_topics(file.pipeline[0], names, fresh_topic("revised"))
    for topic in names.values():
        create_topic(conf, topic)
    click, region = (AvroCodec(load_schema_file(schemas[role])) for role in ("stream", "table"))
    moved = {"user": "ada", "region": "eu", "since": 0}
    produce(conf, names["table"], [In(region.encode(moved), b"ada", 0)])
    clicked = {"id": "c1", "user": "ada", "clicks": 1, "at": 1000}
    produce(conf, names["stream"], [In(click.encode(clicked), b"c1", 1000)])

    outputs = first_outputs(spark, file, pipe, conf)
    answers = AvroCodec(load_schema_file(revised))
    assert [(out.key, answers.decode(out.value)) for out in outputs] == [
        (b"c1", {"click": clicked, "region": moved, "revision": 0})
    ]
