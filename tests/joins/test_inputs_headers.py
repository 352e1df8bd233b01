"""``headers_from = "inputs"`` through the real broker and Spark: every input's headers.

Each input record has a header named after itself (``src.NAME``) and a ``tenant`` header of
its own value; the pipelines carry ``headers = "all"`` from every input. An output must
carry the ``src.*`` headers of exactly the records that made it, the other inputs' first
and the record it is about last, so that the last ``tenant`` (the one a consumer reading
the last header of a name gets) is that record's, as under ``headers_from = "record"``. One
pipeline run per joiner, its cases in key spaces of their own; the restart keeps a table row
in the state store (no worker cache) and answers from it in the second run.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from daemon.formats.avro.codec import AvroCodec, load_schema_file
from daemon.model.config import StateConfig
from daemon.testing import pipeline_file, replay_joiner
from tests.joins.shop_chain import shop_inputs
from tests.joins.shop_pipeline import ShopPipeline
from tests.kafka_helpers import (
    In,
    client_conf,
    create_topic,
    on_topics,
    produce,
    read_topic,
    run_pipeline,
)

SCHEMAS = Path(__file__).resolve().parents[2] / "schemas"
T = 1_000_000
"""The scenarios' time zero, in epoch milliseconds."""
INPUTS = {"headers": "all", "headers_from": "inputs"}
TABLES_LAST_FIRST = (("products", "product"), ("regions", "region"), ("customers", "customer"))
"""The shop's tables, the last stage first: the order in which an answer carries their rows."""


def named(name: str, line: dict[str, Any]) -> dict[str, Any]:
    """``line`` with the headers that name its record: ``src.NAME`` and its ``tenant``."""
    return {**line, "headers": {f"src.{name}": name, "tenant": name}}


def sources(output: dict[str, Any]) -> list[str]:
    """The records whose headers an output carries, in their order."""
    return [name[4:] for name in output["headers"] if name.startswith("src.")]


def carried(result: Any) -> dict[tuple[str, int], tuple[list[str], str]]:
    """Per output (key, revision): its records' names in order, and its last ``tenant``."""
    return {
        (out["key"], (out["value"] or {}).get("revision", 0)): (
            sources(out),
            out["headers"]["tenant"],
        )
        for out in result.outputs
    }


def test_a_versioned_lookup_answer_and_its_revision_carry_row_then_click(
    broker: Any, spark: Any
) -> None:
    def click(cid: str, at: int) -> dict[str, Any]:
        value = {"id": cid, "user": cid, "clicks": 1, "at": T + at}
        return named(cid, {"key": cid, "value": value, "timestamp": T + at})

    def row(name: str, user: str, since: int, arrival: int) -> dict[str, Any]:
        value = {"user": user, "region": name, "since": T + since}
        return named(name, {"key": user, "value": value, "timestamp": T + arrival})

    result = replay_joiner(
        "lookup",
        {
            "stream": [click("c1", 20), click("c2", 20)],
            # c1: answered from eu, then revised by the late us; c2: no row, left mode.
            "table": [row("eu", "c1", 10, 10), row("us", "c1", 15, 30)],
        },
        schemas={"stream": SCHEMAS / "timed_click.avsc", "table": SCHEMAS / "region_change.avsc"},
        output_schema=SCHEMAS / "revised_click.avsc",
        keys={"stream": "user", "table": "user"},
        times={"stream": "at", "table": "since"},
        fields={"stream": "click", "table": "region"},
        options={"mode": "left", "versioned": True, "revisions": True, "idle_timeout": "1h"},
        bootstrap_servers=broker.bootstrap_servers,
        settings=INPUTS,
    )
    assert carried(result) == {
        ("c1", 0): (["eu", "c1"], "c1"),
        ("c1", 1): (["us", "c1"], "c1"),  # the revision: the row it now matches
        ("c2", 0): (["c2"], "c2"),
    }


def test_a_comap_view_carries_both_sides_its_cause_last(broker: Any, spark: Any) -> None:
    def user(uid: int, name: str, at: int) -> dict[str, Any]:
        value = {"id": uid, "name": name, "avatar": None, "updated_at": at}
        return named(name, {"key": uid, "value": value, "timestamp": T + at})

    def tweet(tid: int, author: int, at: int) -> dict[str, Any]:
        value = {"id": tid, "author_id": author, "content": "hi"}
        return named(f"t{tid}", {"key": tid, "value": value, "timestamp": T + at})

    result = replay_joiner(
        "comap",
        # t10 waits for ada, who then renames: her update fans out with t10's headers first.
        {
            "one": [user(1, "ada", 2), user(1, "ada2", 3)],
            "many": [tweet(10, 1, 1), tweet(11, 1, 4)],
        },
        schemas={"one": SCHEMAS / "user.avsc", "many": SCHEMAS / "tweet.avsc"},
        output_schema=SCHEMAS / "tweet_view.avsc",
        keys={"one": "id", "many": "author_id"},
        fields={"one": "author", "many": "tweet"},
        options={"many_id": "id"},
        bootstrap_servers=broker.bootstrap_servers,
        settings=INPUTS,
    )
    views = [(out["key"], sources(out), out["headers"]["tenant"]) for out in result.outputs]
    assert views == [
        ("10", ["t10", "ada"], "ada"),
        ("10", ["t10", "ada2"], "ada2"),
        ("11", ["ada2", "t11"], "t11"),
    ]


