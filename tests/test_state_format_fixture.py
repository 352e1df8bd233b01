"""The kept checkpoint of state format 1 (``tests/fixtures/checkpoint_format_1.py``) still reads.

A checkpoint made by an earlier build is what an upgrade meets: this one is made once and
kept, so a change that can no longer read its state fails here.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from daemon.broker import EmbeddedBroker
from daemon.checkpoint import SHAPE_FILE
from daemon.state.render import to_json
from tests.fixtures.checkpoint_format_1 import FIXTURE, TWEETS, USERS, pipeline
from tests.state_helpers import daemon, joined, tweet


def test_the_kept_checkpoint_shows_its_state_and_the_engine_reads_on_from_it(
    broker: EmbeddedBroker, spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each key's state as ``daemon state`` shows it is what the joiner holds after the
    fixture's records; then a new tweet by user 2, run by the engine on the checkpoint, is
    viewed with the name the state kept (user 2 was renamed), and nothing else is read."""
    size = sum(path.stat().st_size for path in FIXTURE.rglob("*") if path.is_file())
    assert size < 1_000_000
    kept = pipeline(broker, tmp_path)
    shutil.copytree(FIXTURE, kept.checkpoint)
    moved_to(kept.checkpoint)
    shape = json.loads((kept.checkpoint / SHAPE_FILE).read_text())
    assert shape["state"] == {"format": 1, "buckets": 4}
    # The same records again, at the offsets the checkpoint read them from.
    kept.produce(users=USERS, tweets=TWEETS)

    expected = joined(kept).states
    assert sorted(expected) == ["1", "2", "3", "4", "5"]
    for key, state in expected.items():
        done = daemon(capsys, "state", str(kept.path), "--key", key)
        assert done.code == 0, done.err
        assert json.loads(done.out)["state"] == to_json(state)

    kept.produce(tweets=[tweet(100, 2, 4000)])
    assert kept.run(spark) == [1]
    views = kept.views()
    assert [(view["id"], view["author"]["name"]) for view in views] == [(100, "renamed")]


def moved_to(checkpoint: Path) -> None:
    """Make Spark's operator metadata name the state schema file where the copy has it.

    Spark records that file by its absolute path, which was the maker's folder; an operator's
    checkpoint stays where it was made. The metadata's checksum file goes with the old text
    (Hadoop reads a file without one unchecked).
    """
    for metadata in checkpoint.glob("state/*/_metadata/v2/*"):
        if metadata.name.startswith("."):
            continue
        text = metadata.read_text(encoding="utf-8")
        moved = re.sub(r'"file:[^"]*?(/state/\d+/_stateSchema/)', rf'"file:{checkpoint}\1', text)
        assert moved != text, "the metadata names no state schema file"
        metadata.write_text(moved, encoding="utf-8")
        (metadata.parent / f".{metadata.name}.crc").unlink()
