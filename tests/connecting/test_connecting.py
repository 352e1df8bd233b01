"""Connecting to a secured cluster: TLS, SASL, a registry behind basic auth or TLS, secrets
from the environment, and one clear line when a connection is refused.

The brokers are real (Tansu behind the tests' TLS terminator, tests/tls_proxy.py, for TLS;
Tansu with ``--authentication`` for SASL) and so is the HTTP(S) registry stand-in the real
confluent-kafka client talks to. The failure tests run the real ``daemon`` command; they end
before Spark starts.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

from daemon.broker import EmbeddedBroker
from daemon.demos import latest_by_key
from daemon.formats.avro.codec import AvroCodec
from daemon.kafka.connect import client_conf
from daemon.model.config import load_pipeline_file
from daemon.pipeline.plan import plan_pipeline, start_query
from daemon.replay import replay
from daemon.source.spark_source import KafkaSource
from tests.kafka_helpers import SCHEMAS, In, create_topic, process_all, produce, read_topic
from tests.registry import RegistryServer
from tests.scram_proxy import ScramGate
from tests.secure_cluster import Pki, TlsBroker

ADA = {"id": 1, "name": "ada", "avatar": None, "updated_at": 1}
TWEET = {"id": 9, "author_id": 1, "content": "hi"}


def daemon(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "daemon", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYSPARK_PYTHON": sys.executable, **env},
    )


def toml_table(name: str, settings: dict[str, Any]) -> str:
    lines = [f"[{name}]"] + [f"{json.dumps(k)} = {json.dumps(v)}" for k, v in settings.items()]
    return "\n".join(lines) + "\n\n"


def write_pipeline(
    folder: Path,
    servers: str,
    kafka: dict[str, Any] | None = None,
    registry: dict[str, Any] | None = None,
    topics: tuple[str, str, str] = ("users", "tweets", "views"),
    spark_conf: dict[str, Any] | None = None,
) -> Path:
    """The tweet-views pipeline: by subject when ``registry`` is given, else by .avsc file;
    ``spark_conf``: its ``[spark.conf]``."""
    users, tweets, views = topics

    def serde(topic: str, subject: str, schema: str) -> str:
        source = f'subject = "{subject}"' if registry else f'schema = "{SCHEMAS / schema}"'
        return f'topic = "{topic}"\n{source}\n'

    text = (
        toml_table("kafka", {"bootstrap_servers": servers})
        + (toml_table("kafka.client_conf", kafka) if kafka else "")
        + (toml_table("schema_registry", registry) if registry else "")
        + (toml_table("spark.conf", spark_conf) if spark_conf else "")
        + f"""[[pipeline]]
name = "views-{views}"
joiner = "comap"
checkpoint = "{folder / "checkpoint"}"

[pipeline.inputs.one]
{serde(users, "users-value", "user.avsc")}key = "id"
field = "author"

[pipeline.inputs.many]
{serde(tweets, "tweets-value", "tweet.avsc")}key = "author_id"
field = "tweet"

