"""What a start refuses or sizes from the cluster's settings (DescribeConfigs' answers)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from daemon.errors import ConfigError
from daemon.kafka.topic_settings import ClusterSettings, TopicSettings
from daemon.pipeline.cluster_checks import check_cluster, markers_topic_problem
from daemon.sink.spec import RECORD_FRAMING, WriteLimits


def pipeline(timeout_ms: int, delivery: str = "exactly_once") -> tuple[Any, Any]:
    file = SimpleNamespace(kafka=SimpleNamespace(transaction_timeout=timeout_ms))
    pipe = SimpleNamespace(name="views", delivery=delivery, dead_letters="views.dlq")
    return file, pipe


def test_a_transaction_timeout_above_the_brokers_most_is_refused_naming_both() -> None:
    settings = ClusterSettings(transaction_max_timeout_ms=900_000)
    check_cluster(*pipeline(900_000), settings)
    with pytest.raises(ConfigError) as refused:
        check_cluster(*pipeline(3_600_000), settings)
    assert str(refused.value).startswith(
        "pipeline 'views': [kafka] transaction_timeout is 3600000 ms, above the brokers' "
        "transaction.max.timeout.ms of 900000 ms"
    )
    check_cluster(*pipeline(3_600_000, "at_least_once"), settings)  # no transactions
    check_cluster(*pipeline(3_600_000), ClusterSettings())  # unknown: not checked


def test_a_compacted_dead_letter_topic_is_refused() -> None:
    settings = ClusterSettings(topics={"views.dlq": TopicSettings(compacted=True)})
    with pytest.raises(ConfigError, match="dead-letter topic 'views.dlq' is compacted"):
        check_cluster(*pipeline(60_000), settings)


def test_limits_come_from_the_topics_then_the_brokers_then_the_client() -> None:
    settings = ClusterSettings(
        topics={
            "views": TopicSettings(max_message_bytes=2_000_000, compacted=True),
            "views.dlq": TopicSettings(),
        },
        message_max_bytes=500_000,
    )
    limits = WriteLimits.sized({}, settings, ["views", "views.dlq", "unknown"])
    assert limits.of_topic("views") == (
        2_000_000 - RECORD_FRAMING,
        "the topic's max.message.bytes is 2000000",
    )
    assert limits.of_topic("views.dlq")[0] == 500_000 - RECORD_FRAMING  # the brokers' default
    assert limits.compacted == {"views"}
    # The client lets through what the largest topic takes; its batches fit the smallest.
    assert limits.producer == {"message.max.bytes": 2_000_000, "batch.size": 499_900}
    # A client limit set in the file, lower, wins, and is not raised.
    lower = WriteLimits.sized({"message.max.bytes": "300000"}, settings, ["views"])
    assert lower.of_topic("views") == (300_000, "the client's message.max.bytes is 300000")
    assert "message.max.bytes" not in lower.producer
    # Nothing asked: the client's default for every topic.
    assert WriteLimits.sized({}, None, ["views"]).of_topic("views")[0] == 1_000_000


def test_a_markers_topic_that_could_lose_a_marker_is_named_with_why() -> None:
    week = 7 * 86_400_000
    assert markers_topic_problem(1, TopicSettings(retention_ms=2 * week), week) is None
    assert markers_topic_problem(1, TopicSettings(retention_ms=-1), week) is None  # for ever
    assert markers_topic_problem(1, None, week) is None  # unknown: not checked
    assert markers_topic_problem(None, TopicSettings(), week) is None
    assert markers_topic_problem(3, TopicSettings(), week) == "has 3 partitions"
    assert markers_topic_problem(1, TopicSettings(compacted=True), week) == (
        "is compacted (cleanup.policy=compact)"
    )
    assert markers_topic_problem(1, TopicSettings(retention_ms=week), week) == (
        f"keeps records {week} ms, no longer than the brokers keep group offsets ({week} ms)"
    )
