"""Registry subjects by Confluent's strategies, auto-registered output schemas, mixed plain and
registry inputs, and `daemon validate` against the registry: the test registry
(tests/registry.py, basic auth) and, where records flow, the real broker and engine."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from daemon.broker import EmbeddedBroker
from daemon.cli import app
from daemon.demos import latest_by_key
from daemon.errors import ConfigError
from daemon.model.config import ConfigProblems, parse_pipeline_file
from daemon.pipeline.plan import plan_pipeline
from daemon.pipeline.validation import validate_pipeline_file
from daemon.replay import replay
from tests.kafka_helpers import client_conf, create_topic
from tests.registry import RegistryServer

ROOT = Path(__file__).resolve().parents[2]
SCHEMAS = ROOT / "schemas"
REGISTRY_EXAMPLE = ROOT / "examples" / "registry-tweet-views.toml"
ADA = {"id": 1, "name": "ada", "avatar": None, "updated_at": 1}
TWEET = {"id": 9, "author_id": 1, "content": "hi"}


@pytest.fixture
def registry() -> Any:
    with RegistryServer() as server:
        yield server


def text(name: str) -> str:
    return (SCHEMAS / name).read_text(encoding="utf-8")


def views_file(folder: Path, server: RegistryServer, one: dict, many: dict, output: dict) -> Any:
    """The tweet-views comap pipeline with the given serde settings per input and output."""
    return parse_pipeline_file(
        folder / "p.toml",
        {
            "schema_registry": {"url": server.url, "basic.auth.user.info": server.user_info},
            "pipeline": [
                {
                    "name": "views",
                    "joiner": "comap",
                    "checkpoint": str(folder / "checkpoint"),
                    "inputs": {
                        "one": {"topic": "users", "key": "id", "field": "author", **one},
                        "many": {"topic": "tweets", "key": "author_id", "field": "tweet", **many},
                    },
                    "output": {"topic": "views", **output},
                    "options": {"many_id": "id"},
                }
            ],
        },
    )


def replay_views(folder: Path, file: Any, broker: EmbeddedBroker) -> Any:
    (folder / "u.jsonl").write_text(json.dumps({"key": 1, "value": ADA, "timestamp": 5}))
    (folder / "t.jsonl").write_text(json.dumps({"key": 9, "value": TWEET, "timestamp": 3}))
    return replay(
        file,
        {"one": folder / "u.jsonl", "many": folder / "t.jsonl"},
        bootstrap_servers=broker.bootstrap_servers,
    )


def posted_subjects(server: RegistryServer) -> set[str]:
    """The subjects schemas were looked up or registered under."""
    return {
        path.split("?")[0].split("/")[2]
        for path, _ in server.registry.requests
        if path.startswith("/subjects/") and "/versions/latest" not in path
    }


def test_record_and_topic_record_strategies_name_the_subjects_read_and_written(
    registry: RegistryServer, broker: EmbeddedBroker, spark: Any, tmp_path: Path
) -> None:
    """Users under RecordNameStrategy (the record's full name), tweets under
    TopicRecordNameStrategy (`tweets-<full name>`), views under TopicNameStrategy. Replay
    writes each input with the schema id registered under its subject, so a wrong subject
    would fail; the output is written with `views-value`'s latest schema id."""
    registry.add("enrichd.examples.User", text("user.avsc"))
    registry.add("tweets-enrichd.examples.Tweet", text("tweet.avsc"))
    registry.add("views-value", text("tweet_view.avsc"))
    file = views_file(
        tmp_path,
        registry,
        one={"schema": str(SCHEMAS / "user.avsc"), "subject_name_strategy": "record"},
        many={"schema": str(SCHEMAS / "tweet.avsc"), "subject_name_strategy": "topic_record"},
        output={},  # no schema: views-value's latest
    )

    result = replay_views(tmp_path, file, broker)

    assert latest_by_key(result.outputs) == {"9": {"id": 9, "tweet": TWEET, "author": ADA}}
    assert result.dead_letters == []
    assert posted_subjects(registry) >= {"enrichd.examples.User", "tweets-enrichd.examples.Tweet"}


def test_plain_avro_inputs_beside_registry_inputs_and_an_auto_registered_output(
    registry: RegistryServer, broker: EmbeddedBroker, spark: Any, tmp_path: Path
) -> None:
    """Users in plain Avro (`schema` alone), tweets by `tweets-value`, the output registering
    its .avsc under `views-value` (and an Avro key under `views-key`) at start."""
    registry.add("tweets-value", text("tweet.avsc"))
    file = views_file(
        tmp_path,
        registry,
        one={"schema": str(SCHEMAS / "user.avsc")},
        many={},
        output={
            "schema": str(SCHEMAS / "tweet_view.avsc"),
            "auto_register": True,
            "key_format": "avro",
            "key_schema": str(SCHEMAS / "tweet_view_key.avsc"),
        },
    )

    result = replay_views(tmp_path, file, broker)

    # Replay reads keys back with the output's key codec: an Avro record, not text.
    assert [(r["key"], r["value"]) for r in result.outputs] == [
        ({"id": 9}, {"id": 9, "tweet": TWEET, "author": ADA})
    ]
    assert set(registry.registry.subjects) == {"tweets-value", "views-value", "views-key"}


def evolved_view(field: dict[str, Any], folder: Path) -> Path:
    schema = json.loads(text("tweet_view.avsc"))
    schema["fields"].append(field)
    path = folder / "view.avsc"
    path.write_text(json.dumps(schema), encoding="utf-8")
    return path


def test_auto_register_accepts_a_compatible_schema_and_refuses_an_incompatible_one(
    registry: RegistryServer, broker: EmbeddedBroker, tmp_path: Path, fresh_topic: Any
) -> None:
    conf = client_conf(broker.bootstrap_servers)
    users, tweets = fresh_topic("users"), fresh_topic("tweets")
    for topic in (users, tweets):
        create_topic(conf, topic)
    registry.add(f"{users}-value", text("user.avsc"))
    registry.add(f"{tweets}-value", text("tweet.avsc"))
    registry.add("views-value", text("tweet_view.avsc"))

    def plan(view: Path) -> Any:
        file = views_file(
            tmp_path,
            registry,
            one={"topic": users},
            many={"topic": tweets},
            output={"schema": str(view), "auto_register": True},
        )
        return plan_pipeline(file, file.pipeline[0], conf)

    lang = {"name": "lang", "type": "string", "default": "en"}
    accepted = plan(evolved_view(lang, tmp_path))
    versions = registry.registry.subjects["views-value"]
    assert len(versions) == 2
    assert accepted.operator.output_codec.schema_id == versions[-1]

    required = {"name": "score", "type": "long"}  # no default: old views cannot be read
    with pytest.raises(ConfigError) as refused:
        plan(evolved_view(required, tmp_path))
    message = str(refused.value)
    assert "\n" not in message
    assert "refused to register" in message and "under subject 'views-value'" in message
    assert "incompatible with an earlier schema" in message and "score" in message
    assert len(registry.registry.subjects["views-value"]) == 2


def write_example(folder: Path, server: RegistryServer) -> Path:
    """The registry example, its paths made absolute, with the registry's URL and login."""
    path = folder / "registry-tweet-views.toml"
    path.write_text(REGISTRY_EXAMPLE.read_text().replace('"../', f'"{ROOT}/'), encoding="utf-8")
    return path


def test_validate_checks_the_example_against_the_registry(
    registry: RegistryServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each subject the example reads must be there with the key's field, and its output
    schemas must be compatible; --offline checks the file alone."""
    url = registry.url.replace("://", f"://{registry.user_info}@")
    monkeypatch.setenv("SCHEMA_REGISTRY_URL", url)
    path = write_example(tmp_path, registry)
    where = f"{path}: pipeline[0] (registry-tweet-views)"

    assert validate_pipeline_file(path, check_registry=False)[1] == []
    shown = registry.url.replace("://", "://***@")
    assert validate_pipeline_file(path)[1] == [
        f"{where}.inputs.one: schema registry subject 'users-value' not found at {shown} "
        "(Subject not found (HTTP status code 404, SR code 40401)); register it first",
        f"{where}.inputs.many: schema registry subject 'tweets-value' not found at {shown} "
        "(Subject not found (HTTP status code 404, SR code 40401)); register it first",
    ]

    registry.add("users-value", text("user.avsc"))
    renamed = json.loads(text("tweet.avsc"))
    renamed["fields"][1]["name"] = "writer_id"
    registry.add("tweets-value", json.dumps(renamed))
    without_id = json.loads(text("tweet_view.avsc"))
    without_id["fields"] = without_id["fields"][1:]  # the example's id has no default
    registry.add("tweet-views-value", json.dumps(without_id))
    registry.add("tweet-views-key", '"string"')
    problems = validate_pipeline_file(path)[1]
    assert problems[0] == (
        f"{where}.inputs.many.key: field 'author_id' is not in schema subject 'tweets-value'; "
        "its fields: id, writer_id, content"
    )
    assert problems[1].startswith(
        f"{where}.output: {ROOT}/schemas/tweet_view.avsc is incompatible with subject "
        "'tweet-views-value': "
    )
    assert problems[2].startswith(
        f"{where}.output: {ROOT}/schemas/tweet_view_key.avsc is incompatible with subject "
        "'tweet-views-key': "
    )
    assert len(problems) == 3

    result = CliRunner().invoke(app, ["validate", "--offline", str(path)])
    assert result.exit_code == 0, result.output


def test_validate_reports_a_registry_that_refuses_the_login_once(
    registry: RegistryServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SCHEMA_REGISTRY_URL", registry.url.replace("://", "://enrichd:wrong@"))
    path = write_example(tmp_path, registry)
    result = CliRunner().invoke(app, ["validate", str(path)])
    assert isinstance(result.exception, ConfigProblems)
    (problem,) = result.exception.problems
    assert problem.endswith(
        "refused the credentials (401); check basic.auth.user.info or bearer.auth.* in "
        "[schema_registry]"
    )
    assert "wrong" not in problem


def test_an_output_schema_file_must_be_registered_unless_auto_registered(
    registry: RegistryServer, tmp_path: Path
) -> None:
    registry.add("users-value", text("user.avsc"))
    registry.add("tweets-value", text("tweet.avsc"))
    example = write_example(tmp_path, registry)
    path = tmp_path / "registered.toml"
    path.write_text(
        example.read_text()
        .replace("${SCHEMA_REGISTRY_URL:-http://localhost:8081}", registry.url)
        .replace("[spark]", f'"basic.auth.user.info" = "{registry.user_info}"\n\n[spark]')
        .replace("auto_register = true", 'subject_name_strategy = "topic"')
        .replace('key_format = "avro"\n', "")
        .replace('key_schema = "', '# key_schema = "'),
        encoding="utf-8",
    )
    (problem,) = validate_pipeline_file(path)[1]
    assert problem == (
        f"{path}: pipeline[0] (registry-tweet-views).output: {SCHEMAS / 'tweet_view.avsc'} "
        f"is not registered under subject 'tweet-views-value' at {registry.url} (Subject not "
        "found (HTTP status code 404, SR code 40401)); register it, or set auto_register = true"
    )
    registry.add("tweet-views-value", text("tweet_view.avsc"))
    assert validate_pipeline_file(path)[1] == []
