"""A start refuses a markers topic that could lose a marker, with one line (no Spark needed).

Markers are written to and read from partition 0, and a group's offset must not outlive the
marker record it points at (docs/operations.md, "The markers topic"). An operator may have
created the topic before the first start, as on a cluster where enrichd creates no topics.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from daemon.errors import ConfigError
from daemon.kafka.admin import create_topics
from daemon.kafka.names import markers_topic
from daemon.model.constants import DEFAULT_ID_PREFIX
from daemon.pipeline.plan import plan_pipeline
from tests.kafka_helpers import TweetViews

WHAT_IT_NEEDS = (
    "a markers topic needs one partition, cleanup.policy=delete and a retention.ms longer than "
    'the brokers\' offsets.retention.minutes (docs/operations.md, "The markers topic")'
)


def start(views: TweetViews) -> Any:
    file = views.file()
    return plan_pipeline(file, file.pipeline[0], views.conf)


@pytest.mark.parametrize(
    ("partitions", "config", "problem"),
    [
        (3, {}, "has 3 partitions"),
        (
            1,
            {"retention.ms": "3600000"},
            "keeps records 3600000 ms, no longer than the brokers keep group offsets "
            "(604800000 ms)",
        ),
    ],
)
def test_a_markers_topic_made_otherwise_is_refused_naming_what_it_needs(
    tweet_views: Callable[..., TweetViews], partitions: int, config: dict[str, str], problem: str
) -> None:
    views = tweet_views("markers")
    topic = markers_topic(DEFAULT_ID_PREFIX, views.name)
    create_topics(views.conf, {topic: partitions}, -1, configs={topic: config})
    with pytest.raises(ConfigError) as refused:
        start(views)
    assert str(refused.value) == f"the markers topic {topic!r} {problem}; {WHAT_IT_NEEDS}"


def test_the_markers_topic_enrichd_makes_is_accepted_at_every_start(
    tweet_views: Callable[..., TweetViews],
) -> None:
    views = tweet_views("markers")
    assert start(views).output.markers_topic == markers_topic(DEFAULT_ID_PREFIX, views.name)
    start(views)  # the topic it made the first time passes the check
