"""A `select` on a joiner other than lookup, through the real broker and Spark: comap.

The tweet-views co-map writes a flat record chosen by its pipeline's `select`: the view's id,
the tweet's content, the author's name and a constant. A tweet waits for its author (comap
writes a view once the one side is known), and an author's update writes every view of hers
again (comap's fan-out), through the same select.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from daemon.broker import EmbeddedBroker
from daemon.testing import by_key
from tests.joins.select_pipelines import replay_selected, schema, selecting

PIPELINE = selecting(
    "flat-views",
    "comap",
    {
        "one": {"schema": schema("user"), "key": "id", "field": "author"},
        "many": {"schema": schema("tweet"), "key": "author_id", "field": "tweet"},
    },
    {
        "id": "id",
        "content": "tweet.content",
        "author": "author.name",
        "channel": {"value": "web"},
    },
    {"many_id": "id"},
)
FLAT = {"id": "long", "content": "string", "author": "string", "channel": "string"}


def test_a_comap_writes_the_fields_its_select_chooses(
    broker: EmbeddedBroker, spark: Any, tmp_path: Path
) -> None:
    inputs = {
        "one": [
            {"key": "1", "value": {"id": 1, "name": "Ada"}, "timestamp": 1000},
            {"key": "2", "value": {"id": 2, "name": "Bob"}, "timestamp": 3000},
            {"key": "1", "value": {"id": 1, "name": "Ada L."}, "timestamp": 4000},
        ],
        "many": [
            {"key": "10", "value": {"id": 10, "author_id": 1, "content": "hi"}, "timestamp": 2000},
            {"key": "11", "value": {"id": 11, "author_id": 2, "content": "yo"}, "timestamp": 2500},
        ],
    }
    result = replay_selected(tmp_path, broker, PIPELINE, FLAT, inputs)

    assert result.dead_letters == []
    assert by_key(result.outputs) == {
        "10": [
            {"id": 10, "content": "hi", "author": "Ada", "channel": "web"},
            {"id": 10, "content": "hi", "author": "Ada L.", "channel": "web"},  # her update
        ],
        "11": [{"id": 11, "content": "yo", "author": "Bob", "channel": "web"}],  # once he is known
    }
