"""``lookup`` with a late table, through `daemon replay`, the real broker and the real Spark.

Each user is a scenario of its own, all in one replay, run whole and one record a micro-batch
(``--max-batch 1``), both stages: a region change late within the grace (joined), one after
the grace (a first answer and one revision, which moves the click's clicks between the
totals), one past the history retention (a dead letter), a tombstone ending a version. Clicks
are keyed by click id and joined by their ``user`` field (foreign-key mode). The engine must
write what the joiner's plain-Python run writes (tests/unit/joiners/test_lookup_versioned.py
pins that run rule by rule and against a batch as-of join).

Bootstrap: tables whose records all reached Kafka after the stream's, with and without
``versioned``, and a restart from the checkpoint that must not bootstrap again.

Headers (the default policy, trace context): a click's answer carries its ``traceparent``,
when it was held for the grace, in its revision and the revision's retraction too, not that of
the late row that revised it; a late record's dead letter keeps all its headers; and a click
held in state across a restart keeps its own.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from daemon.demos import latest_by_key
from daemon.formats.avro.codec import AvroCodec, load_schema_file
from daemon.joiners.lookup import Lookup
from daemon.model.config import Mode, StateConfig
from daemon.replay import ReplayResult
from daemon.testing import by_key, pipeline_file, replay_joiner, run_joiner
from tests.kafka_helpers import (
    In,
    client_conf,
    create_topic,
    on_topics,
    produce,
    read_topic,
    run_pipeline,
)

ROOT = Path(__file__).resolve().parents[2]
SCHEMAS = ROOT / "schemas"
T = 1_000_000
"""The scenarios' time zero, in epoch milliseconds."""
KEYS = {"stream": "user", "table": "user"}
TIMES = {"stream": "at", "table": "since"}
FIELDS = {"stream": "click", "table": "region"}
TIMED = {"stream": SCHEMAS / "timed_click.avsc", "table": SCHEMAS / "region_change.avsc"}
DEFAULT = {"user": "", "region": "UNKNOWN", "since": 0}
SUM_CLICKS = {"group_by": "region.region", "op": "sum", "field": "click.clicks"}
OPTIONS = {
    "mode": "left",
    "default": DEFAULT,
    "versioned": True,
    "history_retention": "1s",
    "grace": "100ms",
    "revisions": True,
    "idle_timeout": "1h",  # no wall-clock wake-ups within a replay
    "aggregate": SUM_CLICKS,
}


def click(cid: str, user: str, at: int, arrival: int, clicks: int) -> dict[str, Any]:
    value = {"id": cid, "user": user, "clicks": clicks, "at": T + at}
    return {"key": cid, "value": value, "timestamp": T + arrival}


def traced(line: dict[str, Any], **more: str) -> dict[str, Any]:
    """``line`` with a W3C traceparent header of its own (and ``more`` headers)."""
    trace = f"00-{str(line['key']).encode().hex():0>32}-00f067aa0ba902b7-01"
    return {**line, "headers": {"traceparent": trace, **more}}


def change(user: str, region: str | None, since: int, arrival: int) -> dict[str, Any]:
    value = None if region is None else {"user": user, "region": region, "since": T + since}
    return {"key": user, "value": value, "timestamp": T + arrival}


CLICKS = [
    # graced: the us row (valid from 450) arrives at 550, before g1 (500) leaves its grace.
    traced(click("g1", "graced", 500, 500, 1), tenant="acme"),
    click("g2", "graced", 700, 700, 2),
    # revised: r1 goes out with eu once r2 moves the stream time past its grace; the us row
    # (valid from 400) arrives at 900 and revises it.
    traced(click("r1", "revised", 500, 501, 4)),
    click("r2", "revised", 800, 801, 8),
    # retention: t2 moves the stream time to 2000, so the history before 1000 is gone; t0
    # (made at 500) comes too late to join.
    click("t1", "retention", 100, 102, 16),
    click("t2", "retention", 2000, 2002, 32),
    traced(click("t0", "retention", 500, 2200, 64), tenant="acme"),
    # tombstone: forgotten at 300, the moment its tombstone reached Kafka.
    click("x1", "tombstone", 200, 301, 128),
    click("x2", "tombstone", 400, 401, 256),
]
CHANGES = [
    change("graced", "eu", 0, 0),
    change("graced", "us", 450, 550),
    change("revised", "eu", 0, 1),
    traced(change("revised", "us", 400, 900)),
    change("retention", "eu", 0, 2),
    change("retention", "us", 50, 2100),  # older than the retention: a dead letter
    change("tombstone", "eu", 0, 3),
    change("tombstone", None, 300, 300),
]
EXPECTED = {
    "g1": [("us", 0)],
    "g2": [("us", 0)],
    "r1": [("eu", 0), ("us", 1)],
    "r2": [("us", 0)],
    "t1": [("eu", 0)],
    "t2": [("eu", 0)],
    "x1": [("eu", 0)],
    "x2": [("UNKNOWN", 0)],
}