[pipeline.output]
{serde(views, "views-value", "tweet_view.avsc")}
[pipeline.options]
many_id = "id"
"""
    )
    path = folder / "pipeline.toml"
    path.write_text(text, encoding="utf-8")
    return path


def replay_args(path: Path) -> list[str]:
    folder = path.parent
    (folder / "u.jsonl").write_text(json.dumps({"key": 1, "value": ADA, "timestamp": 5}))
    (folder / "t.jsonl").write_text(json.dumps({"key": 9, "value": TWEET, "timestamp": 3}))
    return ["replay", str(path), "--input", f"one={folder / 'u.jsonl'}"] + [
        "--input",
        f"many={folder / 't.jsonl'}",
    ]


def one_error_line(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 1, done.stderr[-3000:]
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr[-3000:]
    return lines[0]


def register_views_schemas(server: RegistryServer, **extra: str) -> dict[str, int]:
    client = SchemaRegistryClient(server.client_settings(**extra))
    return {
        subject: client.register_schema(subject, Schema((SCHEMAS / name).read_text(), "AVRO"))
        for subject, name in (
            ("users-value", "user.avsc"),
            ("tweets-value", "tweet.avsc"),
            ("views-value", "tweet_view.avsc"),
        )
    }


@pytest.fixture
def registry() -> Any:
    with RegistryServer() as server:
        register_views_schemas(server)
        yield server


# -- secrets from the environment -------------------------------------------------------------


def test_a_missing_variable_is_one_line_naming_it_and_its_key(tmp_path: Path) -> None:
    path = write_pipeline(
        tmp_path, "127.0.0.1:9", kafka={"sasl.password": "${ENRICHD_TEST_UNSET_PASSWORD}"}
    )
    expected = (
        f"error: {path}: kafka.client_conf.sasl.password: environment variable "
        "ENRICHD_TEST_UNSET_PASSWORD is not set; set it, or give a default as "
        "${ENRICHD_TEST_UNSET_PASSWORD:-default}"
    )
    for command in (["validate", str(path)], ["run", str(path)]):
        assert one_error_line(daemon(*command)) == expected


def test_variables_and_defaults_fill_any_string_of_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ENRICHD_TEST_TOPIC", "people")
    monkeypatch.setenv("ENRICHD_TEST_EMPTY", "")
    monkeypatch.delenv("ENRICHD_TEST_UNSET", raising=False)
    path = write_pipeline(
        tmp_path,
        "${ENRICHD_TEST_UNSET:-broker.example:9093}",
        kafka={"client.id": "${ENRICHD_TEST_EMPTY:-enrichd}", "sasl.username": "$${literal}"},
        topics=("${ENRICHD_TEST_TOPIC}", "tweets", "views"),
    )
    file = load_pipeline_file(path)
    assert file.kafka.bootstrap_servers == "broker.example:9093"
    assert file.kafka.client_conf == {"client.id": "enrichd", "sasl.username": "${literal}"}
    assert file.pipeline[0].inputs["one"].topic == "people"


# -- secrets from files (a Kubernetes Secret mounted as files) ------------------------------


def test_a_missing_secret_file_is_one_line_naming_its_path_and_key(tmp_path: Path) -> None:
    kafka = {"sasl.password": "${file:secrets/kafka-password}"}  # beside the pipeline file
    path = write_pipeline(tmp_path, "127.0.0.1:9", kafka=kafka)
    expected = (
        f"error: {path}: kafka.client_conf.sasl.password: cannot read secret file "
        f"{tmp_path / 'secrets' / 'kafka-password'} (No such file or directory); mount or "
        "write it there, or correct the path in ${file:...}"
    )
    for command in (["validate", str(path)], ["run", str(path)]):
        assert one_error_line(daemon(*command)) == expected


def test_a_password_from_a_file_logs_in_and_is_never_printed(
    scram_broker: ScramGate, tmp_path: Path
) -> None:
    """``daemon validate --check-topics`` logs in through the SCRAM gate with the file's
    password (written with a line ending, as ``echo`` writes it), and prints none of it;
    a file with a wrong password is refused, and that one is not printed either."""
    secrets = tmp_path / "secrets"
    secrets.mkdir()
    (secrets / "kafka-password").write_text(scram_broker.password + "\n")
    users, tweets = f"users-{uuid.uuid4().hex[:8]}", f"tweets-{uuid.uuid4().hex[:8]}"
    conf = {"bootstrap.servers": scram_broker.bootstrap_servers}
    conf |= scram(scram_broker.user, scram_broker.password)
    create_topic(conf, users)
    create_topic(conf, tweets)
    kafka = scram(scram_broker.user, "${file:" + str(secrets / "kafka-password") + "}")
    path = write_pipeline(
        tmp_path, scram_broker.bootstrap_servers, kafka=kafka, topics=(users, tweets, "views")
    )
    authenticated = scram_broker.authenticated
    done = daemon("validate", "--check-topics", str(path))
    assert (done.returncode, done.stdout.split(":")[0]) == (0, "ok"), done.stderr
    assert scram_broker.authenticated > authenticated
    assert scram_broker.password not in done.stdout + done.stderr

    wrong = "not-the-password-from-a-file"
    (secrets / "kafka-password").write_text(wrong)
    done = daemon("validate", "--check-topics", str(path))
    line = one_error_line(done)
    assert line.startswith(f"error: {path}: kafka.bootstrap_servers: cannot list topics")
    assert line.endswith(
        "(Authentication failed: invalid credentials); check security.protocol, "
        "sasl.mechanism, sasl.username and sasl.password in [kafka] client_conf"
    )
    assert wrong not in done.stdout + done.stderr


def scram(user: str, password: str) -> dict[str, str]:
    """``[kafka] client_conf`` of a SCRAM-SHA-512 login without TLS."""
    return {
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": user,
        "sasl.password": password,
    }


# -- Kafka refusing the connection --------------------------------------------------------------


def test_kafka_refusing_the_credentials_is_one_line_for_run_and_replay(
    sasl_broker: str, tmp_path: Path
) -> None:
    """Tansu 0.6 stores no SCRAM credentials in memory, so it refuses every SCRAM login."""
    path = write_pipeline(
        tmp_path, sasl_broker, kafka=scram("enrichd", "${ENRICHD_TEST_KAFKA_PASSWORD}")
    )
    password = "correct-horse-battery"  # noqa: S105 - planted, to look for in the output
    for command in (["run", str(path)], replay_args(path)):
        done = daemon(*command, ENRICHD_TEST_KAFKA_PASSWORD=password)
        assert one_error_line(done) == (
            f"error: Kafka at {sasl_broker} refused the credentials (SASL SCRAM authentication "
            "failed: broker responded with unknown-user); check security.protocol, "
            "sasl.mechanism, sasl.username and sasl.password in [kafka] client_conf"
        )
        assert password not in done.stdout + done.stderr


def test_scram_sha_512_reaches_every_client_of_a_replay(
    scram_broker: ScramGate, spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every connection to this broker must log in with SCRAM-SHA-512 first: a client made
    without the file's SASL settings would be cut off, and the replay could not finish."""
    monkeypatch.setenv("ENRICHD_TEST_SCRAM_PASSWORD", scram_broker.password)
    kafka = scram(scram_broker.user, "${ENRICHD_TEST_SCRAM_PASSWORD}")
    path = write_pipeline(tmp_path, scram_broker.bootstrap_servers, kafka=kafka)
    replay_args(path)  # writes the input files
    refused_before = scram_broker.refused
    result = replay(
        load_pipeline_file(path), {"one": tmp_path / "u.jsonl", "many": tmp_path / "t.jsonl"}
    )
    assert latest_by_key(result.outputs) == {"9": {"id": 9, "tweet": TWEET, "author": ADA}}
    assert scram_broker.refused == refused_before
    assert scram_broker.authenticated > 0


