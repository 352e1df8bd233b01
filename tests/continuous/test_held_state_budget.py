"""A held state budget in Spark: long batches that end early, and every view exactly once.

The tweet-views ``comap`` pipeline as a continuous query on the session's broker and Spark,
with long batches of ten minutes and a budget of held state (docs/operations.md, "Continuous
mode") of one KiB, less than its users' state alone. So the first long batch ends once it
has joined the users, and every long batch after it that joins tweets after its first
sub-batch, as a long batch ends when its time is up: its state written, and the next long
batch reading on from where it stopped, while tweets keep arriving in waves. Every user is
produced before any tweet and never updated, so each tweet yields exactly one view: the
output topic, read ``read_committed``, must hold exactly that, and the task's reports must
say why its long batches ended.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from daemon.continuous.lease_source import LongBatches
from daemon.continuous.query import start_long_batches
from daemon.model.reports import BatchCounts
from daemon.pipeline.plan import plan_pipeline
from daemon.report_socket import ReportSocket
from tests.kafka_helpers import TweetViews, produce, tweet, user

AUTHORS = 5
WAVES, PER_WAVE = 4, 5
BUDGET = 1024


def test_long_batches_that_pass_the_held_state_budget_end_early_and_lose_nothing(
    tweet_views: Callable[..., TweetViews], spark: Any
) -> None:
    views = tweet_views("held-budget")
    file = views.file()
    plan = plan_pipeline(file, file.pipeline[0], views.conf)
    ended: list[str] = []
    reports = ReportSocket({BatchCounts.kind: lambda report: ended.append(report.ended_early)})
    output = replace(plan.output, metrics_address=reports.address)
    produce(
        views.conf, views.users, [user(i, f"user {i}", 1000 + i) for i in range(1, AUTHORS + 1)]
    )
    starts = {f"{views.users}/0": 0, f"{views.tweets}/0": 0}
    batches = LongBatches(long_batch_ms=600_000, commit_interval_ms=100, held_state_budget=BUDGET)
    query = start_long_batches(
        spark, views.name, str(views.checkpoint), plan.operator, output, plan.source, starts,
        batches,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        # The users alone pass the budget: the first long batch of ten minutes ends early.
        while not query.lastProgress:
            assert time.monotonic() < deadline, "no long batch ended"
            time.sleep(0.1)
        for wave in range(WAVES):
            ids = range(wave * PER_WAVE, (wave + 1) * PER_WAVE)
            produce(views.conf, views.tweets, [tweet(i, 1 + i % AUTHORS) for i in ids])
            time.sleep(0.3)
        # Each long batch that joins tweets ends early too, and the next reads on.
        while len(views.views()) < WAVES * PER_WAVE or len(query.recentProgress) < 2:
            assert time.monotonic() < deadline, "the query did not join every tweet"
            time.sleep(0.25)
        ends = len(query.recentProgress)
    finally:
        query.stop()
        reports.close()
    assert views.views() == Counter(range(WAVES * PER_WAVE))
    assert ends >= 2
    early = [line for line in ended if line]
    assert len(early) >= ends
    assert all("ended early: held state" in line for line in early)
    assert all(line.endswith("passed the budget 1.0 KiB") for line in early)