def answers(outputs: list[Any]) -> dict[str, list[tuple[str, int]]]:
    return {
        key: [(v["region"]["region"], v["revision"]) for v in values]
        for key, values in by_key(outputs).items()
    }


RUNS: dict[str, tuple[int | None, Mode]] = {
    "whole": (None, "micro_batch"),
    "max-batch-1": (1, "micro_batch"),
    "continuous-1": (1, "continuous"),
}
"""The scenarios' runs: whole, one record a micro-batch, and one a continuous sub-batch (the
totals' second stage a continuous query of its own, as the first)."""


@pytest.fixture(scope="module")
def runs(broker: Any, spark: Any) -> dict[str, ReplayResult]:
    """The scenarios replayed as :data:`RUNS` says."""
    return {
        name: replay_joiner(
            "lookup",
            {"stream": CLICKS, "table": CHANGES},
            schemas=TIMED,
            output_schema=SCHEMAS / "revised_click.avsc",
            keys=KEYS,
            times=TIMES,
            fields=FIELDS,
            options=OPTIONS,
            max_batch=cap,
            bootstrap_servers=broker.bootstrap_servers,
            output_schemas={"totals": SCHEMAS / "region_clicks.avsc"},
            mode=mode,
        )
        for name, (cap, mode) in RUNS.items()
    }


@pytest.mark.parametrize("run", list(RUNS))
def test_late_rows_are_joined_revised_or_dead_lettered(
    runs: dict[str, ReplayResult], run: str
) -> None:
    result = runs[run]
    assert answers(result.outputs) == EXPECTED
    logic = run_joiner(
        Lookup,
        {"stream": CLICKS, "table": CHANGES},
        keys=KEYS,
        times=TIMES,
        fields=FIELDS,
        options=OPTIONS,
        schemas=TIMED,
        output_schema=SCHEMAS / "revised_click.avsc",
    )
    assert by_key(result.outputs) == by_key(o for o in logic.outputs if o.output is None)
    # The revision was written when its cause arrived, and names it.
    (revision,) = [r for r in result.outputs if r["key"] == "r1" and r["value"]["revision"]]
    assert revision["timestamp"] == T + 900
    assert revision["headers"]["enrichd.source.topic"].startswith("lookup.table")
    # Past the retention: the row and the click, with the reason.
    late = sorted((d["key"], d["headers"]["enrichd.error.class"]) for d in result.dead_letters)
    assert late == [("retention", "LateRecord"), ("t0", "LateRecord")]
    # The revision's retraction: r1's first answer, taken back from eu.
    assert answers(result.extra["retractions"]) == {"r1": [("eu", 0)]}
    # Trace context: each answer carries its click's (the revision and its retraction too,
    # not the late row's that made them); a click without one carries none.
    headers = {(r["key"], r["value"]["revision"]): r["headers"] for r in result.outputs}
    trace = {line["key"]: line.get("headers", {}).get("traceparent") for line in CLICKS}
    assert {key: found.get("traceparent") for key, found in headers.items()} == {
        (key, revision): trace[key] for key, history in EXPECTED.items() for _, revision in history
    }
    assert "tenant" not in headers[("g1", 0)]  # held for the grace; only trace context
    (retraction,) = result.extra["retractions"]
    assert retraction["headers"]["traceparent"] == trace["r1"]
    # A dead letter keeps all the headers of its record, and says why as Kafka Streams does.
    (t0,) = [d for d in result.dead_letters if d["key"] == "t0"]
    assert {n: t0["headers"][n] for n in ("traceparent", "tenant")} == CLICKS[6]["headers"]
    assert t0["headers"]["__streams.errors.exception"] == "LateRecord"
    if run != "whole":
        assert result.batches > len(CLICKS) + len(CHANGES)  # both stages, record by record


