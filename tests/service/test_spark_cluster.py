"""The same pipeline file on a Spark standalone cluster: a real master and worker on loopback.

The master and worker are the installed pyspark's own (`spark-class`). The replay runs in a
subprocess because this test session may already hold a local Spark session, and a JVM's
master cannot change in-process. Only `[spark] master` and `[kafka] bootstrap_servers` of
the example file change, and the settings that secure Spark's own network, as
docs/operations.md says to set them: RPC authentication and encryption, the shared secret
from the environment (the master's and worker's from a properties file). The cluster starts
once for the module: the same master and worker then run a continuous pipeline of two
leases with `daemon run`.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyspark
import pytest

from daemon.checkpoint.batch_logs import last_committed, planned_past_commit
from daemon.continuous.lease_source import LongBatches
from daemon.demos import latest_by_key
from daemon.state.leases import LeaseState
from tests.daemon_process import DaemonProcess
from tests.kafka_helpers import TweetViews, produce, tweet, user
from tests.ports import free_port

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "tweet-views.toml"
SPARK_HOME = Path(pyspark.__file__).resolve().parent
# Start-up guards, not measurements: a loaded 2-core machine starts a JVM in 5-15 s, a CI
# run's crash-recovery fixture once took 47 s to its query's start (docs/contributing.md).
START_TIMEOUT_S = 300.0
REPLAY_TIMEOUT_S = 600.0


@dataclass
class Cluster:
    url: str
    ui_port: int
    master_log: Path
    worker_log: Path
    work_dir: Path

    def status(self) -> dict[str, Any]:
        """The master's JSON view of workers and applications."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.ui_port}/json/", timeout=10) as r:
            return dict(json.load(r))

    def app_ids(self) -> set[str]:
        """Every application the master has seen, running or completed."""
        status = self.status()
        return {app["id"] for app in [*status["activeapps"], *status["completedapps"]]}

    def finished_apps(self, seen: set[str]) -> list[dict[str, Any]]:
        """The completed applications but those in ``seen`` (another test's), once the
        master has seen the last one go."""
        deadline = time.monotonic() + START_TIMEOUT_S
        status = self.status()
        while status["activeapps"] and time.monotonic() < deadline:
            time.sleep(0.5)
            status = self.status()
        return [app for app in status["completedapps"] if app["id"] not in seen]


