"""`daemon run` as a real process: killed with SIGKILL, stopped with SIGTERM, started again.

Both tests read one pipeline's story (:func:`story`): five `daemon run` starts on one
checkpoint, each ended by SIGTERM or SIGKILL at a chosen moment. Each start is a JVM's and a
Spark session's (the most of this file's time), so the SIGTERM'd run and the kills share
them. Every run here is ``python -m daemon run PIPELINE.toml`` in its own session (process group)
against the session's Tansu broker; a crash is SIGKILL to every process of that run: the
Python driver, Spark's JVM and Spark's Python workers, which sit in a process group of their
own. Inputs are built so that each tweet yields exactly one view: every user is produced
before any tweet and never updated, so a tweet's view is emitted once, when the tweet is
joined. The output topic, read with ``read_committed``, must then hold exactly one record per
tweet id.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from daemon.broker import EmbeddedBroker
from daemon.checkpoint.batch_logs import batches
from daemon.checkpoint.layout import COMMIT_LOG, OFFSET_LOG, metadata_file
from daemon.verify.child import descendants
from tests.kafka_helpers import In, fresh_tweet_views, produce, read_topic
from tests.state_helpers import TWEETS, USERS, VIEWS

AUTHORS = 10
BATCH = 50  # records per micro-batch: small, so a run is a train of short batches
STOP_TIMEOUT_S = 20
COLD_START_S = 300.0
"""How long a start may take to its first views: the JVM, Spark's Python workers, the state
store loaded. A bound on a hang, not a speed: the first run once needed more than 90 s at a
load of 22-25, a CI run's restart after the SIGTERM missed 90 s too, and a CI run's first
start missed 120 s (its JVM alone took 47 s to start, its first batch more than a minute)."""


def users() -> list[In]:
    return [
        In(USERS.encode({"id": i, "name": f"user {i}"}), str(i).encode(), timestamp=1000 + i)
        for i in range(1, AUTHORS + 1)
    ]


def tweets(ids: range) -> list[In]:
    return [
        In(
            TWEETS.encode({"id": i, "author_id": 1 + i % AUTHORS, "content": f"tweet {i}"}),
            str(i).encode(),
            timestamp=10_000 + i,
        )
        for i in ids
    ]


class Scenario:
    """Topics, a pipeline file and the `daemon run` processes of one test."""

    def __init__(self, broker: EmbeddedBroker, fresh_topic: Callable[[str], str], folder: Path):
        servers = broker.bootstrap_servers
        views = fresh_tweet_views(servers, fresh_topic, folder, "crash", partitions=2)
        self.conf, self.name, self.checkpoint = views.conf, views.name, views.checkpoint
        self.tweet_topic, self.output = views.tweets, views.output
        self.folder = folder
        self.path = views.write(max_records_per_batch=BATCH)
        produce(self.conf, views.users, users())
        self.runs = 0
        self.started: list[subprocess.Popen[bytes]] = []

    def produce_tweets(self, ids: range) -> None:
        produce(self.conf, self.tweet_topic, tweets(ids))

    def start(self) -> subprocess.Popen[bytes]:
        """Start `daemon run` in a session of its own, its log in ``run-N.log``."""
        self.runs += 1
        self.log = self.folder / f"run-{self.runs}.log"
        env = {**os.environ, "PYSPARK_PYTHON": sys.executable}
        with self.log.open("wb") as log:
            process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "daemon",
                    "run",
                    str(self.path),
                    "--stop-timeout",
                    str(STOP_TIMEOUT_S),
                ],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.started.append(process)
        return process

    def log_text(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace")

    def views(self) -> Counter[int]:
        """How many times each tweet's view is in the output (``read_committed``)."""
        counts: Counter[int] = Counter()
        for record in read_topic(self.conf, self.output):
            view = VIEWS.decode(record.value or b"")
            assert record.key == str(view["id"]).encode()
            assert view["author"]["name"] == f"user {view['tweet']['author_id']}"
            counts[view["id"]] += 1
        return counts

    def wait_for(
        self,
        process: subprocess.Popen[bytes],
        done: Callable[[Counter[int]], bool],
        what: str,
        timeout_s: float = 90.0,
    ) -> Counter[int]:
        """Poll the output until ``done(views)``; fail if the process dies or time runs out."""
        deadline = time.monotonic() + timeout_s
        while True:
            assert process.poll() is None, f"daemon run exited early:\n{self.log_text()[-3000:]}"
            counts = self.views()
            if done(counts):
                return counts
            assert time.monotonic() < deadline, (
                f"no {what} within {timeout_s:.0f}s ({len(counts)} views so far); "
                f"{self.where()}:\n{self.log_text()[-3000:]}\n{self.spark_log_tail()}"
            )
            time.sleep(0.5)

    def where(self) -> str:
        """:meth:`batches`, or why it cannot tell: for a failure's message, never raising.

        Whether Spark went on committing batches tells a stuck query from a reader held
        back (an open Kafka transaction holds ``read_committed`` readers)."""
        try:
            return self.batches()
        except Exception as error:  # noqa: BLE001 - the message must not hide the failure
            return f"run {self.runs}: batches unknown ({error!r})"

    def spark_log_tail(self) -> str:
        """The end of the run's Spark log, whose path the run's log names first."""
        match = re.search(r"Spark's own log: (\S+)", self.log_text())
        if match is None:
            return "(no Spark log named)"
        try:
            text = Path(match.group(1)).read_text(encoding="utf-8", errors="replace")
        except OSError as error:
            return f"(Spark log {match.group(1)}: {error})"
        return f"Spark log {match.group(1)}, its end:\n{text[-4000:]}"

    def batches(self) -> str:
        """Where the last run stopped: batches planned and committed by Spark and by the sink.

        Spark writes ``offsets/N`` when it plans batch N and ``commits/N`` when it is done;
        the sink commits its marker (a record naming the batch, per write task) inside each
        Kafka transaction.
        """
        from daemon.sink.markers import task_marker

        checkpoint = self.checkpoint
        query_id = json.loads(metadata_file(checkpoint).read_text())["id"]
        markers = []
        for task in range(2):  # spark.sql.shuffle.partitions: one write task each
            found = task_marker(
                self.conf, "enrichd", self.name, query_id, task, self.output, stable=True
            )
            markers.append(-1 if found is None else found.batch)
        return (
            f"run {self.runs}: Spark planned batch {self.last(OFFSET_LOG)}, committed "
            f"{self.last(COMMIT_LOG)}; the sink's write tasks committed batches {markers}"
        )

    def last(self, log: str) -> int:
        """The last batch in the checkpoint's ``offsets`` or ``commits`` log; -1: none."""
        return max(batches(self.checkpoint, log), default=-1)

    def wait_for_planning(self, process: subprocess.Popen[bytes], after: int) -> None:
        """Return as soon as Spark has planned a batch after batch ``after``.

        Spark plans a batch only once the one before has finished, its tasks' Kafka
        transactions committed, so at that moment no commit is under way. The batch before
        may be a restart's first, which re-runs the batch a kill interrupted and pays for the
        JVM's and the Python workers' warm-up (a CI run waited more than 60 s for it), so the
        bound is a cold start's; the polling, not the bound, makes the moment "just after".
        """
        self._poll(
            process,
            lambda: self.last(OFFSET_LOG) > after,
            f"no batch after {after}",
            COLD_START_S,
            0.01,
        )

    def wait_for_log(self, process: subprocess.Popen[bytes], text: str, timeout_s: float = 60.0):
        self._poll(process, lambda: text in self.log_text(), f"no {text!r} in the log", timeout_s)

    def _poll(
        self,
        process: subprocess.Popen[bytes],
        ready: Callable[[], bool],
        missing: str,
        timeout_s: float,
        interval_s: float = 0.05,
    ) -> None:
        """Wait until ``ready()``; fail if the process dies or ``timeout_s`` runs out."""
        deadline = time.monotonic() + timeout_s
        while not ready():
            assert process.poll() is None, f"daemon run exited early:\n{self.log_text()[-3000:]}"
            assert time.monotonic() < deadline, (
                f"{missing} within {timeout_s:.0f}s; {self.where()}:\n"
                f"{self.log_text()[-3000:]}\n{self.spark_log_tail()}"
            )
            time.sleep(interval_s)


