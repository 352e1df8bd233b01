"""`daemon run` as an operator sees it: systemd notifications, /healthz, /readyz, /metrics,
JSON logs, and a second daemon on the same checkpoint refused.

One real `daemon run` process (the session's Tansu broker, local Spark) serves every test of
this module, started by a module fixture with ``$NOTIFY_SOCKET`` pointing at a unix datagram
socket the test reads, as systemd's would be. Its input is known exactly: 10 users, 100
tweets (one view each) and 3 tweets that are not Avro (3 dead letters). The tests run in file
order; the last one stops the daemon with SIGTERM.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from daemon.broker import EmbeddedBroker
from daemon.checkpoint.layout import COMMIT_LOG, log_folder
from daemon.model.config import load_pipeline_file
from tests.daemon_process import DaemonProcess
from tests.delivery.test_crash_recovery import Scenario, crash
from tests.kafka_helpers import In, read_topic

TWEETS = 100
BAD_TWEETS = 3
STOP_TIMEOUT_S = 20
# Spark reports an idle query every 10 s by default; here every 2 s, so that the stall
# timeout, which must be longer than that, can be short: the idle and held-back tests each
# wait it out (30 s each before).
IDLE_REPORT_INTERVAL = "2s"
STALL_TIMEOUT_S = 10


class SystemdSocket:
    """A unix datagram socket standing in for systemd's notification socket."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.messages: list[str] = []
        self._socket = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self._socket.bind(str(path))
        self._socket.settimeout(0.2)
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._receive, daemon=True)
        self._thread.start()

    def _receive(self) -> None:
        while not self._closed.is_set():
            try:
                self.messages.append(self._socket.recv(4096).decode())
            except TimeoutError:
                continue

    def close(self) -> None:
        self._closed.set()
        self._thread.join(2)
        self._socket.close()


class Service(DaemonProcess):
    """The running `daemon run` under test, its notification socket and its HTTP address."""

    def __init__(self, run: Scenario, tmp: Path) -> None:
        self.run = run
        self.user_topic = load_pipeline_file(run.path).pipeline[0].inputs["one"].topic
        self.systemd = SystemdSocket(tmp / "notify.sock")
        env = {
            "NOTIFY_SOCKET": str(self.systemd.path),
            "WATCHDOG_USEC": "2000000",  # a ping due every second
        }
        super().__init__(
            run.path,
            tmp / "daemon.log",
            "--log-format",
            "json",
            "--stop-timeout",
            str(STOP_TIMEOUT_S),
            "--stall-timeout",
            str(STALL_TIMEOUT_S),
            env=env,
        )


