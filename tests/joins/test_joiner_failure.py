"""A joiner that raises, through the real engine: its records are dead-lettered, naming the
plugin, and every other key (and the failing key's later records) carries on. The reason the
dead letter gives is written on Spark's workers, and a secret option its exception quotes is
masked there as on the driver."""

from __future__ import annotations

import json
import sys
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from daemon.joiners.comap import CoMap, CoMapOptions
from daemon.model.config import parse_pipeline_file
from daemon.plugin.host import Plugin, registry
from daemon.plugin.joiner import DeadLetter, Emit, InputRecord, JoinerContext
from daemon.replay import replay

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "tweet-views.toml"
TOKEN = f"tok-{uuid.uuid4().hex}"
"""The secret option, from the environment: it must reach no dead letter."""


class FragileOptions(CoMapOptions):
    """comap's options and a service's token."""

    api_token: str


class Fragile(CoMap):
    """comap, except that a tweet whose content is "boom" makes it raise."""

    name = "fragile-comap"
    description = "comap that raises on a tweet saying boom."
    Options = FragileOptions

    def process(
        self, key: str, state: dict[str, Any], records: Sequence[InputRecord], ctx: JoinerContext
    ) -> Iterator[Emit | DeadLetter]:
        for record in records:
            if record.value and record.value.get("content") == "boom":
                options = self.options
                assert isinstance(options, FragileOptions)
                raise RuntimeError(f"boom with token {options.api_token}")
        yield from super().process(key, state, records, ctx)


def line(key: int, value: dict[str, Any], timestamp: int) -> str:
    return json.dumps({"key": key, "value": value, "timestamp": timestamp}) + "\n"


def test_a_raising_joiner_dead_letters_that_keys_batch_and_the_rest_carries_on(
    broker: Any, spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import tomllib

    from pyspark import cloudpickle

    # Spark's workers cannot import this test module: ship the class by value.
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    registry().add(Fragile, Plugin("fragile-plugin", "fragile-dist", "0.0.1"))
    monkeypatch.setenv("ENRICHD_TEST_API_TOKEN", TOKEN)
    data = tomllib.loads(EXAMPLE.read_text())
    data["pipeline"][0]["joiner"] = "fragile-comap"
    reference = "${ENRICHD_TEST_API_TOKEN}"  # noqa: S105 - a reference, not a secret
    data["pipeline"][0]["options"]["api_token"] = reference
    file = parse_pipeline_file(EXAMPLE, data)
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
    assert "RuntimeError('boom with token ***')" in headers["enrichd.error.message"]
    assert TOKEN not in json.dumps(result.dead_letters)
    assert headers["enrichd.source.offset"].isdigit()