def test_wrong_scram_credentials_are_one_line(scram_broker: ScramGate, tmp_path: Path) -> None:
    kafka = scram(scram_broker.user, "not-the-password")
    path = write_pipeline(tmp_path, scram_broker.bootstrap_servers, kafka=kafka)
    assert one_error_line(daemon(*replay_args(path))) == (
        f"error: Kafka at {scram_broker.bootstrap_servers} refused the credentials "
        "(Authentication failed: invalid credentials); check security.protocol, "
        "sasl.mechanism, sasl.username and sasl.password in [kafka] client_conf"
    )


def test_an_untrusted_broker_certificate_is_one_line_for_run_and_replay(
    tls_broker: TlsBroker, tmp_path: Path
) -> None:
    kafka = {"security.protocol": "SSL"}  # the system's CAs, which did not sign the broker's
    path = write_pipeline(tmp_path, tls_broker.bootstrap_servers, kafka=kafka)
    for command in (["run", str(path)], replay_args(path)):
        line = one_error_line(daemon(*command))
        assert line.startswith(
            f"error: Kafka at {tls_broker.bootstrap_servers}: the TLS handshake failed (SSL "
            "handshake failed: "
        )
        assert "certificate verify failed" in line and line.endswith(
            "check ssl.ca.location (the CA that signed the broker's certificate) and, for mutual "
            "TLS, ssl.certificate.location and ssl.key.location in [kafka] client_conf"
        )


