"""A `daemon run` whose pipeline hangs, as Kubernetes and a log collector see it.

One real `daemon run` process (the session's broker, local Spark) on a file of two
pipelines, both run by a joiner plugin installed the way a user's is (an entry point in a
folder on ``PYTHONPATH``: tests/fixtures/stalling_plugin.py):

- ``hanging`` starts first, and its first micro-batch never ends: a tweet makes its joiner
  block in the Spark task. A real hang, not a mock: Spark reports nothing on the query.
- ``steady`` waits its turn (the next pipeline starts once the one before progressed, or
  after 30 s), then runs; its first micro-batch fails once in a Spark task (an error that no
  joiner call is caught for), is restarted, and goes through.

Checked: ``/readyz`` says ``steady`` is waiting its turn, not failed, and always names
both queries; ``/livez`` turns 503 naming ``hanging`` once it has been stalled for the
stall timeout, while ``/healthz`` still answers; with ``ENRICHD_SPARK_LOG=log`` (the image's
setting) and ``--log-format json``, everything the process writes, Spark's log included
(its multi-line stack trace of the failed task as one record), is JSON lines on one stream.
SIGTERM still ends it with exit 0 within the stop timeout.
"""

from __future__ import annotations

import dataclasses
import json
import signal
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from daemon.broker import EmbeddedBroker
from tests.daemon_process import DaemonProcess
from tests.delivery.test_crash_recovery import crash
from tests.fixtures.stalling_plugin import FAIL_ONCE, FAILED_ONCE, install
from tests.kafka_helpers import (
    COMAP_HEADER,
    client_conf,
    fresh_tweet_views,
    produce,
    read_topic,
    tweet,
    user,
)

STALL_TIMEOUT_S = 20
STOP_TIMEOUT_S = 10
TWEETS = 10
WAITING = "steady: waiting its turn to start (a file's pipelines start one by one)"


@dataclass
class HungRun:
    """What the run showed, in the order it happened."""

    waiting: tuple[int, str]
    liveness: list[int]
    not_live: tuple[int, str]
    health_meanwhile: tuple[int, str]
    steady_ready: tuple[int, str]
    views: int
    exit_code: int
    stdout: str
    stderr: str


def pipeline_file(folder: Path, servers: str) -> tuple[Path, dict[str, str]]:
    """Two stalling-comap pipelines on topics of their own, and their output topics."""
    text, outputs = COMAP_HEADER.format(servers=servers, kafka_settings="", spark_conf=""), {}
    for name, said in (("hanging", "hang"), ("steady", "fail once")):

        def fresh(stem: str, name: str = name) -> str:
            return f"{name}-{stem}-{uuid.uuid4().hex[:8]}"

        views = dataclasses.replace(fresh_tweet_views(servers, fresh, folder / name), name=name)
        produce(views.conf, views.users, [user(1, "ada", 1_000)])
        tweets = [tweet(n, 1, said if n == 0 else f"tweet {n}") for n in range(TWEETS)]
        produce(views.conf, views.tweets, tweets)
        outputs[name] = views.output
        text += "\n" + views.pipeline(joiner="stalling-comap")
    path = folder / "pipelines.toml"
    path.write_text(text, encoding="utf-8")
    return path, outputs


def poll(what: str, check: Any, daemon: DaemonProcess, timeout_s: float = 300) -> Any:
    """Call ``check`` every 0.25 s until it returns something; fail past the timeout."""
    deadline = time.monotonic() + timeout_s
    while True:
        found = check()
        if found:
            return found
        assert daemon.process.poll() is None, f"daemon run exited:\n{daemon.log_text()[-3000:]}"
        assert time.monotonic() < deadline, f"no {what}:\n{daemon.log_text()[-3000:]}"
        time.sleep(0.25)