def crash(process: subprocess.Popen[bytes]) -> None:
    """SIGKILL the whole run at once: driver, JVM and Python workers."""
    groups = {process.pid}
    for pid in descendants(process.pid):
        try:
            groups.add(os.getpgid(pid))
        except ProcessLookupError:
            pass
    for group in groups:
        try:
            os.killpg(group, signal.SIGKILL)
        except ProcessLookupError:
            pass
    process.wait(10)


def stop(process: subprocess.Popen[bytes]) -> tuple[int, float]:
    """SIGTERM the driver, as systemd or Docker would; its exit code and seconds to exit."""
    started = time.monotonic()
    process.send_signal(signal.SIGTERM)
    try:
        code = process.wait(STOP_TIMEOUT_S + 10)
    except subprocess.TimeoutExpired:
        crash(process)
        raise
    return code, time.monotonic() - started


def fresh_name(stem: str) -> str:
    """A topic or pipeline name no other test uses (as the ``fresh_topic`` fixture makes)."""
    return f"{stem}-{uuid.uuid4().hex[:10]}"


def grew(than: Counter[int]) -> Callable[[Counter[int]], bool]:
    return lambda counts: len(counts) > len(than)


@dataclass
class Story:
    """What the runs of :func:`story` left: exit codes, logs and the views at each step."""

    sigterm_exit: int
    sigterm_took_s: float
    sigterm_log: str
    stopped_at: Counter[int]
    """The views once the SIGTERM'd first run had exited."""
    first_produced: int
    """Tweets produced before the SIGTERM'd run."""
    restarted: Counter[int]
    """The views once the restart after SIGTERM had written more (before any kill)."""
    moments: list[str]
    """Where each kill landed (the checkpoint's batches and the sink's markers)."""
    produced: int
    final_exit: int
    final_took_s: float
    final_log: str
    views: Counter[int]