@pytest.fixture(scope="module")
def service(broker: EmbeddedBroker, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    import uuid

    tmp = tmp_path_factory.mktemp("observability")
    run = Scenario(broker, lambda stem: f"{stem}-{uuid.uuid4().hex[:10]}", tmp)
    spark = 'master = "local[2]"\n'
    interval = f'"spark.sql.streaming.noDataProgressEventInterval" = "{IDLE_REPORT_INTERVAL}"'
    run.path.write_text(run.path.read_text().replace(spark, f"{spark}conf = {{ {interval} }}\n", 1))
    run.produce_tweets(range(TWEETS))
    # Not Avro: the source cannot decode them, so they are dead letters (UndecodableRecord).
    from tests.kafka_helpers import produce

    produce(run.conf, run.tweet_topic, [In(b"\x01", b"bad") for _ in range(BAD_TWEETS)])
    running = Service(run, tmp)
    try:
        running.wait_until(
            "view of every tweet",
            lambda: len(run.views()) == TWEETS and running.process.poll() is None,
        )
        yield running
    finally:
        if running.process.poll() is None:
            crash(running.process)
        running.systemd.close()


def test_systemd_hears_ready_once_every_query_started_then_watchdog_pings(
    service: Service,
) -> None:
    service.wait_until(
        "second watchdog ping", lambda: service.systemd.messages.count("WATCHDOG=1") >= 2
    )
    messages = service.systemd.messages
    ready = next(i for i, m in enumerate(messages) if "READY=1" in m.splitlines())
    assert "STATUS=1 of 1 pipelines running" in messages[ready].splitlines()
    assert "WATCHDOG=1" not in messages[:ready]
    assert '"message": "ready: 1 of 1 pipelines running"' in service.log_text()


def test_healthz_answers_ok(service: Service) -> None:
    assert service.get("/healthz") == (200, "ok\n")


def test_readyz_is_ready_once_the_query_has_progressed(service: Service) -> None:
    service.wait_until("readiness", lambda: service.get("/readyz")[0] == 200)
    assert service.get("/readyz") == (200, f"{service.run.name}: progressing\n")


def test_metrics_count_records_in_out_and_dead_letters_of_committed_batches(
    service: Service,
) -> None:
    """Counts come from two reports that arrive in either order (the sink's after its commit,
    Spark's progress after the batch), so the test waits for the last batch's records in,
    then checks every count exactly."""
    name = service.run.name

    def records_in(role: str) -> float | None:
        return service.metric("enrichd_records_in_total", pipeline=name, input=role)

    service.wait_until(
        "the last batch counted",
        lambda: (records_in("one") or 0) + (records_in("many") or 0) == 10 + TWEETS + BAD_TWEETS,
    )
    assert records_in("one") == 10
    assert records_in("many") == TWEETS + BAD_TWEETS
    assert service.metric("enrichd_records_out_total", pipeline=name, output="output") == TWEETS
    reason = "UndecodableRecord"
    assert service.metric("enrichd_dead_letters_total", pipeline=name, reason=reason) == 3
    assert len(read_topic(service.run.conf, f"{name}.dlq")) == BAD_TWEETS
    assert service.metric("enrichd_late_records_total", pipeline=name) is None
    # Spark does not count the state's rows in enrichd's session (each write would read the
    # old value first), so the gauge is left unset rather than say 0.
    assert service.metric("enrichd_state_rows", pipeline=name) is None

    # What the joiner counted with ctx.count: each good tweet joined on arrival or waited.
    def joiner_events(event: str) -> float:
        return service.metric("enrichd_joiner_events_total", pipeline=name, event=event) or 0

    assert joiner_events("matched") + joiner_events("unmatched") == TWEETS
    assert service.metric("enrichd_pipeline_up", pipeline=name) == 1
    assert service.metric("enrichd_pipeline_failures_total", pipeline=name) == 0
    assert service.metric("enrichd_pipeline_restarts_total", pipeline=name) == 0
    batches = service.metric("enrichd_batches_total", pipeline=name)
    assert batches is not None and batches >= 3  # 113 records, at most 50 a batch
    assert service.metric("enrichd_batch_duration_seconds_count", pipeline=name) == batches
    # The later batches load the authors' buckets the first stored: each load is counted by
    # whether the worker's decoded copy served it (the counts rows carry it to the daemon).
    loads = [
        service.metric("enrichd_state_cache_loads_total", pipeline=name, outcome=outcome) or 0
        for outcome in ("hit", "miss")
    ]
    assert sum(loads) > 0


def test_metrics_carry_the_build_and_the_daemons_and_jvms_processes(service: Service) -> None:
    """enrichd_build_info, and CPU, memory and open files of the daemon's own process and of
    Spark's JVM (its child), each told apart by its start time."""
    from importlib import metadata

    import psutil

    build = service.metric(
        "enrichd_build_info",
        version=metadata.version("enrichd"),
        python_version=".".join(map(str, sys.version_info[:3])),
        pyspark_version=metadata.version("pyspark"),
    )
    assert build == 1
    daemon = psutil.Process(service.process.pid)
    (jvm,) = [p for p in daemon.children(recursive=True) if p.name() == "java"]
    for prefix, process in (("process", daemon), ("enrichd_jvm_process", jvm)):
        started = service.metric(f"{prefix}_start_time_seconds")
        assert started is not None and abs(started - process.create_time()) < 1, prefix
        assert (service.metric(f"{prefix}_cpu_seconds_total") or 0) > 0, prefix
        assert (service.metric(f"{prefix}_open_fds") or 0) > 3, prefix
        assert (service.metric(f"{prefix}_max_fds") or 0) > 0, prefix
    jvm_bytes = service.metric("enrichd_jvm_process_resident_memory_bytes") or 0
    assert jvm_bytes > 100 * 2**20  # Spark's JVM, not a stand-in
    assert (service.metric("process_resident_memory_bytes") or 0) > 20 * 2**20


def test_input_lag_per_partition_falls_to_0_once_everything_is_read(service: Service) -> None:
    """Lag is sampled every 10 s against the last batch's end, so it is waited for, not read
    once. Earlier samples may be above 0 (taken between batches); once every record is read
    both partitions of each input must read 0."""
    name = service.run.name

    def lags() -> list[float | None]:
        return [
            service.metric("enrichd_input_lag_records", pipeline=name, topic=topic, partition=p)
            for topic in (service.run.tweet_topic, service.user_topic)
            for p in ("0", "1")
        ]

    service.wait_until("lag 0 on every partition", lambda: lags() == [0, 0, 0, 0], timeout_s=60)


def test_the_pipelines_group_holds_where_its_inputs_were_read_to_for_lag_tools(
    service: Service,
) -> None:
    """What Burrow, kafka-lag-exporter, `kafka-consumer-groups` and KEDA read: the group
    `enrichd.<pipeline>` is listed, and its committed offsets reach each input partition's end
    once every record is read (the batches' ends, committed after each batch)."""
    from confluent_kafka import ConsumerGroupTopicPartitions
    from confluent_kafka.admin import AdminClient

    from daemon.replay import committed_ends
    from tests.kafka_helpers import groups_starting

    conf = service.run.conf
    group = f"enrichd.{service.run.name}"
    topics = (service.run.tweet_topic, service.user_topic)
    found = {name: end for topic in topics for name, end in committed_ends(conf, topic).items()}
    ends = {f"{topic}/{p}": found.get(f"{topic}/{p}", 0) for topic in topics for p in (0, 1)}
    assert sum(ends.values()) > TWEETS  # every record, the bad ones too

    def committed() -> dict[str, int]:
        client = AdminClient(conf)
        asked = [ConsumerGroupTopicPartitions(group)]
        (answer,) = client.list_consumer_group_offsets(asked, request_timeout=30).values()
        found = answer.result(timeout=30).topic_partitions
        return {f"{tp.topic}/{tp.partition}": tp.offset for tp in found if tp.offset >= 0}

    service.wait_until("the group at the inputs' ends", lambda: committed() == ends, timeout_s=120)
    assert group in groups_starting(conf, group)


def test_an_idle_query_stays_ready_on_sparks_idle_reports(service: Service) -> None:
    """With every record read, Spark sends an idle report now and then (every 2 s here, every
    10 s by default) and no batch: the last-progress time moves on while the batch count
    stays, and /readyz stays 200 past the last batch by more than the stall timeout."""
    name = service.run.name

    def last_progress() -> float:
        return service.metric("enrichd_last_progress_timestamp_seconds", pipeline=name) or 0.0

    service.wait_until(
        "all input read",
        lambda: (
            service.metric("enrichd_records_in_total", pipeline=name, input="many")
            == TWEETS + BAD_TWEETS
        ),
    )
    batches = service.metric("enrichd_batches_total", pipeline=name)
    last_batch_at = last_progress()
    service.wait_until(
        "idle reports for longer than the stall timeout",
        lambda: last_progress() > last_batch_at + STALL_TIMEOUT_S,
    )
    assert service.metric("enrichd_batches_total", pipeline=name) == batches
    assert service.get("/readyz") == (200, f"{name}: progressing\n")


def test_logs_are_json_lines_naming_the_pipeline(service: Service) -> None:
    """Every line the daemon printed is one of its own, as JSON: Spark's own output went to
    the file whose path the daemon logged once."""
    lines = [line for line in service.log_text().splitlines() if line.strip()]
    ours = [json.loads(line) for line in lines]  # each line is JSON
    (spark_log,) = [line for line in ours if line["message"].startswith("Spark's own log: ")]
    assert Path(spark_log["message"].split()[3]).stat().st_size > 0
    started = [
        line for line in ours if line["message"].startswith(f"pipeline {service.run.name} started")
    ]
    assert len(started) == 1
    assert started[0]["pipeline"] == service.run.name
    assert started[0]["level"] == "INFO"
    assert started[0]["logger"] == "enrichd.service"


def test_a_second_daemon_on_the_same_checkpoint_is_refused(service: Service) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "daemon", "run", str(service.run.path)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYSPARK_PYTHON": sys.executable},
    )
    checkpoint = service.run.checkpoint
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        f"error: pipeline {service.run.name!r}: checkpoint {checkpoint} is in use by another "
        f"daemon (pid {service.process.pid}, lock {checkpoint / 'enrichd.lock'}); stop that one "
        "first, or give this pipeline another checkpoint"
    ]
    assert service.process.poll() is None