def _start(args: list[str], log: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        # Its own process group, so stopping it also stops the JVMs it starts (executors).
        return subprocess.Popen(
            [str(SPARK_HOME / "bin" / "spark-class"), *args],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )


def _stop(process: subprocess.Popen[bytes]) -> None:
    for sig, grace in ((signal.SIGTERM, 15.0), (signal.SIGKILL, 15.0)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(timeout=grace)
            return
        except subprocess.TimeoutExpired:
            continue


def _wait_for_line(log: Path, text: str, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while text not in log.read_text(errors="replace"):
        if process.poll() is not None or time.monotonic() > deadline:
            pytest.fail(f"{log.name} never said {text!r}:\n{log.read_text(errors='replace')}")
        time.sleep(0.2)


SECURED = {"spark.authenticate": "true", "spark.network.crypto.enabled": "true"}
"""Spark's RPC authentication and encryption, on the cluster and in the pipeline file."""


@pytest.fixture(scope="module")
def rpc_secret() -> str:
    """The cluster's shared secret, made for this module's cluster."""
    return f"rpc-secret-{uuid.uuid4().hex}"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, rpc_secret: str) -> Iterator[Cluster]:
    """A standalone master and one worker (4 cores, 1 GiB), both bound to 127.0.0.1, that
    accept only applications that know ``rpc_secret`` and encrypt their traffic.

    Shared by the module's tests: its JVMs start once. Cores are task slots, not the
    machine's: four leave a continuous pipeline's two leases a slot each for their whole
    long batches, and slots beside them.
    """
    tmp_path = tmp_path_factory.mktemp("spark-cluster")
    port, ui_port, worker_ui_port = free_port(), free_port(), free_port()
    # The daemons' secret from a file of their user's, not their command line (docs).
    properties = tmp_path / "spark-cluster.properties"
    settings = {**SECURED, "spark.authenticate.secret": rpc_secret}
    properties.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
    properties.chmod(0o600)
    env = {
        **os.environ,
        # The installed pyspark is the Spark distribution, whatever SPARK_HOME said before.
        "SPARK_HOME": str(SPARK_HOME),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_LOCAL_DIRS": str(tmp_path / "spark-local"),
        # The REST submission server's fixed port 6066 would clash between parallel runs.
        "SPARK_MASTER_OPTS": "-Dspark.master.rest.enabled=false",
    }
    found = Cluster(
        url=f"spark://127.0.0.1:{port}",
        ui_port=ui_port,
        master_log=tmp_path / "master.log",
        worker_log=tmp_path / "worker.log",
        work_dir=tmp_path / "worker-work",
    )
    started: list[subprocess.Popen[bytes]] = []
    try:
        master = _start(
            [
                "org.apache.spark.deploy.master.Master",
                *("--host", "127.0.0.1", "--port", str(port), "--webui-port", str(ui_port)),
                *("--properties-file", str(properties)),
            ],
            found.master_log,
            env,
        )
        started.append(master)
        # The worker gives up on a master that is not there yet only after long retries.
        _wait_for_line(found.master_log, "New state: ALIVE", master)
        worker = _start(
            [
                "org.apache.spark.deploy.worker.Worker",
                found.url,
                *("--host", "127.0.0.1", "--cores", "4", "--memory", "1g"),
                *("--webui-port", str(worker_ui_port), "--work-dir", str(found.work_dir)),
                *("--properties-file", str(properties)),
            ],
            found.worker_log,
            env,
        )
        started.append(worker)
        _wait_for_line(found.master_log, "Registering worker 127.0.0.1:", master)
        yield found
    finally:
        for process in reversed(started):
            _stop(process)


def write_jsonl(path: Path, lines: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    return path


def cluster_pipeline_file(tmp: Path, master: str, bootstrap_servers: str) -> Path:
    """The example pipeline file, with only the broker and the Spark master changed."""
    text = EXAMPLE.read_text(encoding="utf-8")
    local = '[spark]\nmaster = "local[2]"\n'
    assert text.count(local) == 1, "the example's [spark] section changed; update this test"
    secured = "".join(f'"{key}" = "{value}"\n' for key, value in SECURED.items())
    text = text.replace(
        local,
        f'[kafka]\nbootstrap_servers = "{bootstrap_servers}"\n\n[spark]\nmaster = "{master}"\n'
        f'\n[spark.conf]\n{secured}"spark.authenticate.secret" = "${{SPARK_RPC_SECRET}}"\n'
        # A secret for something else, which PySpark alone would put on the command line.
        f'"spark.hadoop.fs.s3a.secret.key" = "${{S3_SECRET}}"\n\n',
    )
    # The copy lives elsewhere: its schema paths point back at the project's schemas.
    text = text.replace('"../schemas/', f'"{ROOT / "schemas"}/')
    path = tmp / "tweet-views-cluster.toml"
    path.write_text(text, encoding="utf-8")
    return path


USERS = [
    {"id": 1, "name": "ada", "avatar": None, "updated_at": 1},
    {"id": 2, "name": "bob", "avatar": "b.png", "updated_at": 2},
    {"id": 1, "name": "ada lovelace", "avatar": "a.png", "updated_at": 3},
    {"id": 4, "name": "cyd", "avatar": None, "updated_at": 4},
]
# author 3 never appears; cyd (4) arrives after her tweet; ada is renamed between her tweets.
TWEETS = [
    {"id": 100 + i, "author_id": author, "content": f"tweet {i}"}
    for i, author in enumerate([1, 2, 4, 1, 3, 2, 1])
]
# The order records arrive in: True takes the next user, False the next tweet.
ARRIVAL = [True, False, True, False, False, True, False, False, True, False, False]


def recorded_inputs() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    users, tweets = iter(USERS), iter(TWEETS)
    user_lines, tweet_lines = [], []
    for t, is_user in enumerate(ARRIVAL, start=1):
        if is_user:
            user = next(users)
            user_lines.append({"key": user["id"], "value": user, "timestamp": t})
        else:
            tweet = next(tweets)
            tweet_lines.append({"key": tweet["id"], "value": tweet, "timestamp": t})
    return user_lines, tweet_lines


def batch_join(users: list[dict[str, Any]], tweets: list[dict[str, Any]]) -> dict[str, Any]:
    """Each tweet with the final version of its author, if the author is known."""
    final = {u["value"]["id"]: u["value"] for u in users}
    return {
        str(t["value"]["id"]): {
            "id": t["value"]["id"],
            "tweet": t["value"],
            "author": final[t["value"]["author_id"]],
        }
        for t in tweets
        if t["value"]["author_id"] in final
    }


class CommandLines:
    """Every process's command line, read from /proc every half second in a thread.

    Every line a pid ever showed is kept: pids are reused (the suite starts thousands of
    processes), and keeping only the last line let a later process hide the executor's.
    """

    def __init__(self) -> None:
        self.seen: dict[int, set[str]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def __enter__(self) -> CommandLines:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _watch(self) -> None:
        while True:
            for entry in Path("/proc").iterdir():
                if entry.name.isdigit():
                    try:
                        raw = (entry / "cmdline").read_bytes()
                    except OSError:  # gone meanwhile
                        continue
                    line = raw.replace(b"\0", b" ").decode(errors="replace")
                    self.seen.setdefault(int(entry.name), set()).add(line)
            if self._stop.wait(0.5):
                return

    def showing(self, text: str) -> list[int]:
        """The processes whose command line held ``text``."""
        return [pid for pid, lines in self.seen.items() if any(text in line for line in lines)]


def run_replay(
    pipeline: Path, users: Path, tweets: Path, out: Path, dead: Path, env: dict[str, str]
) -> tuple[str, str]:
    """`daemon replay` in its own process (and process group); its stdout and stderr."""
    replay = subprocess.Popen(
        [
            sys.executable,
            *("-m", "daemon", "replay", str(pipeline)),
            *("--input", f"one={users}", "--input", f"many={tweets}"),
            *("--output", str(out), "--dead-letters", str(dead)),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={
            **os.environ,
            "SPARK_HOME": str(SPARK_HOME),
            "SPARK_LOCAL_IP": "127.0.0.1",
            **env,
        },
        start_new_session=True,
    )
    try:
        out, err = replay.communicate(timeout=REPLAY_TIMEOUT_S)
    finally:
        _stop(replay)
    stderr = err.decode(errors="replace")
    assert replay.returncode == 0, stderr
    return out.decode(errors="replace"), stderr


def test_example_pipeline_runs_on_a_secured_standalone_cluster(
    cluster: Cluster, broker: Any, tmp_path: Path, rpc_secret: str
) -> None:
    s3_secret = f"s3-secret-{uuid.uuid4().hex}"
    env = {
        "SPARK_RPC_SECRET": rpc_secret,
        "S3_SECRET": s3_secret,
        "ENRICHD_SPARK_LOG": str(tmp_path / "spark.log"),
    }
    pipeline = cluster_pipeline_file(tmp_path, cluster.url, broker.bootstrap_servers)
    users, tweets = recorded_inputs()
    out, dead = tmp_path / "views.jsonl", tmp_path / "dead.jsonl"
    seen = cluster.app_ids()

    with CommandLines() as commands:
        stdout, stderr = run_replay(
            pipeline,
            write_jsonl(tmp_path / "users.jsonl", users),
            write_jsonl(tmp_path / "tweets.jsonl", tweets),
            out,
            dead,
            env,
        )

    views = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert latest_by_key(views) == batch_join(users, tweets)
    assert all(v["value"]["author"] for v in views), "a view without its author"
    assert dead.read_text(encoding="utf-8") == "", stderr

    # It ran on the cluster: the master saw the application come and go, and its executor,
    # started by the worker, ran the tasks (there is no executor in the driver in this mode).
    apps = cluster.finished_apps(seen)
    assert [app["name"] for app in apps] == ["enrichd"]
    executor_logs = list((cluster.work_dir / apps[0]["id"]).glob("*/stderr"))
    assert len(executor_logs) == 1, f"executor logs: {executor_logs}"
    executor_log = executor_logs[0].read_text(errors="replace")
    assert "Running task" in executor_log

    # With authentication and encryption on: the executor was started with them (the
    # worker's launch command heads its log) and talked to the driver, which it could only
    # do knowing the secret, handed to it by the worker outside its command line.
    command = next(line for line in executor_log.splitlines() if "Executor Command" in line)
    assert "-Dspark.authenticate=true" in command
    assert "-Dspark.network.crypto.enabled=true" in command
    # No secret on any command line while it ran: the driver's JVM (its settings in a file),
    # the executor, the workers' Python processes; the watcher saw them all.
    assert commands.showing("org.apache.spark.deploy.SparkSubmit")
    assert commands.showing("CoarseGrainedExecutorBackend")
    for secret in (rpc_secret, s3_secret):
        assert commands.showing(secret) == [], "a secret on a command line"
        # ...nor in anything printed or logged: the replay's output, Spark's logs.
        printed = [stdout, stderr, out.read_text(), (tmp_path / "spark.log").read_text()]
        printed += [cluster.master_log.read_text(), cluster.worker_log.read_text()]
        printed += [log.read_text() for log in (cluster.work_dir / apps[0]["id"]).glob("*/std*")]
        assert not [text for text in printed if secret in text], "a secret printed"


AUTHORS = range(1, 9)
FIRST, THEN = range(0, 24), range(24, 48)
"""Tweets before and after the long batches that joined the users ended."""
ENDED_EARLY = re.compile(r"long batch (\d+) \(lease \d of 2\) ended early")


def _written(daemon: DaemonProcess, views: TweetViews, records: int) -> int:
    """Wait until the leases joined ``records`` and the long batches that did were committed;
    the last of them, after which a long batch that joins nothing runs.

    With a held-state budget of one byte, the sub-batch that joins a lease's last records
    ends its long batch, and the task's last report carries both its counts and the line
    saying so: once the counts add up, every such line is logged.
    """

    def read(role: str) -> float:
        return daemon.metric("enrichd_records_in_total", pipeline=views.name, input=role) or 0

    daemon.wait_until(f"{records} records joined", lambda: read("one") + read("many") == records)
    ended = max(int(n) for n in ENDED_EARLY.findall(daemon.log_text()))

    def running_after() -> bool:
        committed = last_committed(views.checkpoint)
        return (
            committed is not None
            and committed >= ended
            and planned_past_commit(views.checkpoint) is not None
        )

    daemon.wait_until(f"long batch {ended} committed and another running", running_after)
    return ended


def test_a_continuous_pipeline_of_two_leases_runs_on_the_cluster(
    cluster: Cluster, tweet_views: Callable[..., TweetViews], spark: Any, rpc_secret: str,
    tmp_path: Path,
) -> None:  # fmt: skip
    """`daemon run` of the tweet-views pipeline in continuous mode, two leases, on the cluster.

    A held-state budget of one byte ends a lease's long batch after each sub-batch that
    joins anything, so long batches end inside the run without a timed wait: the users are
    joined and written by some, and the later tweets, produced once those are committed,
    are joined by others that read the users from the state store. The long batch's own
    length (10 min) is never reached: a long batch that joins nothing ends at the SIGTERM,
    and is committed, only if the leases' tasks, in the worker's executor, saw the stop file.
    """
    views = tweet_views("cluster-continuous", partitions=2)
    secured = "".join(f'"{key}" = "{value}"\n' for key, value in SECURED.items())
    header = (
        f'[kafka]\nbootstrap_servers = "{views.servers}"\n\n[spark]\nmaster = "{cluster.url}"\n\n'
        f'[spark.conf]\n{secured}"spark.authenticate.secret" = "${{SPARK_RPC_SECRET}}"\n\n'
    )
    settings = {"mode": "continuous", "leases": 2, "long_batch": "10m", "held_state_budget": "1B"}
    views.folder.mkdir(parents=True, exist_ok=True)
    views.path.write_text(header + views.pipeline(buckets=8, **settings), encoding="utf-8")
    ends = {views.users: {0: 0, 1: 0}, views.tweets: {0: 0, 1: 0}}

    def tweets(ids: range) -> None:
        ends[views.tweets].update(
            produce(views.conf, views.tweets, [tweet(i, AUTHORS[i % len(AUTHORS)]) for i in ids])
        )

    ends[views.users].update(
        produce(views.conf, views.users, [user(i, f"user {i}", 1000 + i) for i in AUTHORS])
    )
    tweets(FIRST)
    seen = cluster.app_ids()
    env = {"SPARK_HOME": str(SPARK_HOME), "SPARK_LOCAL_IP": "127.0.0.1"}
    daemon = DaemonProcess(
        views.path, tmp_path / "daemon.log", "--stop-timeout", "120",
        env={**env, "SPARK_RPC_SECRET": rpc_secret},
    )  # fmt: skip
    try:
        daemon.wait_until("the first views", lambda: views.views() == Counter(FIRST))
        users_written = _written(daemon, views, len(AUTHORS) + len(FIRST))
        # Each lease's task held state, and ended a long batch with it written.
        assert all(f"(lease {n} of 2) ended early" in daemon.log_text() for n in (1, 2))
        tweets(THEN)
        joined = _written(daemon, views, len(AUTHORS) + len(FIRST) + len(THEN))
        assert joined > users_written
        daemon.process.send_signal(signal.SIGTERM)
        assert daemon.process.wait(150) == 0, daemon.log_text()[-3000:]
    finally:
        _stop(daemon.process)
    # Every tweet exactly once, with its author (views() checks each view's author).
    assert views.views() == Counter([*FIRST, *THEN])
    # The long batch that joined nothing ended 10 min early, at the stop, and Spark
    # committed it: the tasks on the executor saw the stop file in the checkpoint.
    last = last_committed(views.checkpoint)
    assert last is not None and last > joined, daemon.log_text()[-3000:]
    assert planned_past_commit(views.checkpoint) is None
    apps = cluster.finished_apps(seen)
    assert [app["name"] for app in apps] == ["enrichd"]
    executor_logs = list((cluster.work_dir / apps[0]["id"]).glob("*/stderr"))
    assert executor_logs and all("Running task" in log.read_text() for log in executor_logs)

    # Both leases wrote their rows (where each stopped: the end of every partition, since
    # each reads all of them) and the buckets they join, as `daemon state` reads them.
    state = LeaseState(spark, views.checkpoint, last)
    labels = LongBatches(leases=2).labels(2)
    read_to = {f"{topic}/{p}": end for topic, by in ends.items() for p, end in by.items()}
    assert {lease: stopped.ends for lease, stopped in state.stopped().items()} == {
        label: read_to for label in labels
    }
    owners = LongBatches(leases=2).owners(2, 8)
    held = {owners[int(row.bucket)] for row in state.stored_frame().select("bucket").collect()}
    assert held == set(labels)
