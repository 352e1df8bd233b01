"""Confluent Schema Registry framing through the real engine, against a stand-in registry
(tests/registry.py) served over HTTP to the real confluent-kafka client. The registry takes
basic auth only, so every test here also shows the credentials reach whoever asks it."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from daemon.broker import EmbeddedBroker
from daemon.demos import latest_by_key
from daemon.errors import ConfigError, SchemaRegistryUnavailableError, failure_reason
from daemon.formats.avro.codec import AvroCodec, parse_schema_text
from daemon.model.config import parse_pipeline_file
from daemon.pipeline.plan import plan_pipeline, start_query
from daemon.replay import replay
from tests.kafka_helpers import In, client_conf, create_topic, process_all, produce, read_topic
from tests.registry import RegistryServer

SCHEMAS = Path(__file__).resolve().parents[2] / "schemas"


@pytest.fixture
def registry() -> Iterator[RegistryServer]:
    with RegistryServer() as server:
        yield server


def register(server: RegistryServer, subject: str, schema: str) -> int:
    return server.add(subject, schema)


def text(name: str) -> str:
    return (SCHEMAS / name).read_text()


def pipeline_data(
    folder: Path,
    server: RegistryServer,
    topics: dict[str, str],
    registry: dict[str, Any] | None = None,
    **kafka: Any,
) -> dict:
    return {
        "kafka": kafka,
        "schema_registry": {
            "url": server.url,
            "basic.auth.user.info": server.user_info,
            **(registry or {}),
        },
        "pipeline": [
            {
                "name": topics["output"].replace("/", "-"),
                "joiner": "comap",
                "checkpoint": str(folder / "checkpoint"),
                "inputs": {
                    "one": {
                        "topic": topics["users"],
                        "subject": "users-value",
                        "key": "id",
                        "field": "author",
                    },
                    "many": {
                        "topic": topics["tweets"],
                        "subject": "tweets-value",
                        "key": "author_id",
                        "field": "tweet",
                    },
                },
                "output": {"topic": topics["output"], "subject": "views-value"},
                "options": {"many_id": "id"},
            }
        ],
    }


def test_replay_reads_and_writes_confluent_framing(
    registry: RegistryServer, broker: EmbeddedBroker, spark: Any, tmp_path: Path
) -> None:
    ids = {
        subject: register(registry, subject, text(name))
        for subject, name in (
            ("users-value", "user.avsc"),
            ("tweets-value", "tweet.avsc"),
            ("views-value", "tweet_view.avsc"),
        )
    }
    topics = {"users": "users", "tweets": "tweets", "output": "views"}
    file = parse_pipeline_file(tmp_path / "p.toml", pipeline_data(tmp_path, registry, topics))
    ada = {"id": 1, "name": "ada", "avatar": None, "updated_at": 1}
    (tmp_path / "u.jsonl").write_text(json.dumps({"key": 1, "value": ada, "timestamp": 5}))
    tweet = {"id": 9, "author_id": 1, "content": "hi"}
    (tmp_path / "t.jsonl").write_text(json.dumps({"key": 9, "value": tweet, "timestamp": 3}))

    result = replay(
        file,
        {"one": tmp_path / "u.jsonl", "many": tmp_path / "t.jsonl"},
        bootstrap_servers=broker.bootstrap_servers,
    )

    # replay decodes the output with the views-value codec, which accepts only magic byte 0
    # and a registered id: a plainly encoded output would not have come back.
    assert latest_by_key(result.outputs) == {"9": {"id": 9, "tweet": tweet, "author": ada}}
    assert result.dead_letters == []
    # Only the executors read the input records, so only they ask for their writer schemas
    # by id: they did, with the file's credentials.
    asked = registry.asked_by_id()
    assert {(ids["users-value"], "ok"), (ids["tweets-value"], "ok")} <= asked
    assert {outcome for _, outcome in asked} == {"ok"}


def fresh_views_topics(conf: dict[str, str], fresh_topic: Callable[[str], str]) -> dict[str, str]:
    """Fresh users, tweets and views topics for :func:`pipeline_data`; the inputs created."""
    topics = {
        "users": fresh_topic("users"),
        "tweets": fresh_topic("tweets"),
        "output": fresh_topic("views"),
    }
    for topic in (topics["users"], topics["tweets"]):
        create_topic(conf, topic)
    return topics


def test_schema_evolution_both_ways_through_the_engine(
    registry: RegistryServer,
    broker: EmbeddedBroker,
    spark: Any,
    tmp_path: Path,
    fresh_topic: Callable[[str], str],
) -> None:
    """Old writer, new reader: users written with a schema that lacks avatar and updated_at
    are read with the latest user schema, its defaults filling in. New writer, old reader:
    tweets written with a newer schema (an added field) after the pipeline resolved its
    reader schema are read with the old one, the added field dropped."""
    full_user = json.loads(text("user.avsc"))
    old_user = {**full_user, "fields": full_user["fields"][:2]}
    old_user_id = register(registry, "users-value", json.dumps(old_user))
    register(registry, "users-value", text("user.avsc"))
    register(registry, "tweets-value", text("tweet.avsc"))
    register(registry, "views-value", text("tweet_view.avsc"))
    conf = client_conf(broker.bootstrap_servers)
    topics = fresh_views_topics(conf, fresh_topic)
    data = pipeline_data(tmp_path, registry, topics, bootstrap_servers=broker.bootstrap_servers)
    file = parse_pipeline_file(tmp_path / "p.toml", data)
    plan = plan_pipeline(file, file.pipeline[0], conf)  # readers: the latest versions now

    newer_tweet = json.loads(text("tweet.avsc"))
    newer_tweet["fields"].append({"name": "lang", "type": "string", "default": "en"})
    newer_tweet_id = register(registry, "tweets-value", json.dumps(newer_tweet))
    old_writer = AvroCodec(
        parse_schema_text(json.dumps(old_user)), registry_url=registry.url, schema_id=old_user_id
    )
    new_writer = AvroCodec(
        parse_schema_text(json.dumps(newer_tweet)),
        registry_url=registry.url,
        schema_id=newer_tweet_id,
    )
    produce(conf, topics["users"], [In(old_writer.encode({"id": 1, "name": "ada"}), b"1", 5)])
    tweet = {"id": 9, "author_id": 1, "content": "hi", "lang": "fr"}
    produce(conf, topics["tweets"], [In(new_writer.encode(tweet), b"9", 6)])

    query = start_query(spark, plan)
    try:
        process_all(query)
    finally:
        query.stop()
    (view,) = read_topic(conf, topics["output"])
    assert view.value is not None and view.value[0] == 0  # Confluent framing
    assert plan.operator.output_codec.decode(view.value) == {
        "id": 9,
        "tweet": {"id": 9, "author_id": 1, "content": "hi"},
        "author": {"id": 1, "name": "ada", "avatar": None, "updated_at": 0},
    }


def test_missing_subject_stops_start_up_with_one_line(
    registry: RegistryServer, broker: EmbeddedBroker, tmp_path: Path
) -> None:
    register(registry, "tweets-value", text("tweet.avsc"))
    topics = {"users": "u", "tweets": "t", "output": "v"}
    file = parse_pipeline_file(tmp_path / "p.toml", pipeline_data(tmp_path, registry, topics))
    with pytest.raises(ConfigError) as error:
        plan_pipeline(file, file.pipeline[0], client_conf(broker.bootstrap_servers))
    message = str(error.value)
    assert "\n" not in message
    assert "'users-value' not found" in message and "register it first" in message


@pytest.mark.parametrize(
    ("outage", "line"),
    [
        ((404, "html"), "answered 404 without a registry error code"),
        ((429, "json"), "is too busy (429)"),
        ((503, "json"), "failed (unavailable (HTTP status code 503, SR code 50300))"),
    ],
)
def test_an_outage_is_not_bad_data_but_the_registrys_not_found_is(
    registry: RegistryServer, outage: tuple[int, str], line: str
) -> None:
    """Through the real registry client: a record whose writer schema the registry cannot
    give now is held back (the batch fails and is retried), never taken for an undecodable
    one; a schema id the registry says it does not know (40403) is the record's fault."""
    schema_id = register(registry, "tweets-value", text("tweet.avsc"))
    tweet = {"id": 9, "author_id": 1, "content": "hi"}
    settings = registry.client_settings(**{"max.retries": 0})
    reader = AvroCodec(parse_schema_text(text("tweet.avsc")), registry_url=registry.url)
    written = AvroCodec(reader.schema, registry_url=registry.url, schema_id=schema_id)
    registry.registry.outage = outage
    fresh = AvroCodec(reader.schema, registry_url=registry.url, registry_settings=settings)
    with pytest.raises(SchemaRegistryUnavailableError) as held:
        fresh.decode(written.encode(tweet))
    assert str(held.value).startswith(f"schema registry {registry.url} {line}")
    assert "\n" not in str(held.value)

    registry.registry.outage = None
    assert fresh.decode(written.encode(tweet)) == tweet
    unknown = AvroCodec(reader.schema, registry_url=registry.url, schema_id=schema_id + 100)
    with pytest.raises(ValueError, match="Schema not found"):
        fresh.decode(unknown.encode(tweet))


