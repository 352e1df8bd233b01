"""State buckets: stable labels that Spark's shuffle deals out evenly to the stateful tasks."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest

from daemon.formats.avro.codec import AvroCodec, load_schema_file
from daemon.model.config import DEFAULT_STATE_BUCKETS
from daemon.model.record_route import bucket_labels, bucket_of
from tests.kafka_helpers import (
    SCHEMAS,
    In,
    TweetViews,
    await_committed,
    process_all,
    produce,
    read_topic,
)


@pytest.mark.parametrize("buckets", [1, 32, 256])
def test_every_bucket_has_its_own_label(buckets: int) -> None:
    assert len(set(bucket_labels(buckets))) == buckets
    assert {bucket_of(str(key), buckets) for key in range(50 * buckets)} == set(
        bucket_labels(buckets)
    )


def test_a_key_keeps_its_bucket_across_processes_and_releases() -> None:
    # A checkpoint's state is found by these labels: changing them loses every key's state.
    # These are what the current layout (`checkpoint.state_layout`) writes with the default
    # 32 buckets and with 256; a change here needs a new checkpoint layout.
    assert DEFAULT_STATE_BUCKETS == 32
    assert [bucket_of(key) for key in ("1", "user-42", "")] == [75, 3, 12]
    assert [bucket_of(key, 256) for key in ("1", "user-42", "")] == [147, 85, 12]


@pytest.mark.parametrize("buckets", [32, 256])
@pytest.mark.parametrize("partitions", [1, 2, 4, 8, 16])
def test_sparks_shuffle_gives_each_partition_as_many_buckets(
    spark: Any, partitions: int, buckets: int
) -> None:
    from pyspark.sql import functions as F  # noqa: N812

    labels = bucket_labels(buckets)
    frame = spark.createDataFrame([(label,) for label in labels], "bucket int")
    placed = frame.select(F.pmod(F.hash("bucket"), F.lit(partitions)).alias("p")).collect()
    assert Counter(row.p for row in placed) == dict.fromkeys(
        range(partitions), buckets // partitions
    )


def test_a_pipeline_keeps_its_keys_in_as_many_buckets_as_it_sets(
    spark: Any, tweet_views: Callable[..., TweetViews]
) -> None:
    """With ``state_buckets = 2`` the state operator holds at most 2 bucket values, their 2
    stamps (``[state] cache``, on by default) and 2 stash chunks for 10 authors' tweets of
    one batch; the default 32 would hold about 30: over 4 buckets, each with a value and a
    stamp, are already more than 6 rows."""
    from daemon.pipeline.plan import plan_pipeline, start_query
    from daemon.spark.session import TRACK_STATE_ROWS

    users_codec = AvroCodec(load_schema_file(SCHEMAS / "user.avsc"))
    tweets_codec = AvroCodec(load_schema_file(SCHEMAS / "tweet.avsc"))
    views_codec = AvroCodec(load_schema_file(SCHEMAS / "tweet_view.avsc"))
    setup = tweet_views("buckets", partitions=2)
    conf, users, tweets, output = setup.conf, setup.users, setup.tweets, setup.output
    file = setup.file(buckets=2)
    authors = range(1, 11)
    produce(
        conf,
        users,
        [
            In(users_codec.encode({"id": i, "name": f"user {i}"}), str(i).encode(), 1000 + i)
            for i in authors
        ],
    )
    produce(
        conf,
        tweets,
        [
            In(
                tweets_codec.encode({"id": t, "author_id": 1 + t % 10, "content": f"tweet {t}"}),
                str(t).encode(),
                10_000 + t,
            )
            for t in range(30)
        ],
    )
    (pipe,) = file.pipeline
    # enrichd's session has Spark not count state rows; a query reads the setting as it starts.
    spark.conf.set(TRACK_STATE_ROWS, "true")
    try:
        query = start_query(spark, plan_pipeline(file, pipe, conf))
    finally:
        spark.conf.set(TRACK_STATE_ROWS, "false")
    try:
        process_all(query)
        await_committed(pipe.checkpoint, 120)
        (state,) = query.lastProgress["stateOperators"]
    finally:
        query.stop()
    assert len({bucket_of(str(i)) for i in authors}) > 4  # what 32 buckets would spread
    assert 1 <= state["numRowsTotal"] <= 6
    views = [views_codec.decode(r.value or b"") for r in read_topic(conf, output)]
    assert sorted(v["id"] for v in views) == list(range(30))
    assert all(v["author"]["id"] == v["tweet"]["author_id"] for v in views)