@pytest.mark.parametrize("run", list(RUNS))
def test_totals_count_a_revised_click_once_in_its_latest_region(
    runs: dict[str, ReplayResult], run: str
) -> None:
    totals = runs[run].extra["totals"]
    clicks = {line["key"]: line["value"]["clicks"] for line in CLICKS}
    expected: dict[str, int] = {}
    for cid, history in EXPECTED.items():
        region = history[-1][0]
        expected[region] = expected.get(region, 0) + clicks[cid]
    final = {region: value["clicks"] for region, value in latest_by_key(totals).items() if value}
    assert final == expected  # eu without r1's 4, us with them
    # One total per change: each answer with a region, and the retraction.
    assert len(totals) == len(EXPECTED) + 1 + 1
    if run == "whole":
        # One micro-batch a stage: each region's totals in timestamp order. eu: t1, x1,
        # r1, then r1's retraction when the us row arrived (900), then t2 (2002).
        assert [v["clicks"] for v in by_key(totals)["eu"]] == [16, 144, 148, 144, 176]
        assert [v["clicks"] for v in by_key(totals)["us"]] == [1, 3, 11, 15]


# -- inner mode, key form ----------------------------------------------------------------------

KEYED_CLICKS = [
    # Keyed in Kafka by their user, the join key: the clicks of a user share an output key.
    {**click("k1", "ada", 100, 100, 1), "key": "ada"},
    {**click("k2", "ada", 300, 300, 1), "key": "ada"},
    # b1 has no region when it arrives: inner mode writes nothing, until the late row does.
    {**click("b1", "bob", 100, 100, 1), "key": "bob"},
    # b2 was made at 600 but reached Kafka at 250; the tombstone (300) withdraws its answer.
    {**click("b2", "bob", 600, 250, 1), "key": "bob"},
]
KEYED_CHANGES = [
    change("ada", "eu", 0, 0),
    change("ada", "us", 50, 400),  # late: k1 and k2 are revised
    change("bob", "apac", 50, 200),  # late: b1's first answer
    change("bob", None, 300, 300),
]
INNER = {"mode": "inner", "versioned": True, "revisions": True, "history_retention": "1s"}


@pytest.mark.parametrize("cap", [None, 1], ids=["whole", "max-batch-1"])
def test_inner_mode_in_key_form_answers_late_and_withdraws(
    broker: Any, spark: Any, cap: int | None
) -> None:
    def run(engine: Callable[..., Any], **batching: Any) -> dict[str, list[Any]]:
        result = engine(
            "lookup" if engine is replay_joiner else Lookup,
            {"stream": KEYED_CLICKS, "table": KEYED_CHANGES},
            schemas=TIMED,
            output_schema=SCHEMAS / "revised_click.avsc",
            keys=KEYS,
            times=TIMES,
            fields=FIELDS,
            options=INNER,
            **batching,
        )
        return by_key(result.outputs)

    engine = run(replay_joiner, max_batch=cap, bootstrap_servers=broker.bootstrap_servers)
    assert engine == run(run_joiner)

    def said(value: dict[str, Any] | None) -> tuple[str, str, int] | None:
        if value is None:
            return None
        return value["click"]["id"], value["region"]["region"], value["revision"]

    assert {key: [said(v) for v in values] for key, values in engine.items()} == {
        "ada": [("k1", "eu", 0), ("k2", "eu", 0), ("k1", "us", 1), ("k2", "us", 1)],
        "bob": [("b1", "apac", 0), ("b2", "apac", 0), None],
    }


# -- bootstrap --------------------------------------------------------------------------------


def untimed(cid: str, user: str, arrival: int) -> dict[str, Any]:
    return {"key": cid, "value": {"id": cid, "user": user, "clicks": 1}, "timestamp": arrival}


def region_of(user: str, name: str, arrival: int) -> dict[str, Any]:
    return {"key": user, "value": {"user": user, "region": name}, "timestamp": arrival}


NEWER_TABLE = {
    # Every click reached Kafka before every region row.
    "stream": [untimed(f"c{n}", f"u{n % 3}", 10 + n) for n in range(6)],
    "table": [region_of(f"u{n}", f"r{n}", 100 + n) for n in range(3)],
}


def regions_joined(result: ReplayResult) -> dict[str, str | None]:
    return {r["key"]: (r["value"]["region"] or {}).get("region") for r in result.outputs}


BOOTSTRAP_RUNS = pytest.mark.parametrize(("cap", "mode"), list(RUNS.values()), ids=list(RUNS))
"""Bootstraps run as :data:`RUNS`: whole, a record a micro-batch, a record a sub-batch."""


