"""A checkpoint remembers the pipeline shape that wrote it and refuses another."""

from __future__ import annotations

from pathlib import Path

import pytest

from daemon.checkpoint import SHAPE_FILE, IncompatibleCheckpointError, check_checkpoint
from daemon.config import PipelineConfig


def pipeline(tmp_path: Path, **changes: object) -> PipelineConfig:
    base = {
        "name": "views",
        "joiner": "comap",
        "checkpoint": tmp_path / "checkpoint",
        "inputs": {
            "one": {"topic": "users", "schema": "user.avsc", "key": "id"},
            "many": {"topic": "tweets", "schema": "tweet.avsc", "key": "author_id"},
        },
        "output": {"topic": "views", "schema": "view.avsc"},
        "options": {"many_id": "id"},
    }
    return PipelineConfig.model_validate({**base, **changes})


def test_the_first_start_records_the_shape_and_the_same_shape_resumes(tmp_path: Path) -> None:
    check_checkpoint(pipeline(tmp_path))
    assert (tmp_path / "checkpoint" / SHAPE_FILE).exists()
    # Options and outputs may change between runs.
    check_checkpoint(pipeline(tmp_path, options={"many_id": "id", "max_many_per_key": 5}))


def test_another_joiner_topic_or_key_is_refused_saying_what_changed(tmp_path: Path) -> None:
    check_checkpoint(pipeline(tmp_path))
    inputs = {
        "one": {"topic": "people", "schema": "user.avsc", "key": "id"},
        "many": {"topic": "tweets", "schema": "tweet.avsc", "key": "user_id"},
    }
    with pytest.raises(IncompatibleCheckpointError) as caught:
        check_checkpoint(pipeline(tmp_path, inputs=inputs))
    message = str(caught.value)
    assert "input 'many' key 'author_id' is now 'user_id'" in message
    assert "input 'one' topic 'users' is now 'people'" in message
    assert "start over" in message and "\n" not in message
    with pytest.raises(IncompatibleCheckpointError, match="joiner 'comap' is now 'asof'"):
        check_checkpoint(pipeline(tmp_path, joiner="asof"))