def test_an_asof_answer_and_its_correction_carry_the_mood_they_matched(
    broker: Any, spark: Any
) -> None:
    def pick(name: str, at: int) -> dict[str, Any]:
        value = {"consultant": "ann", "event_time": T + at, "ingestion_time": 0,
                 "recommendation": name}  # fmt: skip
        return named(name, {"key": "ann", "value": value, "timestamp": T + at})

    def mood(name: str, at: int, arrival: int) -> dict[str, Any]:
        value = {"name": "ann", "event_time": T + at, "ingestion_time": 0, "mood": name}
        return named(name, {"key": "ann", "value": value, "timestamp": T + arrival})

    result = replay_joiner(
        "asof",
        {"left": [pick("tea", 20)], "right": [mood("calm", 10, 10), mood("grumpy", 15, 30)]},
        schemas={"left": SCHEMAS / "recommendation.avsc", "right": SCHEMAS / "mood.avsc"},
        output_schema=SCHEMAS / "recommendation_view.avsc",
        keys={"left": "consultant", "right": "name"},
        times={"left": "event_time", "right": "event_time"},
        fields={"left": "recommendation", "right": "mood"},
        bootstrap_servers=broker.bootstrap_servers,
        settings=INPUTS,
    )
    assert [(sources(out), out["headers"]["tenant"]) for out in result.outputs] == [
        (["calm", "tea"], "tea"),
        (["grumpy", "tea"], "tea"),
    ]


def test_a_window_pair_carries_its_held_partner_then_its_later_record(
    broker: Any, spark: Any
) -> None:
    def event(k: int, name: str, at: int) -> dict[str, Any]:
        return named(name, {"key": k, "value": {"k": k, "v": name, "at": at}, "timestamp": at})

    result = replay_joiner(
        "window",
        {
            "left": [event(1, "A", 1), event(2, "C", 5)],
            "right": [event(1, "a", 3), event(2, "c", 2)],
        },
        schemas={"left": SCHEMAS / "left_event.avsc", "right": SCHEMAS / "right_event.avsc"},
        output_schema=SCHEMAS / "joined_pair.avsc",
        keys={"left": "k", "right": "k"},
        times={"left": "at", "right": "at"},
        options={"window": "10ms", "idle_timeout": "1h"},
        bootstrap_servers=broker.bootstrap_servers,
        settings=INPUTS,
    )
    pairs = sorted((out["key"], sources(out), out["headers"]["tenant"]) for out in result.outputs)
    assert pairs == [("1", ["A", "a"], "a"), ("2", ["c", "C"], "C")]


def test_a_table_row_keeps_its_headers_in_state_across_a_restart(
    broker: Any, spark: Any, fresh_topic: Callable[[str], str], tmp_path: Path
) -> None:
    """The first run keeps ada's row; the second, from the checkpoint (no worker cache: the
    state store's copy), answers a click with it: the row's headers, then the click's."""
    conf = client_conf(broker.bootstrap_servers)
    topics = {"stream": fresh_topic("inputs-clicks"), "table": fresh_topic("inputs-regions")}
    for topic in topics.values():
        create_topic(conf, topic, 1)
    schemas = {"stream": SCHEMAS / "click.avsc", "table": SCHEMAS / "user_region.avsc"}
    file = pipeline_file(
        "lookup",
        schemas=schemas,
        output_schema=SCHEMAS / "enriched_click.avsc",
        keys={"stream": "user", "table": "user"},
        fields={"stream": "click", "table": "region"},
        checkpoint=tmp_path / "checkpoint",
        bootstrap_servers=broker.bootstrap_servers,
        settings=INPUTS,
    )
    pipe = on_topics(file.pipeline[0], topics, fresh_topic("inputs-out"))
    file = file.model_copy(update={"pipeline": [pipe], "state": StateConfig(cache=False)})
    clicks, regions = (AvroCodec(load_schema_file(schemas[role])) for role in schemas)
    row = regions.encode({"user": "ada", "region": "eu"})
    produce(conf, topics["table"], [In(row, b"ada", T, headers=[("src.eu", b"eu")])])
    run_pipeline(spark, file)

    click = clicks.encode({"id": "c1", "user": "ada", "clicks": 1})
    produce(conf, topics["stream"], [In(click, b"c1", T + 1, headers=[("src.c1", b"c1")])])
    run_pipeline(spark, file)
    (answer,) = read_topic(conf, pipe.output.topic)
    assert [name for name in answer.headers if name.startswith("src.")] == ["src.eu", "src.c1"]


def _row_name(role: str, value: dict[str, Any]) -> str:
    """A shop record's name: an order's id, a table row's input, id and validity."""
    if role == "stream":
        return f"order-{value['id']}"
    return f"{role}-{value['id']}@{value['since']}"


def test_a_lookup_of_three_tables_carries_each_row_then_the_order(
    broker: Any, spark: Any, tmp_path: Path
) -> None:
    """Orders enriched from customers, then regions, then products, late rows revising them:
    every answer, revisions too, carries the rows it holds (the last stage's first) and then
    its order's headers, whose tenant is the last one."""
    lines = shop_inputs(66)
    shop = ShopPipeline.on(broker, tmp_path, settings='headers = "all"\nheaders_from = "inputs"')
    shop.produce(
        lines,
        headers=lambda role, value: [
            (f"src.{_row_name(role, value)}", b"1"),
            ("tenant", _row_name(role, value).encode()),
        ],
    )
    assert run_pipeline(spark, shop.file())

    answers = [out for out in shop.written() if out["value"] is not None]
    assert any(out["value"]["revision"] for out in answers)  # revisions are among them
    for out in answers:
        value = out["value"]
        expected = [
            *(_row_name(role, value[field]) for role, field in TABLES_LAST_FIRST),
            _row_name("stream", value["order"]),
        ]
        assert [n[4:] for n in out["headers"] if n.startswith("src.")] == expected, out
        assert out["headers"]["tenant"] == expected[-1].encode()
