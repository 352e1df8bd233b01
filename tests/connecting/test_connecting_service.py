"""`daemon run` on a secured cluster: mutual TLS to the broker, a registry behind basic auth,
every secret from the environment, and none of them ever printed.

One real `daemon run` process serves every test of this module (they run in file order): the
broker is reached only through TLS (tests/tls_proxy.py) with a client certificate whose key is
encrypted (``ssl.key.password``), the registry only with basic auth, and the pipeline file
names both secrets as ``${VAR}``. Midway the registry changes its password, as a rotation
would: the executors can no longer read a new writer schema, the batch fails and is retried
with backoff, ``/readyz`` says why, and once the password is right again the record comes
out, not as a dead letter.
"""

from __future__ import annotations

import json
import os
import signal
import stat
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

from daemon.checkpoint.layout import lock_file, state_folder
from daemon.formats.avro.codec import AvroCodec, parse_schema_text
from tests.connecting.test_connecting import daemon, register_views_schemas, write_pipeline
from tests.daemon_process import DaemonProcess
from tests.kafka_helpers import SCHEMAS, In, create_topic, produce, read_topic
from tests.registry import RegistryServer
from tests.secure_cluster import Pki, TlsBroker

USERS = 3
STOP_TIMEOUT_S = 20
SPARK_SECRETS = {
    # Secrets a pipeline gives Spark (object storage keys, say), which PySpark would put on
    # the JVM's command line: enrichd must not.
    "spark.hadoop.fs.s3a.secret.key": "${ENRICHD_TEST_S3_SECRET}",
    "spark.hadoop.fs.azure.account.key.acct.blob.core.windows.net": "${ENRICHD_TEST_AZURE_KEY}",
}


@dataclass
class Secured:
    """The running daemon, its cluster, and the secrets it was given."""

    daemon: DaemonProcess
    path: Path
    env: dict[str, str]
    conf: dict[str, str]
    registry: RegistryServer
    ids: dict[str, int]
    topics: tuple[str, str, str]
    secrets: tuple[str, ...]

    @property
    def name(self) -> str:
        return f"views-{self.topics[2]}"

    def views(self) -> dict[int, dict[str, Any]]:
        reader = AvroCodec(
            parse_schema_text((SCHEMAS / "tweet_view.avsc").read_text()),
            registry_url=self.registry.url,
            registry_settings=self.registry.client_settings(),
        )
        return {
            view["id"]: view
            for view in (
                reader.decode(out.value)
                for out in read_topic(self.conf, self.topics[2])
                if out.value is not None
            )
        }

    def produce(self, role: str, records: list[tuple[dict[str, Any], int]], subject: str) -> None:
        schema = self.registry.registry.schemas[self.ids[subject] - 1]
        writer = AvroCodec(
            parse_schema_text(schema), registry_url=self.registry.url, schema_id=self.ids[subject]
        )
        topic = self.topics[0] if role == "one" else self.topics[1]
        produce(self.conf, topic, [In(writer.encode(r), str(k).encode()) for r, k in records])

    def assert_no_secret(self, text: str) -> None:
        for secret in self.secrets:
            assert secret not in text


def user(i: int) -> dict[str, Any]:
    return {"id": i, "name": f"user-{i}", "avatar": None, "updated_at": 1}


def tweet(i: int, **extra: Any) -> dict[str, Any]:
    return {"id": 100 + i, "author_id": i % USERS, "content": f"tweet {i}", **extra}


