"""A joiner that fails, through the real engine: each failure is a dead letter naming the
plugin and the call, a failed call writes nothing it yielded and leaves the key's state as it
was, and every other key (and the failing key's later records) carries on. The reason a
dead letter gives is written on Spark's workers, and a secret option its exception quotes
is masked there as on the driver.

One replay, one record per micro-batch, shows them all: a ``process`` that raises after it
yielded a view, one that yields what is no record, and an ``advance`` at the end of input that
raises (no input record: its dead letter is keyed by the join key). The test kit shows each
case alone (tests/unit/testing/test_harness_failures.py); the WARN line and the counters a
running service adds are tests/unit/service/test_monitor_batch_lines.py's.
"""

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
    """comap, except that it fails on tweets saying "boom" or "int", and at bob's end."""

    name = "fragile-comap"
    description = "comap that fails on demand."
    Options = FragileOptions

    def process(
        self, key: str, state: dict[str, Any], records: Sequence[InputRecord], ctx: JoinerContext
    ) -> Iterator[Emit | DeadLetter]:
        yield from super().process(key, state, records, ctx)  # the views first, then:
        contents = {record.value.get("content") for record in records if record.value}
        if "boom" in contents:
            options = self.options
            assert isinstance(options, FragileOptions)
            raise RuntimeError(f"boom with token {options.api_token}")
        if "int" in contents:
            yield 5  # type: ignore[misc]

    def advance(
        self, key: str, state: dict[str, Any], to: int, ctx: JoinerContext
    ) -> Iterator[Emit | DeadLetter]:
        yield from super().advance(key, state, to, ctx)
        if key == "2":
            raise RuntimeError("the end")


def line(key: int, value: dict[str, Any], timestamp: int) -> str:
    return json.dumps({"key": key, "value": value, "timestamp": timestamp}) + "\n"


def user(uid: int, name: str, version: int) -> dict[str, Any]:
    return {"id": uid, "name": name, "avatar": None, "updated_at": version}


def test_a_failing_joiner_dead_letters_each_failed_call_and_the_rest_carries_on(
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
        line(1, user(1, "ada", 1), 1)
        + line(2, user(2, "bob", 1), 2)
        + line(1, user(1, "ada v2", 2), 7)  # fans out to ada's tweets that were kept
    )
    tweets = tmp_path / "tweets.jsonl"
    tweets.write_text(
        line(10, {"id": 10, "author_id": 1, "content": "boom"}, 3)
        + line(20, {"id": 20, "author_id": 2, "content": "fine"}, 4)
        + line(11, {"id": 11, "author_id": 1, "content": "later"}, 5)
        + line(21, {"id": 21, "author_id": 2, "content": "int"}, 6)
    )

    # One record per micro-batch: each failing call fails alone, the rest goes through.
    try:
        result = replay(
            file,
            {"one": users, "many": tweets},
            max_batch=1,
            bootstrap_servers=broker.bootstrap_servers,
        )
    finally:
        registry().joiners.pop(Fragile.name)  # other tests list the installed joiners

    # Tweets 10 and 21 made views before their calls failed: none was written, and neither
    # tweet was kept in its author's state (ada's update fans out to tweet 11 alone).
    assert sorted((r["key"], r["value"]["author"]["name"]) for r in result.outputs) == [
        ("11", "ada"),
        ("11", "ada v2"),
        ("20", "bob"),
    ]
    letters = {
        (d["key"], d["headers"].get("enrichd.source.offset") is not None): d["headers"]
        for d in result.dead_letters
    }
    assert all(h["enrichd.error.class"] == "JoinerFailed" for h in letters.values())
    plugin = "joiner 'fragile-comap' of plugin 'fragile-plugin'"
    assert letters.pop(("10", True))["enrichd.error.message"] == (
        f"{plugin} raised RuntimeError('boom with token ***') in process of key '1'"
    )
    assert letters.pop(("21", True))["enrichd.error.message"] == (
        f"{plugin} broke the joiner contract in process of key '2': it yielded 5 (int), "
        "not an Emit or a DeadLetter"
    )
    # bob's end of input: no input record, so no source headers and no value; its key is the
    # join key.
    end = letters.pop(("2", False))
    assert end["enrichd.error.message"] == (
        f"{plugin} raised RuntimeError('the end') in advance at the end of input of key '2'"
    )
    assert [d["value"] for d in result.dead_letters if d["key"] == "2"] == [None]
    assert letters == {}
    assert TOKEN not in json.dumps(result.dead_letters)
