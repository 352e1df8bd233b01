"""A start against the markers: a checkpoint behind them, or one whose markers expired with a
batch pending, stops with one line; nothing is asked of a new checkpoint."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from daemon.checkpoint.layout import COMMIT_LOG, OFFSET_LOG, log_folder, metadata_file
from daemon.errors import CheckpointDivergedError
from daemon.pipeline import marker_check
from daemon.pipeline.marker_check import check_markers
from daemon.sink.markers import Marker, Share
from daemon.sink.spec import OutputSpec

SPEC = OutputSpec("views", {}, "exactly_once", "views")


def checkpoint(folder: Path, planned: int, committed: int) -> Path:
    metadata_file(folder).parent.mkdir(parents=True, exist_ok=True)
    metadata_file(folder).write_text(json.dumps({"id": "q1"}))
    for log, last in ((OFFSET_LOG, planned), (COMMIT_LOG, committed)):
        log_folder(folder, log).mkdir(parents=True, exist_ok=True)
        for batch in range(last + 1):
            (log_folder(folder, log) / str(batch)).write_text("v1")
    return folder


def markers(monkeypatch: pytest.MonkeyPatch, found: dict[int, Marker]) -> list[str]:
    asked: list[str] = []

    def query_markers(conf: object, prefix: str, pipeline: str, query: str, out: str) -> dict:
        asked.append(query)
        return found

    monkeypatch.setattr(marker_check, "query_markers", query_markers)
    return asked


def test_a_marker_ahead_of_the_checkpoint_stops_naming_both(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    share = Share(frozenset({"tweets/0:15-30"}))
    markers(monkeypatch, {0: Marker(1, share), 1: Marker(0, Share())})
    with pytest.raises(CheckpointDivergedError) as stopped:
        check_markers(SPEC, checkpoint(tmp_path, 0, 0))
    assert str(stopped.value).startswith(
        f"pipeline 'views': checkpoint {tmp_path} ends at micro-batch 0, but task 0's marker "
        "says micro-batch 1 (tweets/0 offsets 15-30) is written to Kafka: the checkpoint was "
        "rewound"
    )


def test_markers_gone_stop_a_pending_batch_and_only_warn_otherwise(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    markers(monkeypatch, {})
    with pytest.raises(CheckpointDivergedError, match="micro-batch 2 of checkpoint .* was planned"):
        check_markers(SPEC, checkpoint(tmp_path / "pending", 2, 1))
    with caplog.at_level(logging.WARNING, logger="enrichd.service"):
        assert check_markers(SPEC, checkpoint(tmp_path / "clean", 2, 2)) == {}
    (line,) = [r.getMessage() for r in caplog.records]
    assert "none of the pipeline's batch markers" in line and "it goes on" in line


def test_nothing_is_asked_of_a_new_checkpoint_or_at_least_once(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    asked = markers(monkeypatch, {0: Marker(9)})
    assert check_markers(SPEC, tmp_path / "new") == {}
    at_least_once = OutputSpec("views", {}, "at_least_once", "views")
    assert check_markers(at_least_once, checkpoint(tmp_path, 0, 0)) == {}
    assert asked == []
