"""A process killed while Spark wrote a new checkpoint's first batch: the next start runs.

Spark writes ``offsets/0`` to a hidden temporary file beside it and renames it into place; a
kill -9 between the two leaves the temporary file, and Spark refuses to start a query on a
checkpoint whose offset log has no entry but is not empty (on every restart, so the
supervisor's restarts never end). The start removes what such a kill leaves
(:func:`daemon.checkpoint.batch_logs.drop_unfinished_first_entry`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from daemon.checkpoint.layout import OFFSET_LOG, log_folder
from tests.kafka_helpers import TweetViews, produce, run_pipeline, tweet, user

TEMPORARY = ".0.9d3f3a4e-6f0e-4d0c-8d55-2b8f1b7f0c11.tmp"
"""What Spark's rename-based write of offsets/0 is called until its rename."""


def test_a_start_after_a_kill_inside_the_first_planning_joins_everything(
    spark: Any, tweet_views: Callable[..., TweetViews]
) -> None:
    setup = tweet_views("first-kill")
    file = setup.file()
    offsets = log_folder(setup.checkpoint, OFFSET_LOG)
    offsets.mkdir(parents=True)
    # What the kill left: the entry half-written, and the local file system's checksum of it.
    (offsets / TEMPORARY).write_text("v1\n", encoding="utf-8")
    (offsets / f".{TEMPORARY}.crc").write_bytes(b"crc")
    produce(setup.conf, setup.users, [user(n, f"user {n}", 1000 + n) for n in range(3)])
    produce(setup.conf, setup.tweets, [tweet(100 + n, n % 3) for n in range(6)])

    assert run_pipeline(spark, file)

    assert setup.views() == {100 + n: 1 for n in range(6)}
    assert "0" in {path.name for path in offsets.iterdir()}  # the query planned its own