@pytest.fixture(scope="module")
def story(broker: EmbeddedBroker, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Story]:
    """One pipeline's five `daemon run` starts on one checkpoint, shared by this file's tests.

    1. Stopped with SIGTERM once its first views landed, while micro-batches of at most 50
       records run back to back over the 150 tweets waiting.
    2. Started again, it writes more views; 100 more tweets are produced and, just after a
       micro-batch's views landed, SIGKILL: kill (1).
    3. Started again, once it made progress 100 more tweets are produced and, just after
       Spark planned a batch, SIGKILL: kill (2).
    4. Started again, SIGKILL one and a half seconds into its first micro-batch (the
       recovery of the batch kill (2) interrupted): kill (3).
    5. With 100 more tweets waiting, started again until every tweet has its view, then
       stopped with SIGTERM.
    """
    run = Scenario(broker, fresh_name, tmp_path_factory.mktemp("crash-recovery"))
    try:
        first = 150
        run.produce_tweets(range(0, first))
        process = run.start()
        run.wait_for(process, bool, "first view", COLD_START_S)
        sigterm_exit, sigterm_took = stop(process)  # (SIGTERM) while micro-batches run
        sigterm_log, stopped_at = run.log_text(), run.views()

        moments = []
        process = run.start()
        restarted = run.wait_for(
            process, grew(stopped_at), "progress after the SIGTERM", COLD_START_S
        )
        run.produce_tweets(range(first, 250))
        seen = run.wait_for(process, grew(restarted), "progress")
        crash(process)  # (1) right after a batch's views landed
        moments.append(run.batches())

        process = run.start()
        seen = run.wait_for(process, grew(seen), "progress after kill 1", COLD_START_S)
        planned = run.last(OFFSET_LOG)
        run.produce_tweets(range(250, 350))
        run.wait_for_planning(process, planned)
        crash(process)  # (2) mid-batch, just planned: no transaction is committing
        moments.append(run.batches())

        process = run.start()
        run.wait_for_log(process, "started: joiner comap", COLD_START_S)
        time.sleep(1.5)
        crash(process)  # (3) inside the first micro-batch after the restart
        moments.append(run.batches())

        produced = 450
        run.produce_tweets(range(350, produced))
        process = run.start()
        run.wait_for(
            process, lambda counts: len(counts) == produced, "view of every tweet", COLD_START_S
        )
        final_exit, final_took = stop(process)
        yield Story(
            sigterm_exit, sigterm_took, sigterm_log, stopped_at, first, restarted,
            moments, produced, final_exit, final_took, run.log_text(), run.views(),
        )  # fmt: skip
    finally:
        for process in run.started:
            if process.poll() is None:
                crash(process)