@pytest.fixture(scope="module")
def hung(broker: EmbeddedBroker, tmp_path_factory: pytest.TempPathFactory) -> Iterator[HungRun]:
    tmp = tmp_path_factory.mktemp("hung")
    plugins = install(tmp / "plugins")
    path, outputs = pipeline_file(tmp, broker.bootstrap_servers)
    flag = tmp / "fail-once.flag"
    flag.write_text("")
    env = {
        "ENRICHD_SPARK_LOG": "log",
        FAIL_ONCE: str(flag),
        # The plugin's entry point and its module, for the daemon and Spark's Python workers.
        "PYTHONPATH": str(plugins),
    }
    stdout = tmp / "stdout.log"
    with stdout.open("wb") as out:
        daemon = DaemonProcess(
            path,
            tmp / "stderr.log",
            "--log-format", "json",
            "--stall-timeout", str(STALL_TIMEOUT_S),
            "--stop-timeout", str(STOP_TIMEOUT_S),
            env=env,
            stdout=out,
        )  # fmt: skip
    try:
        liveness: list[int] = []

        def probe(path: str) -> tuple[int, str]:
            try:
                return daemon.get(path)
            except OSError:  # not serving yet
                return 0, ""

        def waiting() -> tuple[int, str] | None:
            liveness.append(probe("/livez")[0])
            found = probe("/readyz")
            return found if WAITING in found[1] else None

        seen_waiting = poll("/readyz saying steady waits its turn", waiting, daemon)

        def not_live() -> tuple[tuple[int, str], tuple[int, str]] | None:
            found = probe("/livez")
            liveness.append(found[0])
            return (found, probe("/healthz")) if found[0] == 503 else None

        seen_not_live, health = poll("/livez failing", not_live, daemon)
        conf = client_conf(broker.bootstrap_servers)

        def steady() -> tuple[int, str] | None:
            found = probe("/readyz")
            views = len(read_topic(conf, outputs["steady"]))
            return found if "steady: progressing" in found[1] and views >= TWEETS else None

        seen_steady = poll("steady's views", steady, daemon)
        views = len(read_topic(conf, outputs["steady"]))
        daemon.process.send_signal(signal.SIGTERM)
        exit_code = daemon.process.wait(STOP_TIMEOUT_S + 30)
        yield HungRun(
            seen_waiting, liveness, seen_not_live, health, seen_steady, views, exit_code,
            stdout.read_text(encoding="utf-8"), daemon.log_text(),
        )  # fmt: skip
    finally:
        if daemon.process.poll() is None:
            crash(daemon.process)


def test_a_pipeline_waiting_its_turn_says_so_and_every_query_is_named(hung: HungRun) -> None:
    status, body = hung.waiting
    assert status == 503
    assert body == f"hanging: started; no micro-batch or idle report yet\n{WAITING}\n"


def test_livez_fails_once_a_pipeline_has_hung_past_the_stall_timeout(hung: HungRun) -> None:
    """Live first (before Spark, and while the hang is younger than the stall timeout), then
    503 naming the hung pipeline, while /healthz, which only says the process answers, is
    still 200: the kubelet's liveness probe on /livez restarts the pod."""
    answers = [status for status in hung.liveness if status]  # 0: not serving yet
    assert answers[0] == 200
    assert answers[-1] == 503 and 200 not in answers[answers.index(503) :]
    status, body = hung.not_live
    assert status == 503
    (line,) = body.splitlines()
    assert line.startswith("hanging: stalled: no progress report for ")
    assert line.endswith(f" s (--stall-timeout {STALL_TIMEOUT_S} s)")
    assert hung.health_meanwhile == (200, "ok\n")


def test_readyz_names_the_ready_query_beside_the_hung_one(hung: HungRun) -> None:
    assert hung.steady_ready == (
        503,
        "hanging: started; no micro-batch or idle report yet\nsteady: progressing\n",
    )
    assert hung.views == TWEETS


def test_sparks_log_and_the_daemons_are_one_stream_of_json_lines(hung: HungRun) -> None:
    """Nothing on stdout; every line of stderr is a JSON object, Spark's events included,
    and the failed task's stack trace (many lines in Spark's own log) is inside one."""
    assert hung.stdout == ""
    lines = hung.stderr.splitlines()
    records = [json.loads(line) for line in lines]
    assert all(isinstance(record, dict) for record in records)
    assert {"time", "level", "logger", "message"} <= set().union(*records)
    spark = [r for r in records if str(r["logger"]).startswith("org.apache.spark")]
    failed = [
        r
        for r in spark
        if r["level"] == "ERROR" and FAILED_ONCE in r.get("error", "")
    ]
    assert failed, [r["message"] for r in spark]
    trace = failed[0]["error"]
    assert "\n\tat org.apache.spark." in trace  # the JVM's frames, in the same record
    assert "Traceback (most recent call last):" in trace  # and the Python worker's
    service = [r for r in records if r["logger"] == "enrichd.service"]
    assert any(
        r["message"].startswith("pipeline steady (joiner stalling-comap of plugin stalling)")
        for r in service
    ), [r["message"] for r in service]


def test_sigterm_ends_it_with_exit_0_within_the_stop_timeout(hung: HungRun) -> None:
    """Even with a micro-batch that never ends: it is interrupted (it runs again from the
    checkpoint at the next start), or the process exits 0 at the stop timeout."""
    assert hung.exit_code == 0
    messages = [json.loads(line)["message"] for line in hung.stderr.splitlines()]
    assert "stopped" in messages or (
        "stop timeout reached; exiting without waiting for Spark" in messages
    )
