"""The start-up bench's pipeline file: the example's, in either mode."""

from __future__ import annotations

from pathlib import Path

from bench.startup import _pipeline_file
from bench.workloads import Topics
from daemon.model.config import load_pipeline_file


def test_the_pipeline_file_runs_the_example_in_the_mode_asked_for(tmp_path: Path) -> None:
    topics = Topics("users-1", "tweets-1")
    for folder, long_batch_ms in (("micro", None), ("continuous", 30_000)):
        (tmp_path / folder).mkdir()
        path = _pipeline_file(tmp_path / folder, "127.0.0.1:9092", topics, "views-1", long_batch_ms)
        pipe = load_pipeline_file(path).pipeline[0]

        assert pipe.continuous == (long_batch_ms is not None)
        assert pipe.inputs["many"].topic == "tweets-1" and pipe.output.topic == "views-1"
        assert pipe.checkpoint == tmp_path / folder / "cp"
        if long_batch_ms is not None:
            assert pipe.long_batch == long_batch_ms