def test_mutual_tls_without_a_client_certificate_is_one_line(
    mtls_broker: TlsBroker, tmp_path: Path
) -> None:
    kafka = mtls_broker.client_conf(client_cert=False)
    del kafka["bootstrap.servers"]
    path = write_pipeline(tmp_path, mtls_broker.bootstrap_servers, kafka=kafka)
    line = one_error_line(daemon("run", str(path)))
    assert line.startswith(
        f"error: Kafka at {mtls_broker.bootstrap_servers}: the TLS handshake failed ("
    )
    assert "certificate required" in line


# -- the registry refusing the connection ---------------------------------------------------------


def test_a_registry_refusing_the_credentials_is_one_line_for_run_and_replay(
    registry: RegistryServer, broker: EmbeddedBroker, tmp_path: Path
) -> None:
    wrong = "not-the-password"
    settings = {"url": registry.url, "basic.auth.user.info": f"{registry.registry.user}:{wrong}"}
    path = write_pipeline(tmp_path, broker.bootstrap_servers, registry=settings)
    for command in (["run", str(path)], replay_args(path)):
        done = daemon(*command)
        assert one_error_line(done) == (
            f"error: schema registry {registry.url} refused the credentials (401); check "
            "basic.auth.user.info or bearer.auth.* in [schema_registry]"
        )
        assert wrong not in done.stderr
    # Under ENRICHD_DEBUG the traceback is printed, with the password masked in it too.
    done = daemon(*replay_args(path), ENRICHD_DEBUG="1")
    assert done.returncode == 1 and "Traceback (most recent call last)" in done.stderr
    assert "SchemaRegistryUnavailableError" in done.stderr and wrong not in done.stderr


def test_a_registry_denying_access_is_one_line(
    registry: RegistryServer, broker: EmbeddedBroker, tmp_path: Path
) -> None:
    registry.registry.denied.add(registry.registry.user)
    settings = {"url": registry.url, "basic.auth.user.info": registry.user_info}
    path = write_pipeline(tmp_path, broker.bootstrap_servers, registry=settings)
    assert one_error_line(daemon(*replay_args(path))) == (
        f"error: schema registry {registry.url} denied access (403); the credentials lack "
        "permission to read this subject or schema"
    )


def test_a_registry_url_with_credentials_is_never_printed_whole(
    registry: RegistryServer, broker: EmbeddedBroker, tmp_path: Path
) -> None:
    """Credentials in the URL (``basic.auth.credentials.source = "URL"``) work, and the
    "subject not found" error shows the URL without them."""
    user, password = registry.registry.user, registry.registry.password
    url = registry.url.replace("://", f"://{user}:{password}@")
    path = write_pipeline(
        tmp_path,
        broker.bootstrap_servers,
        registry={"url": url, "basic.auth.credentials.source": "URL"},
        topics=("u", "t", "v"),
    )
    text = path.read_text().replace('"users-value"', '"nobody-value"')
    path.write_text(text)
    line = one_error_line(daemon(*replay_args(path)))
    assert line.startswith(
        "error: schema registry subject 'nobody-value' not found at "
        f"{registry.url.replace('://', '://***@')} ("
    )
    assert password not in line