@BOOTSTRAP_RUNS
def test_bootstrap_joins_a_stream_older_than_its_whole_table(
    broker: Any, spark: Any, cap: int | None, mode: Mode
) -> None:
    def run(options: dict[str, Any]) -> ReplayResult:
        return replay_joiner(
            "lookup",
            NEWER_TABLE,
            schemas={"stream": SCHEMAS / "click.avsc", "table": SCHEMAS / "user_region.avsc"},
            output_schema=SCHEMAS / "enriched_click.avsc",
            keys=KEYS,
            fields={"stream": "click", "table": "region"},
            options={"mode": "left", **options},
            max_batch=cap,
            bootstrap_servers=broker.bootstrap_servers,
            mode=mode,
        )

    expected = {f"c{n}": f"r{n % 3}" for n in range(6)}
    assert regions_joined(run({"bootstrap": True})) == expected
    if cap is None:  # without it, each click met an empty table (checked once)
        assert regions_joined(run({})) == dict.fromkeys(expected)


@BOOTSTRAP_RUNS
def test_bootstrap_loads_a_versioned_tables_history_first(
    broker: Any, spark: Any, cap: int | None, mode: Mode
) -> None:
    """A table re-snapshotted after the clicks: its rows say since when (long before the
    clicks), but reached Kafka after them. Bootstrap reads the history first; each click
    then joins the version valid when it happened."""
    inputs = {
        "stream": [click(f"c{n}", f"u{n % 2}", 500 + n, 500 + n, 1) for n in range(4)],
        "table": [
            change("u0", "eu", 100, 900),
            change("u0", "us", 502, 901),  # c2 (502) joins us, c0 (500) still eu
            change("u1", "apac", 0, 902),
        ],
    }

    def run(options: dict[str, Any]) -> ReplayResult:
        return replay_joiner(
            "lookup",
            inputs,
            schemas=TIMED,
            output_schema=SCHEMAS / "revised_click.avsc",
            keys=KEYS,
            times=TIMES,
            fields=FIELDS,
            options={"mode": "left", "versioned": True, "revisions": True, **options},
            max_batch=cap,
            bootstrap_servers=broker.bootstrap_servers,
            mode=mode,
        )

    booted = run({"bootstrap": True})
    assert answers(booted.outputs) == {
        "c0": [("eu", 0)],
        "c1": [("apac", 0)],
        "c2": [("us", 0)],
        "c3": [("apac", 0)],
    }
    if cap is None:  # without bootstrap: first answers without a region, then revisions
        plain = run({})
        # c2 (502) is revised twice: to eu (from 100), then to us (from 502).
        assert {k: len(v) for k, v in by_key(plain.outputs).items()} == {
            "c0": 2,
            "c1": 2,
            "c2": 3,
            "c3": 2,
        }


def test_a_restart_from_the_checkpoint_does_not_bootstrap_again(
    broker: Any, spark: Any, fresh_topic: Callable[[str], str], tmp_path: Path
) -> None:
    conf = client_conf(broker.bootstrap_servers)
    topics = {"stream": fresh_topic("clicks"), "table": fresh_topic("regions")}
    for topic in topics.values():
        create_topic(conf, topic, 2)
    schemas = {"stream": SCHEMAS / "click.avsc", "table": SCHEMAS / "user_region.avsc"}
    file = pipeline_file(
        "lookup",
        schemas=schemas,
        output_schema=SCHEMAS / "enriched_click.avsc",
        keys=KEYS,
        fields={"stream": "click", "table": "region"},
        options={"bootstrap": True},
        checkpoint=tmp_path / "checkpoint",
        bootstrap_servers=broker.bootstrap_servers,
    )
    pipe = on_topics(file.pipeline[0], topics, fresh_topic("enriched"))
    file = file.model_copy(update={"pipeline": [pipe]})
    click_codec, region_codec = (
        AvroCodec(load_schema_file(schemas[r])) for r in ("stream", "table")
    )

    def clicked(cid: str, at: int) -> In:
        return In(click_codec.encode({"id": cid, "user": "ada", "clicks": 1}), cid.encode(), at)

    def moved(region: str, at: int) -> In:
        return In(region_codec.encode({"user": "ada", "region": region}), b"ada", at)

    # First start, no checkpoint: the table (eu, newer than c1) is read first.
    produce(conf, topics["stream"], [clicked("c1", 100)])
    produce(conf, topics["table"], [moved("eu", 200)])
    run_pipeline(spark, file)
    # Restart: c2 came before the move to us; read in the usual order, c2 joins eu. Had the
    # restart bootstrapped again, the us row would have been read first.
    produce(conf, topics["stream"], [clicked("c2", 300)])
    produce(conf, topics["table"], [moved("us", 400)])
    run_pipeline(spark, file)

    enriched = AvroCodec(load_schema_file(SCHEMAS / "enriched_click.avsc"))
    joined = {
        (out.key or b"").decode(): enriched.decode(out.value)["region"]["region"]
        for out in read_topic(conf, pipe.output.topic)
        if out.value is not None
    }
    assert joined == {"c1": "eu", "c2": "eu"}