@pytest.fixture(scope="module")
def secured(
    mtls_broker: TlsBroker, pki: Pki, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Secured]:
    tmp = tmp_path_factory.mktemp("secured")
    suffix = uuid.uuid4().hex[:8]
    s3_secret, azure_key = f"s3-secret-{uuid.uuid4().hex}", f"azure-key-{uuid.uuid4().hex}"
    topics = (f"users-{suffix}", f"tweets-{suffix}", f"views-{suffix}")
    conf = mtls_broker.client_conf()
    for topic in topics[:2]:
        create_topic(conf, topic, 2)
    kafka = {
        **{k: v for k, v in conf.items() if k not in ("bootstrap.servers", "ssl.key.password")},
        "ssl.key.password": "${ENRICHD_TEST_KEY_PASSWORD}",
        "client.id": "${ENRICHD_TEST_CLIENT_ID:-enrichd-secured}",
    }
    with RegistryServer() as registry:
        ids = register_views_schemas(registry)
        settings = {
            "url": registry.url,
            "basic.auth.user.info": "${ENRICHD_TEST_SR_USER}:${ENRICHD_TEST_SR_PASSWORD}",
        }
        path = write_pipeline(
            tmp,
            mtls_broker.bootstrap_servers,
            kafka=kafka,
            registry=settings,
            topics=topics,
            spark_conf=SPARK_SECRETS,
        )
        (tmp / "tmp").mkdir()
        env = {
            "ENRICHD_TEST_KEY_PASSWORD": pki.key_password,
            "ENRICHD_TEST_SR_USER": registry.registry.user,
            "ENRICHD_TEST_SR_PASSWORD": registry.registry.password,
            "ENRICHD_TEST_S3_SECRET": s3_secret,
            "ENRICHD_TEST_AZURE_KEY": azure_key,
            # Its runtime folder (enrichd-UID) apart from every other process's.
            "TMPDIR": str(tmp / "tmp"),
        }
        secured = Secured(
            daemon=DaemonProcess(
                path,
                tmp / "daemon.log",
                "--log-format",
                "json",
                "--stop-timeout",
                str(STOP_TIMEOUT_S),
                env=env,
            ),
            path=path,
            env=env,
            conf=conf,
            registry=registry,
            ids=ids,
            topics=topics,
            secrets=(pki.key_password, registry.registry.password, s3_secret, azure_key),
        )
        try:
            secured.produce("one", [(user(i), i) for i in range(USERS)], "users-value")
            secured.produce("many", [(tweet(i), 100 + i) for i in range(6)], "tweets-value")
            yield secured
        finally:
            if secured.daemon.process.poll() is None:
                secured.daemon.process.kill()
                secured.daemon.process.wait(30)


def test_every_view_arrives_through_mutual_tls_with_secrets_from_the_environment(
    secured: Secured,
) -> None:
    secured.daemon.wait_until("a view of every tweet", lambda: len(secured.views()) == 6)
    assert secured.views()[101] == {"id": 101, "tweet": tweet(1), "author": user(1)}
    # The executors read the inputs, and asked the registry for their writer schemas.
    assert {(secured.ids["users-value"], "ok"), (secured.ids["tweets-value"], "ok")} <= (
        secured.registry.asked_by_id()
    )


def _command_lines() -> dict[int, str]:
    """Every process's command line, as ``ps`` shows it to every user of the host."""
    lines = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                raw = (entry / "cmdline").read_bytes()
            except OSError:  # gone meanwhile
                continue
            lines[int(entry.name)] = raw.replace(b"\0", b" ").decode(errors="replace")
    return lines


