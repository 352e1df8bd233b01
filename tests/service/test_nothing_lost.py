"""`daemon run` goes on past a record it cannot write, and says so of offsets it cannot read.

One `daemon run` process runs three `comap` pipelines on the session's broker, each on topics
of its own:

- ``oversize``: two 600 kB inputs make a 1.2 MB view, more than the Kafka client's
  ``message.max.bytes``, and the broker refuses another view it is sent (a proxy in front of
  the session's broker answers ``MESSAGE_TOO_LARGE``, tests/refusing_proxy.py): both views go
  to the dead-letter topic (``OutputRejected``), the others are written once, and a tweet
  produced later is joined too.
- ``lost`` (``on_missing_offsets = "fail"``) ran before, in this process's Spark; then, with
  it stopped, its tweets topic was deleted and created again with fewer records than it had
  read. It stops with one line, which the log and ``/readyz`` give; the daemon runs on.
- ``reads-on`` (``"latest"``) ran before too; then its users topic was deleted and created
  again with one record. It skips that record with one WARN line, counts it per partition,
  and joins a user update produced later.

The daemon keeps Spark's scratch space, with the state's working copy, where
``ENRICHD_SPARK_LOCAL_DIR`` says.
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import pytest

from daemon.broker import EmbeddedBroker
from daemon.model.config import load_pipeline_file
from daemon.model.constants import DEFAULT_STATE_BUCKETS
from tests.committed_read import committed
from tests.daemon_process import DaemonProcess
from tests.kafka_helpers import (
    COMAP_HEADER,
    VIEWS,
    TweetViews,
    client_conf,
    fresh_tweet_views,
    produce,
    read_topic,
    recreate_topic,
    run_pipeline,
    tweet,
    user,
)
from tests.refusing_proxy import RefusingProxy, refusing

REFUSED = "refused by the broker"
"""The content of the tweet whose view the proxy refuses: its bytes mark the record batch."""


@dataclass(frozen=True)
class Comap(TweetViews):
    """One tweet-views pipeline on topics of its own, and its ``on_missing_offsets``."""

    policy: str

    @classmethod
    def make(
        cls,
        broker: EmbeddedBroker,
        fresh: Callable[[str], str],
        folder: Path,
        stem: str,
        policy: str,
    ) -> Comap:
        """The pipeline ``fresh(stem)``, its topics created, its checkpoint in ``folder/stem``."""
        views = fresh_tweet_views(broker.bootstrap_servers, fresh, folder / stem, stem)
        return cls(**asdict(views), policy=policy)

    def toml(self) -> str:
        return "\n" + self.pipeline(buckets=DEFAULT_STATE_BUCKETS, on_missing_offsets=self.policy)

    def views_by_id(self, conf: dict[str, str]) -> dict[int, dict[str, Any]]:
        """The latest view of each tweet."""
        return {
            view["id"]: view
            for view in (VIEWS.decode(r.value or b"") for r in read_topic(conf, self.output))
        }


@pytest.fixture
def proxy(broker: EmbeddedBroker) -> Iterator[RefusingProxy]:
    """The daemon's way to the session's broker; the test names the topic it refuses."""
    with refusing(broker, "no topic yet", REFUSED.encode()) as found:
        yield found


def test_daemon_run_dead_letters_what_it_cannot_write_and_says_what_it_cannot_read(
    broker: EmbeddedBroker,
    proxy: RefusingProxy,
    spark: Any,
    fresh_topic: Callable[[str], str],
    tmp_path: Path,
) -> None:
    conf = client_conf(broker.bootstrap_servers)
    oversize = Comap.make(broker, fresh_topic, tmp_path, "oversize", "fail")
    lost = Comap.make(broker, fresh_topic, tmp_path, "lost", "fail")
    reads_on = Comap.make(broker, fresh_topic, tmp_path, "reads-on", "latest")
    proxy.prefix = oversize.output
    path = tmp_path / "pipelines.toml"
    header = COMAP_HEADER.format(servers=proxy.bootstrap_servers, kafka_settings="", spark_conf="")
    path.write_text(
        header + "".join(pipe.toml() for pipe in (oversize, lost, reads_on)), encoding="utf-8"
    )
    file = load_pipeline_file(path)
    # These two run in the test's Spark first, straight to the broker: only the daemon
    # goes through the proxy.
    file = file.model_copy(
        update={
            "kafka": file.kafka.model_copy(update={"bootstrap_servers": broker.bootstrap_servers})
        }
    )
    for pipe, config in ((lost, file.pipeline[1]), (reads_on, file.pipeline[2])):
        produce(conf, pipe.users, [user(1, "ada", 1_000), user(2, "grace", 1_001)])
        produce(conf, pipe.tweets, [tweet(i, 1 + i % 2) for i in range(4)])
        run_pipeline(spark, file.model_copy(update={"pipeline": [config]}))  # next: 2 and 4

    # The daemon is stopped: the broker loses offsets the two pipelines are to read next.
    recreate_topic(conf, lost.tweets)
    produce(conf, lost.tweets, [tweet(i, 1 + i % 2) for i in range(4, 6)])  # offsets 0-1
    recreate_topic(conf, reads_on.users)
    produce(conf, reads_on.users, [user(1, "skipped", 3_000)])  # offset 0; it needs 2
    long_name, long_tweet = "n" * 600_000, "t" * 600_000
    produce(conf, oversize.users, [user(1, long_name, 1_000), user(2, "grace", 1_001)])
    produce(
        conf,
        oversize.tweets,
        [tweet(10, 1, long_tweet), tweet(11, 1, "short"), tweet(12, 2, "short")]
        + [tweet(14, 2, REFUSED)],  # offset 3: the broker refuses its view
    )

    warning = (
        f"pipeline '{reads_on.name}': input topic '{reads_on.users}' partition 0 no longer "
        "has offset 2: the earliest it has is 0 and its log ends at 1 (was the topic deleted "
        "and created again?); on_missing_offsets = 'latest': reading on from offset 1, "
        "1 offsets skipped"
    )
    scratch = tmp_path / "scratch"  # as the Kubernetes manifests and the systemd unit set it
    service = DaemonProcess(
        path, tmp_path / "daemon.log", env={"ENRICHD_SPARK_LOCAL_DIR": str(scratch)}
    )
    try:
        # reads-on must plan past the lost offset before its topic grows again: a log that
        # ends at offset 2 once more cannot be told from the old one (docs/semantics.md).
        service.wait_until(
            "views 11 and 12, two dead letters, and reads-on past the lost offset",
            lambda: (
                set(oversize.views_by_id(conf)) == {11, 12}
                and len(read_topic(conf, oversize.dead_letters)) >= 2
                and warning in service.log_text()
            ),
        )
        # The state's working copy is in the scratch folder, in the process's run folder.
        (run,) = (entry for entry in scratch.iterdir() if entry.is_dir())
        assert run.name.startswith("run-"), run
        assert any(
            name.startswith("StateStoreId(") for _, names, _ in os.walk(run) for name in names
        )
        # Both go on: a tweet after the refused view, a user update after the skipped one.
        produce(conf, oversize.tweets, [tweet(13, 2)])
        produce(conf, reads_on.users, [user(1, "ada again", 4_000)])
        service.wait_until(
            "view 13, and ada's update in her views",
            lambda: (
                13 in oversize.views_by_id(conf)
                and {v["author"]["name"] for v in reads_on.views_by_id(conf).values()}
                == {"ada again", "grace"}
            ),
        )

        assert proxy.refused >= 1  # the broker's refusal did happen
        # Exactly once, by what committed (the test broker shows aborted records too).
        views = committed(conf, oversize.output, VIEWS)
        assert sorted(view.value["id"] for view in views) == [11, 12, 13]
        letters = {
            letter.headers["enrichd.source.offset"]: letter.headers
            for letter in committed(conf, oversize.dead_letters)
        }
        assert sorted(letters) == ["0", "3"]  # tweets 10 and 14
        for headers in letters.values():
            assert headers["enrichd.error.class"] == "OutputRejected"
            assert headers["enrichd.source.topic"] == oversize.tweets
        client_refused, broker_refused = letters["0"], letters["3"]
        reason = client_refused["enrichd.error.message"]
        assert reason.startswith(f"MSG_SIZE_TOO_LARGE: topic '{oversize.output}' refused"), reason
        assert reason.endswith("the client's message.max.bytes is 1000000)"), reason
        assert int(client_refused["enrichd.error.cut"]) > 1_200_000
        reason = broker_refused["enrichd.error.message"]
        assert reason.startswith(f"MSG_SIZE_TOO_LARGE: topic '{oversize.output}' refused"), reason
        assert reason.endswith("the broker answered: Broker: Message size too large)"), reason
        rejected = {"pipeline": oversize.name, "reason": "OutputRejected"}
        assert service.metric("enrichd_dead_letters_total", **rejected) == 2

        line = (
            f"pipeline '{lost.name}': input topic '{lost.tweets}' partition 0 no longer has "
            "offset 4: the earliest it has is 0 and its log ends at 2 (was the topic deleted "
            'and created again?); set on_missing_offsets = "earliest" or "latest" to read on '
            "from there, or move its start with `daemon reset`"
        )
        status, ready = service.get("/readyz")
        assert status == 503
        assert f"{lost.name}: stopped: {line}" in ready.splitlines()
        assert f"pipeline {lost.name} stopped: {line}" in service.log_text()
        assert service.metric("enrichd_pipeline_up", pipeline=lost.name) == 0

        partition = {"pipeline": reads_on.name, "topic": reads_on.users, "partition": "0"}
        assert service.metric("enrichd_input_offsets_skipped_total", **partition) == 1
        assert service.metric("enrichd_input_offset_resets_total", **partition) == 1
    finally:
        service.process.send_signal(signal.SIGTERM)
        try:
            service.process.wait(60)
        except subprocess.TimeoutExpired:
            service.process.kill()
            service.process.wait(10)
