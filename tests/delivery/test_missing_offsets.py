"""Offsets the broker no longer has, lost under a stopped pipeline: its topics deleted and
created again with fewer records than it had read.

``on_missing_offsets = "earliest"`` reads them from their first record. What ``daemon run``
shows (``"fail"``'s line in the log and on ``/readyz``, the WARN line, the counters,
``"latest"``) is tested in ``tests/service/test_nothing_lost.py``. Records removed below a
partition's earliest offset (retention, DeleteRecords) are not: the test broker, Tansu 0.6,
answers DeleteRecords by closing the connection and keeps every record in memory, so its
partitions always start at 0 (the unit tests of ``daemon.source.missing_offsets`` and the
planner cover that case).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from daemon.broker import EmbeddedBroker
from tests.kafka_helpers import (
    VIEWS,
    In,
    client_conf,
    comap_file,
    create_topic,
    produce,
    read_topic,
    recreate_topic,
    run_pipeline,
    tweet,
    user,
)


def tweets(ids: range) -> list[In]:
    """Tweets by users 1 (even ids) and 2 (odd ids)."""
    return [tweet(i, 1 + i % 2, f"tweet {i}") for i in ids]


def test_topics_recreated_under_a_stopped_pipeline_are_read_from_their_earliest(
    broker: EmbeddedBroker, spark: Any, fresh_topic: Callable[[str], str], tmp_path: Path
) -> None:
    conf = client_conf(broker.bootstrap_servers)
    users, tweet_topic = fresh_topic("users"), fresh_topic("tweets")
    output = fresh_topic("views")
    for topic in (users, tweet_topic):
        create_topic(conf, topic, 1)
    file = comap_file(
        tmp_path,
        broker.bootstrap_servers,
        name=fresh_topic("missing"),
        users=users,
        tweets=tweet_topic,
        output=output,
        dead_letters=fresh_topic("views.dlq"),
        on_missing_offsets="earliest",
    )
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