def test_state_reads_the_running_daemons_checkpoint_and_reset_and_rescale_refuse_it(
    service: Service, spark: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """``daemon state`` beside the running daemon shows the last committed state (author 1
    and the ten tweets whose author is 1); ``daemon reset`` and ``daemon rescale`` are refused
    with one line while the daemon holds the checkpoint, and change nothing."""
    from tests.state_helpers import daemon, listing, one_error_line

    path, checkpoint = str(service.run.path), service.run.checkpoint
    before = listing(log_folder(checkpoint, COMMIT_LOG))
    done = daemon(capsys, "state", path, "--key", "1")
    assert done.code == 0, done.err
    shown = json.loads(done.out)
    assert shown["state"]["one"]["id"] == 1
    assert sorted(shown["state"]["many"], key=int) == [str(i) for i in range(0, TWEETS, 10)]
    for command in (["reset", path, "--to", "earliest", "--yes"], ["rescale", path, "--yes"]):
        line = one_error_line(daemon(capsys, *command))
        assert f"checkpoint {checkpoint} is in use by another daemon" in line, line
    assert set(before) <= set(listing(log_folder(checkpoint, COMMIT_LOG)))
    assert not list(service.run.folder.glob("checkpoint.before-*"))
    assert service.process.poll() is None


def test_end_to_end_latency_and_event_time_lag_on_metrics(service: Service) -> None:
    """Every view is in the latency histogram, measured from its tweet's Kafka timestamp:
    the fixture's tweets are stamped 10 s after the epoch, so each took decades (the +Inf
    bucket). One tweet stamped now then lands in a finite bucket, and the event-time lag of
    the tweets input drops from decades to the time since it."""
    import time

    from tests.delivery.test_crash_recovery import TWEETS as TWEET_CODEC

    name = service.run.name
    labels = {"pipeline": name, "output": "output"}
    histogram = "enrichd_end_to_end_latency_seconds"

    def count() -> float:
        return service.metric(f"{histogram}_count", **labels) or 0

    service.wait_until("every view's latency", lambda: count() == TWEETS)
    assert service.metric(f"{histogram}_bucket", **labels, le="3600.0") == 0
    total = service.metric(f"{histogram}_sum", **labels)
    assert total is not None and total / TWEETS > 50 * 365 * 86400
    lag = "enrichd_event_time_lag_seconds"
    assert (service.metric(lag, pipeline=name, input="one") or 0) > 50 * 365 * 86400

    now_ms = int(time.time() * 1000)
    from tests.kafka_helpers import produce

    # User 1 is in the state since the fixture's start: the new tweet is viewed at once.
    produce(
        service.run.conf,
        service.run.tweet_topic,
        [In(TWEET_CODEC.encode({"id": 999, "author_id": 1, "content": "now"}), b"999", now_ms)],
    )
    service.wait_until("the new view's latency", lambda: count() == TWEETS + 1)
    assert service.metric(f"{histogram}_bucket", **labels, le="3600.0") == 1
    many = service.metric(lag, pipeline=name, input="many")
    assert many is not None and many < 3600


def test_output_held_back_from_read_committed_readers_makes_it_not_ready(
    service: Service,
) -> None:
    """Another writer's transaction left open on the dead-letter topic holds every later
    commit there back from read_committed readers, while the daemon's batches succeed:
    /readyz and the log say so once that lasts the stall timeout, and the daemon is ready
    again when the transaction ends."""
    from confluent_kafka import Producer

    from tests.kafka_helpers import produce

    name = service.run.name
    dead_letters = load_pipeline_file(service.run.path).pipeline[0].dead_letters
    blocker = Producer(
        {
            **service.run.conf,
            "transactional.id": f"blocker-{name}",
            "transaction.timeout.ms": 600_000,
        }
    )
    blocker.init_transactions(30)
    blocker.begin_transaction()
    blocker.produce(dead_letters, b"held open", partition=0)
    assert blocker.flush(30) == 0

    def readiness() -> tuple[int, str]:
        # A tweet that is not Avro: a dead letter, committed behind the open transaction.
        produce(service.run.conf, service.run.tweet_topic, [In(b"\x01", b"bad")])
        return service.get("/readyz")

    def held_back() -> bool:
        status, text = readiness()
        return status == 503 and f"{name}: output {dead_letters}/0 held back" in text

    try:
        service.wait_until("/readyz saying the output is held back", held_back, timeout_s=180)
    finally:
        blocker.commit_transaction(30)
    assert f"pipeline {name}: output {dead_letters}/0 held back" in service.log_text()
    service.wait_until("ready again", lambda: readiness()[0] == 200, timeout_s=90)
    assert f"pipeline {name}: its output is visible again" in service.log_text()


def test_sigterm_tells_systemd_stopping_and_exits_0(service: Service) -> None:
    service.process.send_signal(signal.SIGTERM)
    assert service.process.wait(STOP_TIMEOUT_S + 10) == 0
    messages = service.systemd.messages
    stopping = [i for i, m in enumerate(messages) if "STOPPING=1" in m.splitlines()]
    assert len(stopping) == 1
    assert "WATCHDOG=1" not in messages[stopping[0] :]
