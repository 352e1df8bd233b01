"""A joiner that raises, through the real engine: its records are dead-lettered, naming the
plugin, and every other key (and the failing key's later records) carries on."""

from __future__ import annotations

import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from daemon.joiners.comap import CoMap
from daemon.model.config import load_pipeline_file
from daemon.plugin.host import Plugin, registry
from daemon.plugin.joiner import DeadLetter, Emit, InputRecord, JoinerContext
from daemon.replay import replay

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "tweet-views.toml"


class Fragile(CoMap):
    """comap, except that a tweet whose content is "boom" makes it raise."""

    name = "fragile-comap"
    description = "comap that raises on a tweet saying boom."

    def process(
        self, key: str, state: dict[str, Any], records: Sequence[InputRecord], ctx: JoinerContext
    ) -> Iterator[Emit | DeadLetter]:
        for record in records:
            if record.value and record.value.get("content") == "boom":
                raise RuntimeError("boom")
        yield from super().process(key, state, records, ctx)


def line(key: int, value: dict[str, Any], timestamp: int) -> str:
    import json

    return json.dumps({"key": key, "value": value, "timestamp": timestamp}) + "\n"


def test_a_raising_joiner_dead_letters_that_keys_batch_and_the_rest_carries_on(
    broker: Any, spark: Any, tmp_path: Path
) -> None:
    from pyspark import cloudpickle

    # Spark's workers cannot import this test module: ship the class by value.
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    registry().add(Fragile, Plugin("fragile-plugin", "fragile-dist", "0.0.1"))
    file = load_pipeline_file(EXAMPLE)
    pipe = file.pipeline[0].model_copy(update={"joiner": "fragile-comap"})
    file = file.model_copy(update={"pipeline": [pipe]})
    users = tmp_path / "users.jsonl"
    users.write_text(
        line(1, {"id": 1, "name": "ada", "avatar": None, "updated_at": 1}, 1)
        + line(2, {"id": 2, "name": "bob", "avatar": None, "updated_at": 1}, 2)
    )
    tweets = tmp_path / "tweets.jsonl"
    tweets.write_text(
        line(10, {"id": 10, "author_id": 1, "content": "boom"}, 3)
        + line(20, {"id": 20, "author_id": 2, "content": "fine"}, 4)
        + line(11, {"id": 11, "author_id": 1, "content": "later"}, 5)
    )

    # One record per micro-batch: ada's first batch fails alone, the rest go through.
    try:
        result = replay(
            file,
            {"one": users, "many": tweets},
            max_batch=1,
            bootstrap_servers=broker.bootstrap_servers,
        )
    finally:
        registry().joiners.pop(Fragile.name)  # other tests list the installed joiners

    assert sorted((r["key"], r["value"]["author"]["name"]) for r in result.outputs) == [
        ("11", "ada"),
        ("20", "bob"),
    ]
    (failed,) = result.dead_letters
    headers = failed["headers"]
    assert headers["enrichd.error.class"] == "JoinerFailed"
    assert "'fragile-comap' of plugin 'fragile-plugin'" in headers["enrichd.error.message"]
    assert "RuntimeError('boom')" in headers["enrichd.error.message"]
    assert headers["enrichd.source.offset"].isdigit()
