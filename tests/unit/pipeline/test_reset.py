"""Which marker groups a reset or rescale deletes: those of the queries it replaces only; what
a rescale changes, in words."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from daemon.model.config import PipelineConfig, PipelineFile, SparkConfig
from daemon.pipeline import reset, written_by
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


def test_a_checkpoint_of_another_pyspark_minor_version_is_rescaled_into_this_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``daemon rescale`` finds nothing to do only when the layout and pyspark's minor match."""
    monkeypatch.setattr(written_by, "running", lambda: {"enrichd": "0.2.0", "pyspark": "4.3.1"})
    file: Any = PipelineFile.model_construct(spark=SparkConfig())
    pipe: Any = PipelineConfig.model_construct(checkpoint=tmp_path / "cp", state_buckets=32)
    made = {"state": {"format": 2, "buckets": 32}, "written_by": {"pyspark": "4.3.0"}}
    old, new = reset.layout_of(file, pipe, made)
    assert old == new == "32 buckets over 2 shuffle partitions"
    made["written_by"] = {"pyspark": "4.2.1"}
    assert reset.layout_of(file, pipe, made) == (
        "32 buckets over 2 shuffle partitions of pyspark 4.2.1",
        "32 buckets over 2 shuffle partitions of pyspark 4.3.1",
    )
