"""Reading a task's marker: a group's offset that points at a record the markers topic no
longer holds stops the pipeline, rather than be taken for "no batch committed"."""

from __future__ import annotations

from typing import Any

import pytest

from daemon.errors import CheckpointDivergedError
from daemon.sink import markers
from daemon.sink.markers import Marker, Share, task_marker


def read(monkeypatch: pytest.MonkeyPatch, offset: int, record: Marker | None) -> Any:
    """The marker of task 2, whose group's offset is ``offset`` and record ``record``."""
    monkeypatch.setattr(markers, "_committed", lambda conf, group, partition, stable: offset)
    monkeypatch.setattr(markers, "_record", lambda conf, prefix, topic, at: record)
    return task_marker({}, "enrichd", "views", "q1", 2, "views", stable=True)


def test_a_marker_record_is_read_where_its_group_points(monkeypatch: pytest.MonkeyPatch) -> None:
    found = Marker(7, Share(frozenset({"tweets/0:0-10"})))
    assert read(monkeypatch, 5, found) == found


def test_a_group_pointing_at_a_removed_record_stops_naming_both(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with pytest.raises(CheckpointDivergedError) as stopped:
        read(monkeypatch, 5, None)
    assert str(stopped.value).startswith(
        "pipeline 'views': task 2's marker group 'enrichd.views.marker.q1.2' points at offset 4 "
        "of the markers topic 'enrichd.views.markers', which no longer holds it"
    )
