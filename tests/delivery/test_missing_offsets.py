"""Offsets the broker no longer has, lost under a stopped pipeline: records removed below the
offset it is to read next, and its topics deleted and created again with fewer records than
it had read.

Records removed (retention, DeleteRecords): the test broker, Tansu 0.6, removes none (it
answers DeleteRecords by closing the connection, and its partitions always start at 0), so a
proxy in front of the session's broker answers as a Kafka broker that removed them would
(tests/removed_records_proxy.py): a Fetch below the partition's new log start is out of
range, and every answer says the log starts there. ``on_missing_offsets = "fail"`` stops
the pipeline with one line naming the partition, the offset it needed and the earliest one
there; ``"earliest"`` reads on from that one, and reports what it skipped to the daemon, which
logs the WARN line and counts it per partition (checked here by the daemon's own code).

Topics created again: ``"earliest"`` reads them from their first record. What ``daemon run``
shows of that case (``"fail"``'s line in the log and on ``/readyz``, the WARN line, the
counters, ``"latest"``) is tested in ``tests/service/test_nothing_lost.py``.
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from daemon.broker import EmbeddedBroker
from daemon.errors import failure_reason, stops_the_pipeline
from daemon.model.reports import MissingOffsetsResumed, decode
from daemon.service.observability import Metrics
from tests.committed_read import committed
from tests.kafka_helpers import (
    VIEWS,
    In,
    TweetViews,
    produce,
    read_topic,
    recreate_topic,
    run_pipeline,
    tweet,
    user,
)
from tests.removed_records_proxy import removing


def tweets(ids: range) -> list[In]:
    """Tweets by users 1 (even ids) and 2 (odd ids)."""
    return [tweet(i, 1 + i % 2, f"tweet {i}") for i in ids]


def test_topics_recreated_under_a_stopped_pipeline_are_read_from_their_earliest(
    spark: Any, tweet_views: Callable[..., TweetViews]
) -> None:
    setup = tweet_views("missing")
    conf, users, tweet_topic, output = setup.conf, setup.users, setup.tweets, setup.output
    file = setup.file(on_missing_offsets="earliest")
    produce(conf, users, [user(1, "ada", 1_000), user(2, "grace", 1_001)])
    produce(conf, tweet_topic, tweets(range(10)))
    run_pipeline(spark, file)  # it has read users 0-1 and tweets 0-9: it needs 2 and 10 next

    # Stopped, it loses what it had not read yet: both topics are deleted and created again,
    # with fewer records than it read from them (it needs offsets 2 and 10 next).
    for topic in (users, tweet_topic):
        recreate_topic(conf, topic)
    produce(conf, users, [user(1, "ada again", 30_000)])
    produce(conf, tweet_topic, tweets(range(20, 23)))

    run_pipeline(spark, file)
    names: dict[int, str] = {}
    for record in read_topic(conf, output):
        view = VIEWS.decode(record.value or b"")
        names[view["id"]] = view["author"]["name"]  # the latest view of each tweet
    # Both new topics were read from their first record: the new tweets joined, and ada's
    # new name reached every tweet of hers.
    kept = [*range(10), *range(20, 23)]
    assert names == {i: "ada again" if i % 2 == 0 else "grace" for i in kept}


def test_records_removed_under_a_stopped_pipeline_stop_it_or_are_skipped_to_the_earliest(
    broker: EmbeddedBroker, spark: Any, tweet_views: Callable[..., TweetViews], tmp_path: Path
) -> None:
    setup = tweet_views("removed")
    conf, name, users, tweet_topic = setup.conf, setup.name, setup.users, setup.tweets
    output = setup.output
    produce(conf, users, [user(1, "ada", 1_000), user(2, "grace", 1_001)])
    produce(conf, tweet_topic, tweets(range(10)))
    with removing(broker) as proxy:

        def pipeline(policy: str) -> Any:
            return setup.file(servers=proxy.bootstrap_servers, on_missing_offsets=policy)

        run_pipeline(spark, pipeline("fail"))  # it has read tweets 0-9: it needs 10 next

        # Stopped, it loses records it had not read yet: tweets 10-14 are removed, and the
        # partition starts at 15. (Tweets 15-19 are one batch of their own, so Tansu's
        # ListOffsets(LATEST), its last batch's base offset + 1, is past 15 too.)
        assert produce(conf, tweet_topic, tweets(range(10, 15))) == {0: 15}
        assert produce(conf, tweet_topic, tweets(range(15, 20))) == {0: 20}
        proxy.removed[(tweet_topic, 0)] = 15

        with pytest.raises(Exception) as failed:  # noqa: PT011 - Spark's, checked below
            run_pipeline(spark, pipeline("fail"))
        facts = (
            f"pipeline '{name}': input topic '{tweet_topic}' partition 0 no longer has offset "
            "10: the earliest it has is 15 (retention or DeleteRecords removed the records "
            "before it)"
        )
        assert stops_the_pipeline(str(failed.value))
        assert failure_reason(str(failed.value)) == (
            f'{facts}; set on_missing_offsets = "earliest" or "latest" to read on from there, '
            "or move its start with `daemon reset`"
        )

        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as daemon_end:
            daemon_end.bind(str(tmp_path / "metrics.sock"))
            run_pipeline(
                spark, pipeline("earliest"), metrics_address=str(tmp_path / "metrics.sock")
            )
            daemon_end.settimeout(10)  # sent as the batch was planned, long before
            messages = [decode(daemon_end.recv(65536))]
            daemon_end.setblocking(False)
            while True:
                try:
                    messages.append(decode(daemon_end.recv(65536)))
                except BlockingIOError:
                    break

    # The first run's views, then those of the tweets from 15 on: none of 10-14, none twice.
    views = committed(conf, output, VIEWS)
    assert sorted(view.value["id"] for view in views) == [*range(10), *range(15, 20)]
    assert {view.value["id"]: view.value["author"]["name"] for view in views} == {
        i: "ada" if i % 2 == 0 else "grace" for i in [*range(10), *range(15, 20)]
    }

    # Reported once, as the daemon takes it: the WARN line, and 5 offsets skipped.
    (message,) = messages
    assert isinstance(message, MissingOffsetsResumed)
    assert message.pipeline == name
    (resumed,) = message.resumed
    assert resumed.warning(name) == (
        f"{facts}; on_missing_offsets = 'earliest': reading on from offset 15, 5 offsets skipped"
    )
    metrics = Metrics()
    metrics.read_on(name, resumed)
    partition = {"pipeline": name, "topic": tweet_topic, "partition": "0"}
    assert metrics.registry.get_sample_value("enrichd_input_offsets_skipped_total", partition) == 5
    assert metrics.registry.get_sample_value("enrichd_input_offset_resets_total", partition) == 1
