"""Long batches in Spark: a lease's task per long batch, stopped mid-batch and started again.

The tweet-views ``comap`` pipeline as a continuous query (docs/architecture.md, "Continuous
mode") on the session's broker and Spark: long batches of two seconds, a sub-batch every
100 ms. Every user is produced before any tweet and never updated, so each tweet yields
exactly one view; tweets arrive in waves, from when the first long batch has ended. The query
is stopped inside the next long batch, while tweets keep arriving (its task killed between
sub-batch commits, as a crash would) and started again on its checkpoint:
Spark runs the unfinished long batch again, whose task replays what was committed of it and
goes on, and the next long batch starts where it stopped. The output topic, read
``read_committed``, must hold exactly one view per tweet. With two leases, each reads every
partition and joins its half of the state buckets (a view twice or none would say otherwise),
and each replays its own sub-batches.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest

from daemon.continuous.lease_source import LongBatches
from daemon.continuous.query import start_long_batches
from daemon.pipeline.plan import PipelinePlan, plan_pipeline
from tests.kafka_helpers import TWEETS, USERS, In, TweetViews, produce

AUTHORS = 5
WAVES, PER_WAVE = 16, 5


def _start(spark: Any, views: TweetViews, plan: PipelinePlan, leases: int) -> Any:
    starts = {f"{views.users}/0": 0, f"{views.tweets}/0": 0}
    batches = LongBatches(leases=leases, long_batch_ms=2_000, commit_interval_ms=100)
    return start_long_batches(
        spark, views.name, str(views.checkpoint), plan.operator, plan.output, plan.source,
        starts, batches,
    )  # fmt: skip


@pytest.mark.parametrize("leases", [1, 2])
def test_a_continuous_query_stopped_inside_a_long_batch_goes_on_exactly_once(
    tweet_views: Callable[..., TweetViews], spark: Any, leases: int
) -> None:
    views = tweet_views("continuous")
    file = views.file()
    plan = plan_pipeline(file, file.pipeline[0], views.conf)
    produce(views.conf, views.users, [
        In(USERS.encode({"id": i, "name": f"user {i}"}), str(i).encode(), 1000 + i)
        for i in range(1, AUTHORS + 1)
    ])  # fmt: skip

    def waves() -> None:
        for wave in range(WAVES):
            produce(views.conf, views.tweets, [
                In(TWEETS.encode({"id": i, "author_id": 1 + i % AUTHORS, "content": "hi"}),
                   str(i).encode(), 2000 + i)
                for i in range(wave * PER_WAVE, (wave + 1) * PER_WAVE)
            ])  # fmt: skip
            time.sleep(0.25)

    producing = threading.Thread(target=waves, daemon=True)
    query = _start(spark, views, plan, leases)
    try:
        deadline = time.monotonic() + 120
        while not query.lastProgress:  # a first long batch ended: the next one is running
            assert time.monotonic() < deadline, "no long batch ended"
            time.sleep(0.1)
        producing.start()
        time.sleep(1.5)  # tweets keep arriving: the long batch has committed sub-batches
    finally:
        query.stop()
    producing.join()
    query = _start(spark, views, plan, leases)
    try:
        deadline = time.monotonic() + 120
        while len(views.views()) < WAVES * PER_WAVE:
            assert time.monotonic() < deadline, "the restarted query did not catch up"
            time.sleep(0.25)
    finally:
        query.stop()
    assert views.views() == Counter(range(WAVES * PER_WAVE))
