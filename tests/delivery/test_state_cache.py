"""The Python workers' cache of decoded state is never ahead of Spark's state store.

Through the real engine on the session's broker and Spark, whose Python workers (and so their
caches, ``daemon.operator.bucket_cache``) live on from one query to the next. The store is
taken back to an older committed state under the workers' feet, the way a retried batch, a
restart from the checkpoint or ``daemon reset`` takes it back: every bucket cached after it
then has a stamp the store does not hold. The logic of each case (a failed call, a write Spark
does not commit, another worker's write) is unit-tested in
``tests/unit/operator/test_bucket_store.py``.
"""

from __future__ import annotations

import shutil
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.kafka_helpers import In, TweetViews, produce, read_topic, recreate_topic, run_pipeline
from tests.state_helpers import TWEETS, USERS, VIEWS

AUTHORS = 40
"""Join keys: over most of the 32 buckets, and so both of the stateful stage's tasks."""


def _users(name: str, at: int) -> list[In]:
    return [
        In(USERS.encode({"id": i, "name": name}), str(i).encode(), at) for i in range(AUTHORS)
    ]


def _tweets(first_id: int, at: int) -> list[In]:
    return [
        In(
            TWEETS.encode({"id": first_id + i, "author_id": i, "content": "t"}),
            str(first_id + i).encode(),
            at,
        )
        for i in range(AUTHORS)
    ]


def test_buckets_cached_after_the_state_the_store_goes_back_to_are_loaded_again(
    spark: Any, tweet_views: Callable[..., TweetViews], tmp_path: Path
) -> None:
    """A bucket cached against a newer state than the store's would show in a fan-out.

    Users are joined into state and the checkpoint is copied. Tweets 1000-1039 follow, one per
    user: each worker caches buckets holding them. Then the copy is put back, so the store holds
    the users alone, and the tweet topic is made again with tweets 2000-2039 at the offsets the
    copy reads from (``on_missing_offsets = "earliest"``). A rename of every user then re-emits
    a view for every tweet the state holds: 2000-2039 only. A cached bucket used against the
    store would still hold 1000-1039 and re-emit theirs too. Delivery is at least once, so that
    no micro-batch's output is held back as written already (the exactly-once markers of the
    batches run before the copy was put back would do that).
    """
    setup = tweet_views("cached-state")
    conf, users, tweets, checkpoint = setup.conf, setup.users, setup.tweets, setup.checkpoint
    file = setup.file(
        delivery="at_least_once",
        # The tweets' topic is made again below, which a start refuses by default (its topic
        # id changed): read the new one from its earliest offset, 0, where the copy reads from.
        on_missing_offsets="earliest",
        max_records_per_batch=AUTHORS // 2,  # a few batches a step: both workers cache buckets
    )
    produce(conf, users, _users("first", 1_000))
    run_pipeline(spark, file)
    shutil.copytree(checkpoint, tmp_path / "kept")
    produce(conf, tweets, _tweets(1_000, 2_000))
    assert run_pipeline(spark, file)  # the workers now cache buckets holding tweets 1000-1039
    shutil.rmtree(checkpoint)
    shutil.copytree(tmp_path / "kept", checkpoint)
    recreate_topic(conf, tweets)
    produce(conf, tweets, _tweets(2_000, 3_000))
    produce(conf, users, _users("renamed", 4_000))
    run_pipeline(spark, file)

    views = [VIEWS.decode(out.value) for out in read_topic(conf, file.pipeline[0].output.topic)]
    renamed = Counter(view["id"] for view in views if view["author"]["name"] == "renamed")
    assert renamed == Counter(range(2_000, 2_000 + AUTHORS))