def test_a_click_held_for_its_grace_keeps_its_headers_across_a_restart(
    broker: Any, spark: Any, fresh_topic: Callable[[str], str], tmp_path: Path
) -> None:
    """The first run holds c1 for its grace; the second, from the checkpoint (no worker
    cache: the state store's copy), answers it once c2 moves stream time on: with c1's
    trace context, which the held record kept in state."""
    conf = client_conf(broker.bootstrap_servers)
    topics = {"stream": fresh_topic("held-clicks"), "table": fresh_topic("held-regions")}
    for topic in topics.values():
        create_topic(conf, topic, 2)
    file = pipeline_file(
        "lookup",
        schemas=TIMED,
        output_schema=SCHEMAS / "revised_click.avsc",
        keys=KEYS,
        times=TIMES,
        fields=FIELDS,
        options={
            "mode": "left",
            "versioned": True,
            "revisions": True,
            "grace": "1s",
            "idle_timeout": "1h",  # no wall-clock wake-up releases it in between
        },
        checkpoint=tmp_path / "checkpoint",
        bootstrap_servers=broker.bootstrap_servers,
    )
    pipe = on_topics(file.pipeline[0], topics, fresh_topic("held-out"))
    file = file.model_copy(update={"pipeline": [pipe], "state": StateConfig(cache=False)})
    clicks, regions = (AvroCodec(load_schema_file(TIMED[role])) for role in ("stream", "table"))
    trace = [("traceparent", b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")]

    def clicked(cid: str, at: int, headers: Any = None) -> In:
        value = {"id": cid, "user": "ada", "clicks": 1, "at": T + at}
        return In(clicks.encode(value), cid.encode(), T + at, headers=headers)

    produce(conf, topics["table"], [In(regions.encode({"user": "ada", "region": "eu", "since": T}),
                                       b"ada", T)])  # fmt: skip
    produce(conf, topics["stream"], [clicked("c1", 1_000, trace + [("tenant", b"acme")])])
    run_pipeline(spark, file)
    assert read_topic(conf, pipe.output.topic) == []  # c1 waits for its grace

    produce(conf, topics["stream"], [clicked("c2", 5_000)])
    run_pipeline(spark, file)
    (answer,) = read_topic(conf, pipe.output.topic)
    assert answer.key == b"c1"
    assert answer.headers["traceparent"] == trace[0][1]
    assert "tenant" not in answer.headers  # kept in state: only what its outputs carry


def test_replay_prints_the_totals_and_retractions_it_reads_back(
    runs: dict[str, ReplayResult], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """What `daemon replay` prints and writes of this real run: every output, by name."""
    import json

    from daemon.cli.replay import summary, write_outputs

    result = runs["whole"]
    write_outputs(result, None, tmp_path / "each")
    printed = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert printed == []  # --output-dir alone: the files, not stdout
    write_outputs(result, None, None)
    printed = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    counts = {name: len(records) for name, records in result.by_output().items()}
    assert counts == {"output": len(result.outputs), "totals": 10, "retractions": 1}
    assert [line["output"] for line in printed] == [
        name for name, n in counts.items() for _ in range(n)
    ]
    for name, records in result.by_output().items():
        written = (tmp_path / "each" / f"{name}.jsonl").read_text(encoding="utf-8").splitlines()
        assert [json.loads(line) for line in written] == [
            {"output": name, **record} for record in records
        ]
    assert summary(result) == (
        f"replayed {result.input_records} records in {result.batches} micro-batches: "
        f"output {len(result.outputs)}, totals 10, retractions 1; "
        f"{len(result.dead_letters)} dead letters"
    )
