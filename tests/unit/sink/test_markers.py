"""Reading a task's marker: a group's offset that points at a record the markers topic no
longer holds stops the pipeline, rather than be taken for "no batch committed". A long
batch's sub-batch markers: their record, and the chain a new attempt reads them by."""

from __future__ import annotations

import json
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


def test_a_sub_batch_marker_reads_back_as_written_and_a_micro_batch_one_as_before() -> None:
    share = Share(frozenset({"tweets/0:10-25"}), 1200)
    sub = Marker(7, share, sub=3, first_at=40, previous_at=52)
    assert Marker.decode(sub.encode()) == sub
    assert json.loads(sub.encode())["format"] == 2  # an enrichd without sub-batches refuses it
    whole = Marker(7, share)
    assert Marker.decode(whole.encode()) == whole
    assert json.loads(whole.encode())["format"] == 1
    assert "sub" not in json.loads(whole.encode())
    with pytest.raises(ValueError, match="not a marker this enrichd reads"):
        Marker.decode(json.dumps({"format": 3, "batch": 1, "ranges": {}}).encode())


class _Record:
    """A marker record as the consumer hands it."""

    def __init__(self, offset: int, marker: Marker, task: int = 2) -> None:
        self._offset, self._value = offset, marker.encode()
        self._key = markers.record_key("q1", task)

    def offset(self) -> int:
        return self._offset

    def key(self) -> bytes:
        return self._key

    def value(self) -> bytes:
        return self._value


def chained(monkeypatch: pytest.MonkeyPatch, records: list[_Record]) -> list[Marker]:
    """Task 2's sub-batches when the topic holds ``records`` and its group points past the last."""
    end = records[-1].offset() + 1
    monkeypatch.setattr(markers, "_committed", lambda conf, group, partition, stable: end)
    monkeypatch.setattr(markers.connect, "consumer", lambda conf, own: type("C", (), {
        "close": lambda self: None})())  # fmt: skip
    monkeypatch.setattr(markers, "read_partition", lambda reader, tp, stop: iter([records]))
    last = Marker.decode(records[-1].value())
    return [marker for _, marker in markers.sub_batches({}, "enrichd", "views", "q1", 2, last)]


def test_sub_batches_follow_the_chain_past_aborted_tries_and_other_tasks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    zero, one = Marker(5, Share(), 0), Marker(5, Share(), 1, 10, 10)
    aborted, two = Marker(5, Share(time_ms=1), 2, 10, 12), Marker(5, Share(), 2, 10, 12)
    records = [
        _Record(10, zero),
        _Record(11, Marker(5, Share(), 0), task=3),
        _Record(12, one),
        _Record(13, aborted),
        _Record(14, two),
    ]
    assert chained(monkeypatch, records) == [zero, one, two]


def test_a_sub_batch_gone_from_the_topic_stops_the_replay_naming_the_long_batch(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    one, two = Marker(5, Share(), 1, 10, 10), Marker(5, Share(), 2, 10, 12)
    with pytest.raises(CheckpointDivergedError) as stopped:
        chained(monkeypatch, [_Record(12, one), _Record(14, two)])  # sub-batch 0 is gone
    assert str(stopped.value).startswith(
        "pipeline 'views': task 2 died inside long batch 5 after sub-batch 2, but the markers "
        "topic 'enrichd.views.markers' no longer holds every sub-batch marker before it"
    )
