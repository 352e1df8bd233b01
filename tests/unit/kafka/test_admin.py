"""The replication factor of the topics enrichd creates: ``[kafka] replication_factor``, and
the broker's default only on the embedded broker (tests/delivery/test_kafka_sink.py shows the
refusal on another cluster)."""

from __future__ import annotations

from typing import Any

import pytest

from daemon.errors import ConfigError
from daemon.kafka import admin


class Created:
    """An admin client that records the topics it is asked to create."""

    def __init__(self) -> None:
        self.topics: list[Any] = []

    def create_topics(self, topics: list[Any]) -> dict[str, Any]:
        class Done:
            def result(self, timeout: float) -> None:
                return None

        self.topics.extend(topics)
        return {topic.topic: Done() for topic in topics}


@pytest.fixture
def created(monkeypatch: pytest.MonkeyPatch) -> Created:
    client = Created()
    monkeypatch.setattr(admin, "existing_topics", lambda conf: {"there": 1})
    monkeypatch.setattr(admin, "admin", lambda conf, errors=None: client)
    return client


def test_the_replication_factor_given_is_the_topics(
    created: Created, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(admin, "is_embedded", lambda conf: False)
    admin.create_topics({}, {"there": 1, "out": 3}, 3)
    ((topic, partitions, replication),) = [
        (t.topic, t.num_partitions, t.replication_factor) for t in created.topics
    ]
    assert (topic, partitions, replication) == ("out", 3, 3)


def test_unset_it_is_the_brokers_default_on_the_embedded_broker_only(
    created: Created, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(admin, "is_embedded", lambda conf: True)
    admin.create_topics({}, {"out": 1}, None)
    assert [t.replication_factor for t in created.topics] == [-1]
    monkeypatch.setattr(admin, "is_embedded", lambda conf: False)
    with pytest.raises(ConfigError, match="'dlq' do not exist, and .kafka. replication_factor"):
        admin.create_topics({}, {"dlq": 1, "there": 1}, None)
    admin.create_topics({}, {"there": 1}, None)  # nothing to create: nothing to refuse
    assert len(created.topics) == 1
