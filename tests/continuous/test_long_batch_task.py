"""One task of a long batch on the real broker: read, joined and committed in sub-batches,
and an attempt that died inside it replaced by one that replays and goes on.

No Spark: the task drives the operator's calls itself (docs/architecture.md, "Continuous
mode"). The tweet-views ``comap`` pipeline; every user is produced before any tweet and never
updated, so each tweet yields exactly one view. Tweets arrive in waves while the task runs, so
that it commits several sub-batches. The first attempt stops after its second sub-batch's
commit, as a crash would; a second attempt of the same lease, with the state as of the long
batch's start (none), must replay those two with output suppressed and go on, so that the
output topic, read ``read_committed``, holds exactly one view per tweet. A task whose marker
is of a later long batch than its own stops: the checkpoint lost what the output holds.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest

from daemon.continuous.held_buckets import HeldBuckets
from daemon.continuous.lease import Lease
from daemon.continuous.operators import LeaseOperators
from daemon.continuous.task import LongBatchRun, LongBatchTask, wall_ms
from daemon.errors import CheckpointDivergedError
from daemon.model.config import load_pipeline_file
from daemon.operator.processor import JoinerProcessor
from daemon.pipeline.plan import PipelinePlan, plan_pipeline
from daemon.sink.markers import Share
from daemon.sink.sub_batches import SubBatchProducer
from daemon.sink.task_producer import forget_kept_clients
from tests.kafka_helpers import TWEETS, USERS, VIEWS, In, TweetViews, produce, read_topic

AUTHORS = 5
WAVES, PER_WAVE = 6, 10


class Crash(Exception):  # noqa: N818 - what the test does to the attempt
    """The first attempt ends here, after a commit."""


def _users(conf: dict[str, str], topic: str) -> None:
    produce(conf, topic, [
        In(USERS.encode({"id": i, "name": f"user {i}"}), str(i).encode(), 1000 + i)
        for i in range(1, AUTHORS + 1)
    ])  # fmt: skip


def _tweets_in_waves(conf: dict[str, str], topic: str, gap_s: float) -> threading.Thread:
    def waves() -> None:
        for wave in range(WAVES):
            ids = range(wave * PER_WAVE, (wave + 1) * PER_WAVE)
            produce(conf, topic, [
                In(TWEETS.encode({"id": i, "author_id": 1 + i % AUTHORS, "content": "hi"}),
                   str(i).encode(), 2000 + i)
                for i in ids
            ])  # fmt: skip
            time.sleep(gap_s)

    thread = threading.Thread(target=waves, daemon=True)
    thread.start()
    return thread


def _crash_after_two(sub: int) -> None:
    """An attempt's hook that dies as sub-batch 1 (its second) has committed."""
    if sub == 1:
        raise Crash


def _attempt(
    plan: PipelinePlan,
    lease: Lease,
    after_commit: Callable[[int], None] | None = None,
    buckets: HeldBuckets | None = None,
    bootstrap: dict[str, int] | None = None,
) -> LongBatchRun:
    """One attempt of ``lease``, with ``buckets`` as of the long batch's start (None: none)."""
    processor = JoinerProcessor(plan.operator, plan.output)
    operators = LeaseOperators([processor], [HeldBuckets() if buckets is None else buckets])
    task = LongBatchTask(
        operators,
        plan.source,
        plan.output,
        lease,
        "query",
        after_commit=after_commit,
        bootstrap=bootstrap,
    )
    return task.run()


def test_a_replaced_attempt_replays_its_sub_batches_and_goes_on_exactly_once(
    tweet_views: Callable[..., TweetViews],
) -> None:
    views = tweet_views("long")
    file = views.file()
    plan = plan_pipeline(file, file.pipeline[0], views.conf)
    _users(views.conf, views.users)
    waves = _tweets_in_waves(views.conf, views.tweets, gap_s=0.3)
    starts = {f"{views.users}/0": 0, f"{views.tweets}/0": 0}

    lease = Lease(batch=3, task=0, starts=starts, until_ms=wall_ms() + 30_000)
    try:
        with pytest.raises(Crash):
            _attempt(plan, lease, _crash_after_two)
        waves.join()
        again = Lease(batch=3, task=0, starts=starts, until_ms=wall_ms() + 1_500)
        run = _attempt(plan, again)
    finally:
        forget_kept_clients()  # before the session's broker stops

    assert run.replayed == 2
    assert run.committed >= 1
    assert run.ends == {f"{views.users}/0": AUTHORS, f"{views.tweets}/0": WAVES * PER_WAVE}
    counts: Counter[int] = Counter()
    for record in read_topic(views.conf, views.output):
        view: dict[str, Any] = VIEWS.decode(record.value or b"")
        assert view["author"]["name"] == f"user {view['tweet']['author_id']}"
        counts[view["id"]] += 1
    assert counts == Counter(range(WAVES * PER_WAVE))