def test_kill_9_at_three_moments_loses_and_duplicates_nothing(story: Story) -> None:
    """What this proves, on Tansu: the whole `daemon run` process tree, killed with SIGKILL
    (1) just after a micro-batch's views landed, (2) just after Spark planned a batch once new
    input was produced, while micro-batches of at most 50 records run back to back, and (3)
    one and a half seconds into the first micro-batch of a restart (the recovery of the batch
    (2) interrupted), restarts from its checkpoint and ends with exactly one view per tweet
    in the output read with ``read_committed``: none lost, none written twice.

    Where the kills landed is printed (``-s``) from the checkpoint and the sink's markers.
    When (2) was half a second after producing and (3) three seconds into the restart,
    development runs always found the batch's Kafka transactions committed and Spark's
    commit of that batch missing, so the restarts re-ran a batch whose output had landed,
    and the sink's marker is what kept it from being written twice. Once the source read a
    batch in fewer tasks, batches got fast enough for those kills to land in a commit: two
    full runs of the suite in a row failed here, one with 30 views written twice, one with
    an open transaction holding the reader. Now (2) lands before any task of the batch has
    begun, and the restart's recovery runs it again from scratch.

    What it does not prove: anything about a kill inside an open Kafka transaction, after
    some records were produced and before the commit. A task holds its records back until it
    commits (``daemon.sink.task_output``), so that is only the commit itself, and none of
    these kills is aimed there. On Tansu 0.6 such a kill would show up here
    as a duplicate even though enrichd behaves correctly: measured with plain clients, Tansu
    holds ``read_committed`` readers at the last stable offset while a transaction is open
    and aborts a dead producer's transaction when its id is initialised again, but then
    delivers the aborted records to ``read_committed`` readers. (Before tasks held their
    records back, one run failed here with 20 views written twice after kills (2) and (3)
    landed mid-batch: what a kill inside a transaction with records in it looks like on
    Tansu.) A duplicate from this test must therefore be checked against that
    before it is taken for an enrichd bug; on Apache Kafka it would be one.
    """
    print("\n".join(story.moments))  # shown with -s: where each kill landed
    counts = story.views
    assert sorted(counts) == list(range(story.produced)), f"views lost; kills: {story.moments}"
    duplicated = {tweet: n for tweet, n in counts.items() if n > 1}
    assert not duplicated, (
        f"{len(duplicated)} tweets have 2+ views: {duplicated}; kills: {story.moments}"
    )
    assert story.final_exit == 0, story.final_log[-3000:]
    assert story.final_took_s < STOP_TIMEOUT_S


def test_sigterm_exits_0_and_a_restart_continues_without_duplicates(story: Story) -> None:
    """SIGTERM while micro-batches are running: `daemon run` finishes the batch in flight,
    stops and exits 0 within its stop timeout; started again on the same checkpoint, it
    picks up where it stopped (more views, none twice, before any kill of the story) and
    every tweet ends with exactly one view."""
    assert story.sigterm_exit == 0, story.sigterm_log[-3000:]
    assert story.sigterm_took_s < STOP_TIMEOUT_S
    assert "stopped" in story.sigterm_log
    assert set(story.stopped_at.values()) == {1}
    assert len(story.stopped_at) < story.first_produced, "the stop came too late to test a restart"
    assert set(story.restarted.values()) == {1}
    assert set(story.restarted) > set(story.stopped_at)
    assert story.views == dict.fromkeys(range(story.produced), 1)