def test_records_read_while_a_proxy_answers_for_the_registry_wait_for_it(
    registry: RegistryServer,
    broker: EmbeddedBroker,
    spark: Any,
    tmp_path: Path,
    fresh_topic: Callable[[str], str],
) -> None:
    """A tweet written with a schema the pipeline has not read yet arrives while a proxy in
    front of the registry answers its 404 page: the batch fails with one line, and the tweet
    is not dead-lettered; once the registry is back, the restarted query views it."""
    register(registry, "users-value", text("user.avsc"))
    tweet_id = register(registry, "tweets-value", text("tweet.avsc"))
    register(registry, "views-value", text("tweet_view.avsc"))
    conf = client_conf(broker.bootstrap_servers)
    topics = fresh_views_topics(conf, fresh_topic)
    data = pipeline_data(
        tmp_path,
        registry,
        topics,
        {"max.retries": 0},
        bootstrap_servers=broker.bootstrap_servers,
    )
    file = parse_pipeline_file(tmp_path / "p.toml", data)
    plan = plan_pipeline(file, file.pipeline[0], conf)
    users = AvroCodec(parse_schema_text(text("user.avsc")), registry_url=registry.url)
    user_id = registry.registry.lookup("users-value", text("user.avsc"))
    user = AvroCodec(users.schema, registry_url=registry.url, schema_id=user_id)
    tweets = AvroCodec(parse_schema_text(text("tweet.avsc")), registry_url=registry.url)
    tweet = AvroCodec(tweets.schema, registry_url=registry.url, schema_id=tweet_id)
    ada = {"id": 1, "name": "ada", "avatar": None, "updated_at": 1}
    produce(conf, topics["users"], [In(user.encode(ada), b"1", 5)])
    produce(
        conf,
        topics["tweets"],
        [In(tweet.encode({"id": 9, "author_id": 1, "content": "hi"}), b"9", 6)],
    )

    registry.registry.outage = (404, "html")
    query = start_query(spark, plan)
    try:
        with pytest.raises(Exception) as failed:  # noqa: PT011 - Spark's, checked below
            process_all(query)
    finally:
        query.stop()
    assert failure_reason(str(failed.value)).startswith(
        f"schema registry {registry.url} answered 404 without a registry error code"
    )

    registry.registry.outage = None
    query = start_query(spark, plan)
    try:
        process_all(query)
    finally:
        query.stop()
    (view,) = read_topic(conf, topics["output"])
    assert plan.operator.output_codec.decode(view.value or b"")["author"] == ada
    assert read_topic(conf, file.pipeline[0].dead_letters) == []