def test_a_bootstrap_reads_its_partitions_to_their_ends_first_across_a_crash(
    tweet_views: Callable[..., TweetViews],
) -> None:
    """Every tweet reached Kafka before every user, and is older; user 1 was renamed last.
    Read as they arrive, user 1's tweets would be viewed under the first name, then again
    under the new one. Bootstrapping the users' partition to its end, two users a sub-batch,
    the first attempt dies after two sub-batches; the second replays them, reads the rest of
    the users, and only then the tweets: one view each, under the latest name."""
    views = tweet_views("bootstrap")
    file = views.file()
    plan = plan_pipeline(file, file.pipeline[0], views.conf)
    plan = replace(plan, source=replace(plan.source, max_records_per_batch=2))
    tweets = 12
    produce(views.conf, views.tweets, [
        In(TWEETS.encode({"id": i, "author_id": 1 + i % AUTHORS, "content": "hi"}),
           str(i).encode(), 2000 + i)
        for i in range(tweets)
    ])  # fmt: skip
    produce(views.conf, views.users, [
        In(USERS.encode({"id": i, "name": f"user {i}"}), str(i).encode(), 5000 + i)
        for i in range(1, AUTHORS + 1)
    ] + [In(USERS.encode({"id": 1, "name": "ada"}), b"1", 5010)])  # fmt: skip
    users, starts = f"{views.users}/0", {f"{views.users}/0": 0, f"{views.tweets}/0": 0}

    lease = Lease(batch=1, task=0, starts=starts, until_ms=wall_ms() + 30_000)
    try:
        with pytest.raises(Crash):
            _attempt(plan, lease, _crash_after_two, bootstrap={users: AUTHORS + 1})
        again = Lease(batch=1, task=0, starts=starts, until_ms=wall_ms() + 2_000)
        run = _attempt(plan, again, bootstrap={users: AUTHORS + 1})
    finally:
        forget_kept_clients()

    assert run.replayed == 2
    assert run.bootstrap == {}
    assert run.ends == {users: AUTHORS + 1, f"{views.tweets}/0": tweets}
    counts: Counter[int] = Counter()
    for record in read_topic(views.conf, views.output):
        view: dict[str, Any] = VIEWS.decode(record.value or b"")
        author = view["tweet"]["author_id"]
        assert view["author"]["name"] == ("ada" if author == 1 else f"user {author}")
        counts[view["id"]] += 1
    assert counts == Counter(range(tweets))


def test_a_task_whose_marker_is_of_a_later_long_batch_stops_naming_both(
    tweet_views: Callable[..., TweetViews],
) -> None:
    views = tweet_views("later")
    file = views.file()
    plan = plan_pipeline(file, file.pipeline[0], views.conf)
    later = SubBatchProducer(plan.output, 0, 7, "query")
    try:
        later.take_over()
        later.open_transaction()
        later.commit(Share(frozenset(), 1000))  # long batch 7 is in Kafka
        lease = Lease(batch=5, task=0, starts={f"{views.tweets}/0": 0}, until_ms=wall_ms())
        with pytest.raises(CheckpointDivergedError) as stopped:
            _attempt(plan, lease)
    finally:
        forget_kept_clients()
    assert str(stopped.value).startswith(
        f"pipeline {views.name!r}: task 0 runs long batch 5, but its marker says long batch 7 "
        "was written to Kafka already"
    )


def test_a_bucket_no_record_touches_still_expires_its_keys_in_the_next_long_batch(
    tweet_views: Callable[..., TweetViews],
) -> None:
    """State TTL is a timer: the next long batch wakes the users' buckets when their TTL
    passes, though no record of theirs comes and the long batch never loaded them."""
    views = tweet_views("ttl")
    views.write()
    views.path.write_text(views.path.read_text() + "state_ttl = 1000\n")  # [pipeline.options]
    file = load_pipeline_file(views.path)
    plan = plan_pipeline(file, file.pipeline[0], views.conf)
    _users(views.conf, views.users)
    starts = {f"{views.users}/0": 0, f"{views.tweets}/0": 0}
    try:
        first = HeldBuckets()
        lease = Lease(batch=1, task=0, starts=starts, until_ms=wall_ms() + 1_000)
        ended = _attempt(plan, lease, buckets=first)
        stored = dict(first.changed())
        timers = first.timers()
        # The next long batch, as Spark hands it the state the first one left.
        second = HeldBuckets(lambda key: stored.get(key), timers)
        lease = Lease(batch=2, task=0, starts=ended.ends, until_ms=wall_ms() + 2_500)
        _attempt(plan, lease, buckets=second)
    finally:
        forget_kept_clients()
    held = {key for key, blob in stored.items() if blob is not None}
    assert held and set(timers) == {key[0] for key in held}
    assert dict(second.changed()) == dict.fromkeys(held)  # every user's bucket emptied
