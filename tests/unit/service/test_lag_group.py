"""What the service commits to each query's group for lag tools, and what it does when the
broker says no (daemon.service.lag_group); the real broker's side is in
tests/service/test_observability.py."""

from __future__ import annotations

import logging
from concurrent.futures import Future
from typing import Any

import pytest

from daemon.service import lag_group
from daemon.service.lag_group import LagGroups


class RecordingAdmin:
    """Takes each request to alter a group's offsets; answers as ``failure`` says."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, list[tuple[str, int, int]]]] = []
        self.failure: Exception | None = None

    def alter_consumer_group_offsets(self, request: list[Any], **_: Any) -> dict[str, Future[Any]]:
        (group,) = request
        offsets = [(tp.topic, tp.partition, tp.offset) for tp in group.topic_partitions]
        self.requests.append((group.group_id, offsets))
        answer: Future[Any] = Future()
        if self.failure is None:
            answer.set_result(group)
        else:
            answer.set_exception(self.failure)
        return {group.group_id: answer}


@pytest.fixture
def admin(monkeypatch: pytest.MonkeyPatch) -> RecordingAdmin:
    recording = RecordingAdmin()
    monkeypatch.setattr(lag_group.connect, "admin", lambda conf: recording)
    return recording


def test_each_batchs_ends_go_to_the_querys_group_once(admin: RecordingAdmin) -> None:
    groups = LagGroups({}, "prod")
    groups.commit("views", {"tweets/1": 40, "tweets/0": 12, "users/0": 5})
    groups.commit("views", {"tweets/1": 40, "tweets/0": 12, "users/0": 5})  # an idle report
    groups.commit("views.totals", {"views/0": 7})
    groups.commit("views", {"tweets/1": 41, "tweets/0": 12, "users/0": 5})
    assert admin.requests == [
        ("prod.views", [("tweets", 0, 12), ("tweets", 1, 40), ("users", 0, 5)]),
        ("prod.views.totals", [("views", 0, 7)]),
        ("prod.views", [("tweets", 0, 12), ("tweets", 1, 41), ("users", 0, 5)]),
    ]


def test_a_refused_commit_is_one_warning_and_is_sent_again(
    admin: RecordingAdmin, caplog: pytest.LogCaptureFixture
) -> None:
    """The pipeline goes on; the same ends go again with the next report, and once the
    broker takes them an INFO line says so."""
    groups = LagGroups({}, "prod")
    admin.failure = RuntimeError("GROUP_AUTHORIZATION_FAILED")
    with caplog.at_level(logging.INFO, logger="enrichd.operations"):
        groups.commit("views", {"tweets/0": 12})
        groups.commit("views", {"tweets/0": 12})  # hears the refusal, sends them again
        groups.commit("views", {"tweets/0": 13})
        admin.failure = None
        groups.commit("views", {"tweets/0": 13})
        groups.flush()
    assert len(admin.requests) == 4
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == [
        "pipeline views: could not commit its input offsets to group prod.views for lag tools "
        "(the pipeline is not affected): GROUP_AUTHORIZATION_FAILED"
    ]
    infos = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    assert infos == ["pipeline views: its lag group prod.views is committed to again"]


def test_no_report_of_a_query_without_offsets_is_sent(admin: RecordingAdmin) -> None:
    LagGroups({}, "prod").commit("views", {})
    assert admin.requests == []