def _children(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        found += [int(c) for c in (task / "children").read_text().split()]
    return found


def test_no_secret_is_on_any_command_line_and_the_daemons_files_are_private(
    secured: Secured,
) -> None:
    """While it runs (views are out: Spark, its Python workers and every Kafka client are
    up), no process of the host shows a secret of the pipeline file on its command line; the
    JVM got its settings from a file that is gone. The checkpoint and the runtime folder
    (Spark's log, the commit turn's lock, the metrics socket) are the user's alone."""
    secured.daemon.wait_until("a view of every tweet", lambda: len(secured.views()) == 6)
    lines = _command_lines()
    shown = [pid for pid, line in lines.items() if any(s in line for s in secured.secrets)]
    assert shown == [], f"secrets on the command lines of processes {shown}"
    children = [lines.get(c, "") for c in _children(secured.daemon.process.pid)]
    (jvm,) = [line for line in children if "org.apache.spark.deploy.SparkSubmit" in line]
    assert "--properties-file" in jvm, jvm
    assert "spark.hadoop" not in jvm, jvm

    def modes(folder: Path) -> set[tuple[str, str]]:
        """(kind, mode) of ``folder`` and everything in it, sockets aside."""
        found = set()
        for path in [folder, *folder.rglob("*")]:
            info = path.lstat()
            if stat.S_ISDIR(info.st_mode):
                found.add(("folder", oct(stat.S_IMODE(info.st_mode))))
            elif stat.S_ISREG(info.st_mode):
                found.add(("file", oct(stat.S_IMODE(info.st_mode))))
        return found

    private = {("folder", "0o700"), ("file", "0o600")}
    checkpoint = secured.path.parent / "checkpoint"
    assert state_folder(checkpoint).is_dir() and lock_file(checkpoint).is_file()
    assert modes(checkpoint) == private
    runtime = secured.path.parent / "tmp" / f"enrichd-{os.getuid()}"
    assert (runtime / "transactions.lock").is_file()  # the test broker takes the turn
    logs = list(runtime.glob("spark-*.log"))
    assert len(logs) == 1
    # Spark's settings were removed once the JVM answered; log4j's settings stay.
    settings = [p for p in runtime.glob("spark-*.properties") if ".log4j2." not in p.name]
    assert settings == []
    assert modes(runtime) == private
    secured.assert_no_secret(logs[0].read_text(errors="replace"))


def test_a_registry_refusing_mid_run_fails_the_batch_which_is_retried_until_it_passes(
    secured: Secured,
) -> None:
    registry = secured.registry
    newer = json.loads((SCHEMAS / "tweet.avsc").read_text())
    newer["fields"].append({"name": "lang", "type": "string", "default": "en"})
    client = SchemaRegistryClient(registry.client_settings())
    secured.ids["tweets-value-2"] = client.register_schema(
        "tweets-value", Schema(json.dumps(newer), "AVRO")
    )
    password = registry.registry.password
    registry.registry.password = f"rotated-{uuid.uuid4().hex}"  # the daemon's is now wrong
    secured.produce("many", [(tweet(7, lang="fr"), 107)], "tweets-value-2")

    refused = (
        f"schema registry {registry.url} refused the credentials (401); check "
        "basic.auth.user.info or bearer.auth.* in [schema_registry]"
    )
    secured.daemon.wait_until(
        "the refusal on /readyz",
        lambda: (
            secured.daemon.get("/readyz")
            == (503, f"{secured.name}: not running (failed: {refused}; waiting for its restart)\n")
        ),
        timeout_s=120,
    )
    failures = [
        line["message"]
        for line in map(json.loads, _json_lines(secured.daemon.log_text()))
        if line["message"].startswith(f"pipeline {secured.name} (joiner comap) failed")
    ]
    assert failures[0] == (
        f"pipeline {secured.name} (joiner comap) failed: {refused}; restarting in 1 s"
    )

    registry.registry.password = password
    secured.daemon.wait_until("the held-back tweet's view", lambda: 107 in secured.views())
    assert secured.views()[107]["tweet"] == tweet(7)  # read with the pipeline's reader schema
    assert read_topic(secured.conf, f"{secured.name}.dlq") == []  # held back, not dead
    restarts = secured.daemon.metric("enrichd_pipeline_restarts_total", pipeline=secured.name)
    assert restarts is not None and restarts >= 1
    secured.daemon.wait_until("ready again", lambda: secured.daemon.get("/readyz")[0] == 200)


def test_no_secret_is_in_the_log_metrics_readyz_or_validate(secured: Secured) -> None:
    for path in ("/metrics", "/readyz"):
        secured.assert_no_secret(secured.daemon.get(path)[1])
    secured.assert_no_secret(secured.daemon.log_text())
    done = daemon("validate", str(secured.path), "--check-topics", **secured.env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("ok: 1 pipeline: ")
    secured.assert_no_secret(done.stdout + done.stderr)


def test_sigterm_stops_it_with_exit_0_and_nothing_secret_logged(secured: Secured) -> None:
    secured.daemon.process.send_signal(signal.SIGTERM)
    assert secured.daemon.process.wait(STOP_TIMEOUT_S + 10) == 0
    secured.assert_no_secret(secured.daemon.log_text())


def _json_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith('{"time"')]
