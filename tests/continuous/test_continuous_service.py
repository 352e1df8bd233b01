"""`daemon run` on a pipeline in continuous mode, as an operator sees it.

The tweet-views pipeline with ``mode = "continuous"`` and a long batch of ten minutes, so
that everything below happens inside the first long batch of each start: Spark reports no
progress until a long batch ends, and the daemon must hear the task instead. Its answers
come out while the long batch runs; ``/metrics`` counts what its sub-batches read and
wrote, exactly; ``/readyz`` stays ready past the stall timeout; the pipeline's group holds
where it read to. A SIGTERM ends the long batch early and stops the query between batches
with nothing logged as an error; the next start reads on with new tweets. Then a kill -9
inside the next long batch: the start after it runs that long batch again, whose task
replays the sub-batches it had committed, writing nothing twice. Every view exactly once.
"""

from __future__ import annotations

import signal
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from tests.daemon_process import DaemonProcess
from tests.delivery.test_crash_recovery import crash, tweets, users
from tests.kafka_helpers import In, TweetViews, produce

FIRST, MORE, LAST = range(60), range(60, 100), range(100, 120)
BAD_TWEETS = 2
STALL_TIMEOUT_S = 10
SETTINGS = {"mode": "continuous", "long_batch": "10m", "commit_interval": "100ms"}


def _start(path: Path, tmp_path: Path, run: int) -> DaemonProcess:
    return DaemonProcess(
        path,
        tmp_path / f"daemon-{run}.log",
        "--stall-timeout",
        str(STALL_TIMEOUT_S),
        "--stop-timeout",
        "60",
        env={},
    )


def test_a_continuous_pipeline_answers_reports_and_restarts_inside_its_long_batches(
    tweet_views: Callable[..., TweetViews], tmp_path: Path
) -> None:
    views = tweet_views("continuous-run", partitions=2)
    path = views.write(**SETTINGS)
    produce(views.conf, views.users, users())
    produce(views.conf, views.tweets, tweets(FIRST))
    produce(views.conf, views.tweets, [In(b"\x01", b"bad") for _ in range(BAD_TWEETS)])
    daemon = _start(path, tmp_path, 1)
    try:
        daemon.wait_until("a view of every tweet", lambda: len(views.views()) == len(FIRST))
        name = views.name

        def read(role: str) -> float:
            return daemon.metric("enrichd_records_in_total", pipeline=name, input=role) or 0

        everything = len(users()) + len(FIRST) + BAD_TWEETS
        daemon.wait_until("every record counted", lambda: read("one") + read("many") == everything)
        assert (read("one"), read("many")) == (len(users()), len(FIRST) + BAD_TWEETS)
        out = daemon.metric("enrichd_records_out_total", pipeline=name, output="output")
        assert out == len(FIRST)
        bad = daemon.metric("enrichd_dead_letters_total", pipeline=name, reason="UndecodableRecord")
        assert bad == BAD_TWEETS
        # Every count above came from the task: no long batch has ended.
        assert daemon.metric("enrichd_batches_total", pipeline=name) is None
        # Ready, and still ready once the stall timeout has passed without Spark's reports.
        daemon.wait_until("readiness", lambda: daemon.get("/readyz")[0] == 200)
        first_ready = daemon.metric("enrichd_last_progress_timestamp_seconds", pipeline=name)
        daemon.wait_until(
            "a stall timeout of reports from the task",
            lambda: (
                (daemon.metric("enrichd_last_progress_timestamp_seconds", pipeline=name) or 0)
                > (first_ready or 0) + STALL_TIMEOUT_S
            ),
            timeout_s=60,
        )
        assert daemon.get("/readyz") == (200, f"{name}: progressing\n")
        daemon.process.send_signal(signal.SIGTERM)  # as systemd and Kubernetes stop it
        assert daemon.process.wait(90) == 0, daemon.log_text()[-3000:]
        # The stop logged no error. (Before it, a start slower than the short stall timeout
        # may log one, as for a micro-batch pipeline: Spark's first report, or the task's.)
        stopping = daemon.log_text()
        assert " ERROR " not in stopping[stopping.index("stopping:") :]
    finally:
        if daemon.process.poll() is None:
            crash(daemon.process)
    assert views.views() == Counter(FIRST)

    produce(views.conf, views.tweets, tweets(MORE))
    daemon = _start(path, tmp_path, 2)
    try:
        wanted = len(FIRST) + len(MORE)
        daemon.wait_until("a view of every new tweet", lambda: len(views.views()) == wanted)
        # The stop ended its long batch: this start ran none again, so it replayed nothing.
        assert daemon.metric("enrichd_replayed_tasks_total", pipeline=views.name) is None
    finally:
        crash(daemon.process)
    produce(views.conf, views.tweets, tweets(LAST))
    daemon = _start(path, tmp_path, 3)
    try:
        wanted = len(FIRST) + len(MORE) + len(LAST)
        daemon.wait_until("a view of the last tweets", lambda: len(views.views()) == wanted)
        # The killed long batch ran again, and its task replayed what it had committed.
        daemon.wait_until(
            "the replay reported",
            lambda: daemon.metric("enrichd_replayed_tasks_total", pipeline=views.name) == 1,
        )
    finally:
        crash(daemon.process)
    assert views.views() == Counter([*FIRST, *MORE, *LAST])