def test_an_untrusted_registry_certificate_is_one_line(
    pki: Pki, broker: EmbeddedBroker, tmp_path: Path
) -> None:
    with RegistryServer(tls=(pki.server, pki.server_key)) as server:
        settings = {"url": server.url, "basic.auth.user.info": server.user_info}
        path = write_pipeline(tmp_path, broker.bootstrap_servers, registry=settings)
        line = one_error_line(daemon(*replay_args(path)))
    assert line.startswith(f"error: schema registry {server.url}: the TLS handshake failed (")
    assert "CERTIFICATE_VERIFY_FAILED" in line
    assert line.endswith(
        "check ssl.ca.location (the CA that signed the registry's certificate) and, for "
        "mutual TLS, ssl.certificate.location and ssl.key.location in [schema_registry]"
    )


# -- end to end over TLS, in this process -------------------------------------------------------


def test_a_pipeline_runs_over_tls_with_a_registry_over_https_and_prints_no_secret(
    tls_broker: TlsBroker, pki: Pki, spark: Any, tmp_path: Path, fresh_topic: Any
) -> None:
    """Every client of the pipeline (planning, readers, transactional writers) reaches the
    broker through TLS only, and the executors read the registry over HTTPS with basic auth.
    The query's plan and progress reports show neither the password nor the specs that
    carry it to the executors."""
    topics = (fresh_topic("users"), fresh_topic("tweets"), fresh_topic("views"))
    with RegistryServer(tls=(pki.server, pki.server_key)) as server:
        https = {"ssl.ca.location": str(pki.ca)}
        ids = register_views_schemas(server, **https)
        conf = tls_broker.client_conf(client_cert=False)
        for topic in topics[:2]:
            create_topic(conf, topic, 2)
        settings = {"url": server.url, "basic.auth.user.info": server.user_info, **https}
        kafka = {"security.protocol": "SSL", "ssl.ca.location": "ca.pem"}  # relative: the file's
        (tmp_path / "ca.pem").write_bytes(pki.ca.read_bytes())
        path = write_pipeline(
            tmp_path, tls_broker.bootstrap_servers, kafka=kafka, registry=settings, topics=topics
        )
        file = load_pipeline_file(path)
        plan = plan_pipeline(file, file.pipeline[0], client_conf(file))
        for (role, subject), record, key in (
            (("one", "users-value"), ADA, b"1"),
            (("many", "tweets-value"), TWEET, b"9"),
        ):
            (spec,) = [s for s in plan.source.inputs if s.role == role]
            writer = AvroCodec(spec.codec.schema, registry_url=server.url, schema_id=ids[subject])
            produce(conf, spec.topic, [In(writer.encode(record), key, 5)])
        query = start_query(spark, plan)
        try:
            process_all(query)
            shown = query._jsq.explainInternal(True) + json.dumps(query.recentProgress[-1].json)
        finally:
            query.stop()
        # What a streaming DataFrame over enrichd's source shows of its plan (explain()).
        stream = spark.readStream.format(KafkaSource.name()).option("spec", plan.source.encode())
        shown += stream.load()._jdf.queryExecution().toString()
        asked = server.asked_by_id()
        (view,) = read_topic(conf, topics[2])
        assert view.value is not None
        assert plan.operator.output_codec.decode(view.value) == {
            "id": 9,
            "tweet": TWEET,
            "author": ADA,
        }
    # The executors read the inputs, and asked for their writer schemas with credentials.
    assert {(ids["users-value"], "ok"), (ids["tweets-value"], "ok")} <= asked
    assert server.registry.password not in shown
    assert plan.source.encode()[:60] not in shown and plan.output.encode()[:60] not in shown


def test_codecs_never_show_their_registry_settings() -> None:
    from daemon.formats.avro.codec import parse_schema_text as parse

    codec = AvroCodec(
        parse('"string"'),
        registry_url="https://sr.example",
        registry_settings={"url": "https://sr.example", "basic.auth.user.info": "u:hunter22"},
    )
    assert "hunter22" not in repr(codec) and "hunter22" not in str(codec)
