"""Which marker groups a reset or rescale deletes: those of the queries it replaces only."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from daemon.model.config import PipelineConfig
from daemon.pipeline import reset
from daemon.pipeline.reset import Change, StageChange, forget_markers


def test_only_the_replaced_queries_markers_go_under_the_files_prefix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    asked: list[tuple[dict[str, str], list[str]]] = []

    def delete_groups(conf: dict[str, str], starting_with: list[str]) -> list[str]:
        asked.append((conf, starting_with))
        return ["deleted"]

    monkeypatch.setattr(reset, "delete_groups", delete_groups)
    pipe: Any = PipelineConfig.model_construct(name="views", checkpoint=tmp_path / "checkpoint")
    conf = {"bootstrap.servers": "b:9092"}
    change = Change(pipe, "reset", client_conf=conf, id_prefix="staging")
    change.stages = [
        StageChange("views", tmp_path, None, {"t/0": 3}, "state dropped", query_id="q1"),
        # A second stage left as it is keeps its query, and its markers with it.
        StageChange("views.totals", tmp_path, None, None, "left as it is", query_id="q2"),
        # A checkpoint that never ran a query has no markers.
        StageChange("other", tmp_path, None, {}, "state dropped", query_id=None),
    ]
    assert forget_markers(change) == ["deleted"]
    assert asked == [(conf, ["staging.views.marker.q1.", "staging.views.sink.q1."])]
