"""``daemon state`` of a continuous checkpoint, and ``daemon rescale`` moving the state between
the modes and into another number of leases.

The tweet-views ``comap`` pipeline on the session's broker and Spark: run in continuous mode
until every view is out and stopped as ``daemon run`` stops (its long batch ends and commits,
so its leases' state is written), its state read, moved into micro-batch mode, run on, moved
back into continuous mode with two leases, run on. A user renamed after each move fans out to
exactly their tweets: the state moved with every key, and each run read on where the last
one stopped, reading nothing twice.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from daemon.broker import EmbeddedBroker
from daemon.checkpoint.batch_logs import last_committed
from daemon.state.render import to_json
from tests.state_helpers import Tweets, daemon, joined, run_continuous, tweet, user

CONTINUOUS = {"mode": "continuous", "long_batch": 600_000}
"""Long batches that only a stop ends, so that each run's state is written by its stop."""


def _run_continuous(spark: Any, tweets: Tweets, done: Any) -> None:
    """Run the pipeline in continuous mode until ``done(views)``, then stop it as the daemon
    does."""
    run_continuous(spark, tweets.path, tweets.setup.servers, lambda: done(tweets.views()))


def _named(tweets: Tweets, name: str) -> Counter[int]:
    return Counter(view["id"] for view in tweets.views() if view["author"]["name"] == name)


def test_state_and_rescale_move_a_continuous_pipeline_into_micro_batches_and_back(
    broker: EmbeddedBroker, spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tweets = Tweets(broker, tmp_path, buckets=8, partitions=2, **CONTINUOUS)
    tweets.produce(
        users=[user(i, 1000 + i) for i in range(6)],
        tweets=[tweet(t, t % 6, 2000 + t) for t in range(12)],
    )
    _run_continuous(spark, tweets, lambda views: len(views) >= 12)
    shown = json.loads(daemon(capsys, "state", str(tweets.path), "--key", "3").out)
    assert shown["long_batch"] == last_committed(tweets.checkpoint)
    assert shown["state"] == to_json(joined(tweets).states["3"])
    whole = json.loads(daemon(capsys, "state", str(tweets.path), "--summary").out)
    assert whole["keys"] == 6 and sum(b["stashed_values"] for b in whole["buckets"]) == 12

    tweets.write(buckets=4, partitions=2)  # micro-batch mode, the default
    done = daemon(capsys, "rescale", str(tweets.path), "--yes")
    assert done.code == 0, done.err
    assert (
        "from 8 buckets over 2 shuffle partitions in continuous mode, 1 lease into 4 buckets "
        "over 2 shuffle partitions in micro-batch mode"
    ) in done.out
    tweets.produce(users=[user(3, 5000, "renamed")])
    assert tweets.run(spark)
    assert _named(tweets, "renamed") == {3: 1, 9: 1}

    tweets.write(buckets=4, partitions=2, leases=2, **CONTINUOUS)
    done = daemon(capsys, "rescale", str(tweets.path), "--yes")
    assert done.code == 0, done.err
    assert "in micro-batch mode into 4 buckets over 2 shuffle partitions in continuous " in (
        done.out
    )
    tweets.produce(users=[user(3, 6000, "again")], tweets=[tweet(12, 3, 7000)])
    _run_continuous(spark, tweets, lambda views: len(views) >= 12 + 2 + 3)
    assert _named(tweets, "again") == {3: 1, 9: 1, 12: 1}
    assert Counter(view["id"] for view in tweets.views()) == {
        **{t: 1 for t in range(13) if t % 6 != 3},
        3: 3,  # as joined first, renamed, and again
        9: 3,
        12: 1,
    }
    moved = json.loads(daemon(capsys, "state", str(tweets.path), "--key", "3").out)
    assert moved["state"]["one"]["name"] == "again"
