"""`daemon run`: start-up errors end it with one line and exit 1; failed queries restart."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from daemon.broker import EmbeddedBroker
from daemon.checkpoint.layout import OFFSET_LOG, log_folder
from daemon.service import supervisor as service
from daemon.service.supervisor import Supervised, restart_delay
from daemon.signals import StopRequest
from tests.daemon_process import daemon_run
from tests.ports import free_port

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
EXAMPLE = FIXTURES / "pipelines" / "tweet_views.toml"


def example_against(folder: Path, servers: str) -> Path:
    """The example pipeline file, copied into ``folder``, pointing at ``servers``."""
    text = EXAMPLE.read_text(encoding="utf-8").replace("../../../schemas", "schemas")
    path = folder / "pipeline.toml"
    path.write_text(f'[kafka]\nbootstrap_servers = "{servers}"\n\n{text}')
    (folder / "schemas").symlink_to(FIXTURES.parent.parent / "schemas")
    return path


def with_fresh_topics(path: Path, broker: EmbeddedBroker, *topics: str) -> str:
    """Give the file's topics names of this test alone, create them; the file's new text."""
    from tests.kafka_helpers import create_topic

    text = path.read_text()
    for topic in topics:
        fresh = f"{topic}-{uuid.uuid4().hex[:8]}"
        text = text.replace(f'topic = "{topic}"', f'topic = "{fresh}"')
        create_topic({"bootstrap.servers": broker.bootstrap_servers}, fresh)
    path.write_text(text)
    return text


def test_run_without_bootstrap_servers_is_a_one_line_error() -> None:
    done = daemon_run(EXAMPLE)
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        f"error: {EXAMPLE}: [kafka] bootstrap_servers is not set; set it, or use "
        "`daemon replay`/`daemon demo`, which start the embedded broker"
    ]


def test_run_with_json_logs_gives_its_error_as_one_json_line(tmp_path: Path) -> None:
    """What a container's log shows (the image logs JSON): one line a log shipper can parse."""
    missing = tmp_path / "pipelines.toml"
    done = subprocess.run(
        [sys.executable, "-m", "daemon", "run", str(missing), "--log-format", "json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1
    (line,) = done.stderr.strip().splitlines()
    record = json.loads(line)
    assert (record["level"], record["logger"]) == ("ERROR", "enrichd")
    assert record["message"] == f"{missing}: no such file"


def test_run_with_a_missing_input_topic_is_a_one_line_error(
    broker: EmbeddedBroker, tmp_path: Path
) -> None:
    path = example_against(tmp_path, broker.bootstrap_servers)
    done = daemon_run(path)
    assert done.returncode == 1
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("error: pipeline 'tweet-views': input 'one' topic 'users'")


def test_run_on_a_checkpoint_of_another_pipeline_shape_is_a_one_line_error(
    broker: EmbeddedBroker, tmp_path: Path
) -> None:
    from daemon.model.config import load_pipeline_file
    from daemon.pipeline.checkpoint_shape import check_checkpoint

    path = example_against(tmp_path, broker.bootstrap_servers)
    with_fresh_topics(path, broker, "users", "tweets")
    (pipe,) = load_pipeline_file(path).pipeline
    check_checkpoint(pipe)  # as the first run of this pipeline left it, after a batch:
    log_folder(pipe.checkpoint, OFFSET_LOG).mkdir()
    (log_folder(pipe.checkpoint, OFFSET_LOG) / "0").write_text("v1\n")
    users = pipe.inputs["one"].topic
    with_fresh_topics(path, broker, users)
    people = load_pipeline_file(path).pipeline[0].inputs["one"].topic
    done = daemon_run(path)
    assert done.returncode == 1
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith(f"error: pipeline 'tweet-views': checkpoint {pipe.checkpoint} was")
    assert f"input 'one' topic {users!r} is now {people!r}" in line


def test_a_start_refused_for_a_typo_leaves_the_checkpoint_to_the_fixed_pipeline(
    broker: EmbeddedBroker, tmp_path: Path
) -> None:
    """A joiner name with a typo is refused with one line and leaves no shape in the
    checkpoint; the fixed file then starts on the same checkpoint."""
    import urllib.error

    from daemon.checkpoint.layout import shape_file
    from daemon.model.config import load_pipeline_file
    from tests.daemon_process import DaemonProcess

    path = example_against(tmp_path, broker.bootstrap_servers)
    fixed = with_fresh_topics(path, broker, "users", "tweets", "tweet-views")
    (pipe,) = load_pipeline_file(path).pipeline
    path.write_text(fixed.replace('joiner = "comap"', 'joiner = "comapp"'))

    done = daemon_run(path)

    assert done.returncode == 1
    (line,) = done.stderr.strip().splitlines()
    assert "unknown joiner 'comapp'" in line, line
    assert not shape_file(pipe.checkpoint).exists()

    path.write_text(fixed)
    service = DaemonProcess(path, tmp_path / "daemon.log", env={})

    def ready() -> bool:
        try:
            return service.get("/readyz")[0] == 200
        except urllib.error.URLError:  # not serving yet
            return False

    try:
        service.wait_until("/readyz", ready, timeout_s=180)
        assert '"joiner": "comap"' in shape_file(pipe.checkpoint).read_text()
    finally:
        service.process.send_signal(signal.SIGTERM)
        assert service.process.wait(60) == 0, service.log_text()[-2000:]


def test_run_retries_an_unreachable_broker_with_backoff_until_stopped(tmp_path: Path) -> None:
    """One JSON line per failed try, the next 1 s, 2 s... later; SIGTERM while waiting: exit 0."""
    port = free_port()
    path = example_against(tmp_path, f"127.0.0.1:{port}")
    daemon = subprocess.Popen(
        [sys.executable, "-m", "daemon", "run", str(path), "--log-format", "json"],
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYSPARK_PYTHON": sys.executable},
    )
    assert daemon.stderr is not None
    try:
        retries = []
        for line in daemon.stderr:  # each try waits up to 10 s for metadata
            message = json.loads(line)["message"]
            if "retrying in" in message:
                retries.append(message)
            if len(retries) == 2:
                break
        daemon.send_signal(signal.SIGTERM)
        rest = [json.loads(line)["message"] for line in daemon.stderr]
        assert daemon.wait(timeout=60) == 0
    finally:
        daemon.kill()
    first, second = retries
    assert first.startswith(f"cannot reach Kafka at '127.0.0.1:{port}'")
    assert "check [kafka] bootstrap_servers and that the broker is running" in first
    assert first.endswith("; retrying in 1 s") and second.endswith("; retrying in 2 s")
    assert rest[-1] == "stopped before any pipeline started"


def test_planning_waits_for_the_broker_and_goes_on_once_it_answers(tmp_path: Path) -> None:
    """The broker starts only after the first try failed: the next try plans the pipeline."""
    import threading

    from daemon.kafka.admin import create_topics
    from daemon.model.config import load_pipeline_file
    from daemon.pipeline.plan import client_conf

    port = free_port()
    file = load_pipeline_file(example_against(tmp_path, f"127.0.0.1:{port}"))
    (pipe,) = file.pipeline
    conf = client_conf(file)
    waits: list[str] = []

    class Waiting:
        def waiting(self, why: str, for_s: float) -> None:
            waits.append(why)

    planned: list[Any] = []
    planner = threading.Thread(
        target=lambda: planned.append(
            service._plan_when_kafka_answers(file, conf, StopRequest(), Waiting())  # type: ignore[arg-type]
        )
    )
    planner.start()
    try:
        while not waits:
            assert planner.is_alive()
            time.sleep(0.1)
        with EmbeddedBroker(port):
            create_topics(conf, {spec.topic: 1 for spec in pipe.inputs.values()})
            planner.join(timeout=60)
    finally:
        planner.join(timeout=60)
    (plans,) = planned
    assert [plan.config.name for plan in plans] == ["tweet-views"]
    # Usually one: the next try's client reconnects while the broker comes up.
    assert waits[0] == "waiting for Kafka: try 1 failed, the next in 1 s"


def test_restart_delay_doubles_from_1s_to_60s() -> None:
    assert [restart_delay(n) for n in range(1, 9)] == [1, 2, 4, 8, 16, 32, 60, 60]


class FakeQuery:
    """What the supervisor reads of a streaming query."""

    def __init__(self, error: str | None = None, progress: Any = None) -> None:
        self.isActive = error is None
        self.error = error
        self.lastProgress = progress

    def exception(self) -> str | None:
        return self.error


def test_a_failed_query_is_logged_and_restarted_with_backoff(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    started: list[FakeQuery] = []
    outcomes = iter([FakeQuery("boom again"), FakeQuery(progress=object())])

    def start_query(spark: Any, plan: Any) -> FakeQuery:
        started.append(next(outcomes))
        return started[-1]

    monkeypatch.setattr(service, "start_query", start_query)
    pipeline = SimpleNamespace(name="views", joiner="comap", checkpoint=Path("state/views"))
    plan: Any = SimpleNamespace(config=pipeline, operator=SimpleNamespace(plugin="comap"))
    pipe = Supervised(plan, query=FakeQuery("boom\nat line 3"))
    with caplog.at_level(logging.ERROR, logger="enrichd.service"):
        pipe.check(None, now=100.0)  # type: ignore[arg-type]
        assert pipe.restart_at == 101.0
        pipe.check(None, now=100.5)  # type: ignore[arg-type]
        assert not started
        pipe.check(None, now=101.0)  # type: ignore[arg-type]  # restart 1, fails again
        pipe.check(None, now=101.5)  # type: ignore[arg-type]
        assert pipe.restart_at == 103.5  # second failure in a row: 2 s
        pipe.check(None, now=103.5)  # type: ignore[arg-type]  # restart 2, runs
        pipe.check(None, now=104.0)  # type: ignore[arg-type]
    assert (pipe.restarts, pipe.failures_in_row, pipe.restart_at) == (2, 0, None)
    assert [r.getMessage() for r in caplog.records] == [
        "pipeline views (joiner comap) failed: boom; restarting in 1 s",
        "pipeline views (joiner comap) failed: boom again; restarting in 2 s",
    ]


class JavaError(Exception):
    """What Py4J raises for a JVM exception: its text names only the call that failed."""

    def __init__(self, java_text: str) -> None:
        super().__init__("An error occurred while calling o131.start.")
        self.java_exception = SimpleNamespace(toString=lambda: java_text)


def test_a_query_that_cannot_start_is_logged_with_the_jvm_error(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def start_query(spark: Any, plan: Any) -> None:
        raise JavaError("org.apache.spark.SparkClassNotFoundException: [DATA_SOURCE_NOT_FOUND] x")

    monkeypatch.setattr(service, "start_query", start_query)
    pipeline = SimpleNamespace(name="views", joiner="comap", checkpoint=Path("state/views"))
    plan: Any = SimpleNamespace(config=pipeline, operator=SimpleNamespace(plugin="comap"))
    pipe = Supervised(plan)
    with caplog.at_level(logging.ERROR, logger="enrichd.service"):
        pipe.start(None, "started", now=10.0)  # type: ignore[arg-type]
    assert pipe.restart_at == 11.0
    assert [r.getMessage() for r in caplog.records] == [
        "pipeline views (joiner comap) failed: could not start: "
        "org.apache.spark.SparkClassNotFoundException: [DATA_SOURCE_NOT_FOUND] x; "
        "restarting in 1 s"
    ]


EMBEDDING = """\
import sys, threading, time
from pathlib import Path

from daemon.checkpoint.layout import COMMIT_LOG, log_folder
from daemon.model.config import load_pipeline_file
from daemon.service.supervisor import run_service


def serve(path: str) -> None:
    file = load_pipeline_file(Path(path))
    commits = log_folder(file.pipeline[0].checkpoint, COMMIT_LOG)
    stop = threading.Event()
    service = threading.Thread(  # a daemon thread: a failed assertion ends the script at once
        target=run_service, args=(file,), kwargs={"stop": stop, "stop_timeout_s": 2.0}, daemon=True
    )
    service.start()
    deadline = time.monotonic() + 300  # a bound on a hang: a JVM's start and a first batch
    while not (commits / "0").exists():
        assert service.is_alive() and time.monotonic() < deadline, "no micro-batch committed"
        time.sleep(0.2)
    stop.set()
    service.join(60)
    assert not service.is_alive(), "the service did not stop"
    time.sleep(3)  # past the stop timeout, where `daemon run` exits by force
    print(f"{path}: running 3 s past the stop timeout", flush=True)


serve(sys.argv[1])  # the service starts the Spark session, and stops it
# A program that uses Spark itself starts the session first (on the JVM the first one left).
from daemon.spark.session import spark_session

spark_session(load_pipeline_file(Path(sys.argv[2])).spark)
serve(sys.argv[2])
"""


def test_a_service_in_a_thread_runs_its_pipeline_and_stops_without_ending_the_process(
    broker: EmbeddedBroker, fresh_topic: Any, tmp_path: Path
) -> None:
    """Embedded in a thread, whether it starts the Spark session or the program did: one
    program does both in turn (its second session is on the JVM the first start left, which
    spares the suite a JVM's start)."""
    from tests.delivery.test_crash_recovery import Scenario

    runs = []
    for owner in ("service", "caller"):
        (tmp_path / owner).mkdir()
        run = Scenario(broker, fresh_topic, tmp_path / owner)
        run.produce_tweets(range(3))
        runs.append(run)
    done = subprocess.run(
        [sys.executable, "-c", EMBEDDING, *(str(run.path) for run in runs)],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PYSPARK_PYTHON": sys.executable},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.splitlines()[-2:] == [
        f"{run.path}: running 3 s past the stop timeout" for run in runs
    ]
    for run in runs:
        assert run.views() == {0: 1, 1: 1, 2: 1}
