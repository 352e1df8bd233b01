"""`daemon run` goes on past a record it cannot write, and says so of offsets it cannot read.

One `daemon run` process runs three `comap` pipelines on the session's broker, each on topics
of its own:

- ``oversize``: two 600 kB inputs make a 1.2 MB view, more than the Kafka client's
  ``message.max.bytes``: that view goes to the dead-letter topic (``OutputRejected``), the
  others are written, and a tweet produced later is joined too.
- ``lost`` (``on_missing_offsets = "fail"``) ran before, in this process's Spark; then, with
  it stopped, its tweets topic was deleted and created again with fewer records than it had
  read. It stops with one line, which the log and ``/readyz`` give; the daemon runs on.
- ``reads-on`` (``"latest"``) ran before too; then its users topic was deleted and created
  again with one record. It skips that record with one WARN line, counts it per partition,
  and joins a user update produced later.
"""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from daemon.broker import EmbeddedBroker
from daemon.formats.avro.codec import AvroCodec, load_schema_file
from daemon.model.config import load_pipeline_file
from tests.daemon_process import DaemonProcess
from tests.kafka_helpers import (
    SCHEMAS,
    In,
    client_conf,
    create_topic,
    produce,
    read_topic,
    recreate_topic,
    run_pipeline,
)

USERS = AvroCodec(load_schema_file(SCHEMAS / "user.avsc"))
TWEETS = AvroCodec(load_schema_file(SCHEMAS / "tweet.avsc"))
VIEWS = AvroCodec(load_schema_file(SCHEMAS / "tweet_view.avsc"))
PIPELINE = """
[[pipeline]]
name = "{name}"
joiner = "comap"
checkpoint = "{checkpoint}"
dead_letter_topic = "{dead_letters}"
on_missing_offsets = "{policy}"

[pipeline.inputs.one]
topic = "{users}"
schema = "{schemas}/user.avsc"
key = "id"
field = "author"

[pipeline.inputs.many]
topic = "{tweets}"
schema = "{schemas}/tweet.avsc"
key = "author_id"
field = "tweet"

[pipeline.output]
topic = "{views}"
schema = "{schemas}/tweet_view.avsc"

[pipeline.options]
many_id = "id"
"""


@dataclass(frozen=True)
class Comap:
    """One tweet-views pipeline on topics of its own."""

    name: str
    users: str
    tweets: str
    views: str
    dead_letters: str
    checkpoint: Path
    policy: str

    @classmethod
    def make(cls, fresh: Callable[[str], str], folder: Path, stem: str, policy: str) -> Comap:
        name = fresh(stem)
        return cls(
            name,
            fresh("users"),
            fresh("tweets"),
            fresh("views"),
            fresh("dlq"),
            folder / name,
            policy,
        )

    def toml(self) -> str:
        return PIPELINE.format(schemas=SCHEMAS, **self.__dict__)

    def views_by_id(self, conf: dict[str, str]) -> dict[int, dict[str, Any]]:
        """The latest view of each tweet."""
        return {
            view["id"]: view
            for view in (VIEWS.decode(r.value or b"") for r in read_topic(conf, self.views))
        }


def user(user_id: int, name: str, timestamp: int) -> In:
    return In(USERS.encode({"id": user_id, "name": name}), str(user_id).encode(), timestamp)


def tweet(tweet_id: int, author: int, content: str = "hi") -> In:
    value = TWEETS.encode({"id": tweet_id, "author_id": author, "content": content})
    return In(value, str(tweet_id).encode(), 10_000 + tweet_id)


def test_daemon_run_dead_letters_what_it_cannot_write_and_says_what_it_cannot_read(
    broker: EmbeddedBroker, spark: Any, fresh_topic: Callable[[str], str], tmp_path: Path
) -> None:
    conf = client_conf(broker.bootstrap_servers)
    oversize = Comap.make(fresh_topic, tmp_path, "oversize", "fail")
    lost = Comap.make(fresh_topic, tmp_path, "lost", "fail")
    reads_on = Comap.make(fresh_topic, tmp_path, "reads-on", "latest")
    path = tmp_path / "pipelines.toml"
    path.write_text(
        f'[kafka]\nbootstrap_servers = "{broker.bootstrap_servers}"\n\n'
        '[spark]\nmaster = "local[2]"\n'
        + "".join(pipe.toml() for pipe in (oversize, lost, reads_on)),
        encoding="utf-8",
    )
    for pipe in (oversize, lost, reads_on):
        create_topic(conf, pipe.users, 1)
        create_topic(conf, pipe.tweets, 1)
    file = load_pipeline_file(path)
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
        [tweet(10, 1, long_tweet), tweet(11, 1, "short"), tweet(12, 2, "short")],
    )

    service = DaemonProcess(path, tmp_path / "daemon.log", env={})
    try:
        service.wait_until(
            "views 11 and 12 and a dead letter",
            lambda: (
                set(oversize.views_by_id(conf)) == {11, 12}
                and len(read_topic(conf, oversize.dead_letters)) == 1
            ),
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

        (letter,) = read_topic(conf, oversize.dead_letters)
        assert letter.headers["enrichd.error.class"] == b"OutputRejected"
        reason = letter.headers["enrichd.error.message"].decode()
        assert reason.startswith(f"MSG_SIZE_TOO_LARGE: topic '{oversize.views}' refused")
        assert letter.headers["enrichd.source.topic"] == oversize.tweets.encode()
        assert letter.headers["enrichd.source.offset"] == b"0"  # tweet 10
        assert int(letter.headers["enrichd.error.cut"]) > 1_200_000
        rejected = {"pipeline": oversize.name, "reason": "OutputRejected"}
        assert service.metric("enrichd_dead_letters_total", **rejected) == 1

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

        warning = (
            f"pipeline '{reads_on.name}': input topic '{reads_on.users}' partition 0 no longer "
            "has offset 2: the earliest it has is 0 and its log ends at 1 (was the topic deleted "
            "and created again?); on_missing_offsets = 'latest': reading on from offset 1, "
            "1 offsets skipped"
        )
        assert warning in service.log_text()
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
