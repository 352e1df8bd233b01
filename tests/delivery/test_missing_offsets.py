"""Offsets the broker no longer has, lost under a stopped pipeline: records removed with
DeleteRecords and a topic deleted and created again.

``on_missing_offsets = "fail"`` refuses to start with one line; ``"earliest"`` reads on from
what the broker has. What ``daemon run`` shows of them (``/readyz``, the WARN line, metrics,
``"latest"``) is tested in ``tests/service/test_nothing_lost.py``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from daemon.broker import EmbeddedBroker
from daemon.errors import failure_reason
from daemon.formats.avro.codec import AvroCodec, load_schema_file
from tests.kafka_helpers import (
    SCHEMAS,
    In,
    client_conf,
    comap_file,
    create_topic,
    delete_records_before,
    produce,
    read_topic,
    recreate_topic,
    run_pipeline,
)

USERS = AvroCodec(load_schema_file(SCHEMAS / "user.avsc"))
TWEETS = AvroCodec(load_schema_file(SCHEMAS / "tweet.avsc"))
VIEWS = AvroCodec(load_schema_file(SCHEMAS / "tweet_view.avsc"))


def user(user_id: int, name: str, timestamp: int) -> In:
    return In(USERS.encode({"id": user_id, "name": name}), str(user_id).encode(), timestamp)


def tweets(ids: range) -> list[In]:
    """Tweets by users 1 (even ids) and 2 (odd ids)."""
    return [
        In(
            TWEETS.encode({"id": i, "author_id": 1 + i % 2, "content": f"tweet {i}"}),
            str(i).encode(),
            timestamp=10_000 + i,
        )
        for i in ids
    ]


def test_records_removed_and_a_topic_recreated_fail_or_are_read_on_from_the_earliest(
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
    )
    produce(conf, users, [user(1, "ada", 1_000), user(2, "grace", 1_001)])
    produce(conf, tweet_topic, tweets(range(10)))
    run_pipeline(spark, file)  # it has read users 0-1 and tweets 0-9: it needs 2 and 10 next

    # Stopped, it loses what it had not read yet: tweets 10-14, and every user.
    produce(conf, tweet_topic, tweets(range(10, 20)))
    assert delete_records_before(conf, tweet_topic, 0, 15) == 15
    recreate_topic(conf, users)
    produce(conf, users, [user(1, "ada again", 30_000)])  # offset 0 of the new topic

    with pytest.raises(Exception) as failed:  # noqa: PT011 - Spark's own exception class
        run_pipeline(spark, file)
    assert failure_reason(str(failed.value)) == (
        f"pipeline '{file.pipeline[0].name}': input topic '{tweet_topic}' partition 0 no longer "
        "has offset 10: the earliest it has is 15 (retention or DeleteRecords removed the "
        'records before it); set on_missing_offsets = "earliest" or "latest" to read on from '
        "there, or move its start with `daemon reset`"
    )

    pipe = file.pipeline[0].model_copy(update={"on_missing_offsets": "earliest"})
    run_pipeline(spark, file.model_copy(update={"pipeline": [pipe]}))
    names: dict[int, str] = {}
    for record in read_topic(conf, output):
        view = VIEWS.decode(record.value or b"")
        names[view["id"]] = view["author"]["name"]  # the latest view of each tweet
    # Tweets 10-14 were gone; the new users topic was read from its first record, whose
    # update of ada's name was applied to every tweet of hers.
    kept = [*range(10), *range(15, 20)]
    assert names == {i: "ada again" if i % 2 == 0 else "grace" for i in kept}
