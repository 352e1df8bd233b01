"""What a start refuses or sizes from the cluster's settings (DescribeConfigs' answers); which
seed state each operator of a chain starts with."""

from __future__ import annotations

import shutil
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from daemon.checkpoint.layout import seed_folder
from daemon.errors import ConfigError
from daemon.kafka.topic_settings import ClusterSettings, TopicSettings
from daemon.pipeline.cluster_checks import check_cluster, markers_topic_problem
from daemon.pipeline.plan import operator_seeds
from daemon.sink.spec import RECORD_FRAMING, WriteLimits
from daemon.state.seed import seed_of, write_seed


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


def test_each_operator_of_a_chain_takes_its_own_state_from_a_seed(tmp_path: Path) -> None:
    """In query order, the first stage's operator is Spark's last-numbered one: a chain of
    four takes seed states 3, 2, 1, 0 (``state.3/`` .. ``state/``)."""
    folder = seed_folder(tmp_path)
    write_seed(folder, {"orders/0": 4}, "rescale")
    for name in ("state", "state.1", "state.2", "state.3"):
        (folder / name).mkdir()
    seed = seed_of(tmp_path)
    assert [found.operator for found in operator_seeds("orders", 4, seed) if found] == [3, 2, 1, 0]
    assert operator_seeds("orders", 4, None) == [None] * 4
    shutil.rmtree(folder / "state.1")  # a seed made for a query of fewer operators
    with pytest.raises(ConfigError) as refused:
        operator_seeds("orders", 4, seed)
    (line,) = str(refused.value).splitlines()
    assert (
        line.startswith("pipeline 'orders': the seed in ") and "operator 3 of the chain's 4" in line
    )
