"""A record the output topic refuses goes to the dead-letter topic; the batch's other outputs are
written and the pipeline goes on.

Two 600 kB inputs make one 1.2 MB tweet view, more than the Kafka client's 1,000,000-byte
``message.max.bytes``. Through ``daemon replay`` here; through ``daemon run`` in
``tests/service/test_nothing_lost.py``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from daemon.broker import EmbeddedBroker
from daemon.cli import app
from daemon.formats.avro.codec import AvroCodec, load_schema_file
from tests.kafka_helpers import SCHEMAS

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "tweet-views.toml"
VIEWS = AvroCodec(load_schema_file(SCHEMAS / "tweet_view.avsc"))
LONG_NAME = "n" * 600_000
LONG_TWEET = "t" * 600_000


def write_jsonl(path: Path, lines: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    return path


def test_replay_dead_letters_a_view_too_large_for_its_topic_and_writes_the_others(
    broker: EmbeddedBroker, spark: Any, tmp_path: Path
) -> None:
    pipeline = tmp_path / "tweet-views.toml"
    text = EXAMPLE.read_text(encoding="utf-8").replace('"../', f'"{EXAMPLE.parent.parent}/')
    pipeline.write_text(f'[kafka]\nbootstrap_servers = "{broker.bootstrap_servers}"\n\n{text}')
    ada = {"id": 1, "name": LONG_NAME, "avatar": None, "updated_at": 1}
    grace = {"id": 2, "name": "grace", "avatar": None, "updated_at": 2}
    users = write_jsonl(
        tmp_path / "users.jsonl",
        [{"key": 1, "value": ada, "timestamp": 1}, {"key": 2, "value": grace, "timestamp": 2}],
    )
    long_tweet = {"id": 10, "author_id": 1, "content": LONG_TWEET}  # with ada: 1.2 MB
    tweets = write_jsonl(
        tmp_path / "tweets.jsonl",
        [
            {"key": 10, "value": long_tweet, "timestamp": 10},
            {"key": 11, "value": {"id": 11, "author_id": 1, "content": "short"}, "timestamp": 11},
            {"key": 12, "value": {"id": 12, "author_id": 2, "content": "hi"}, "timestamp": 12},
        ],
    )
    outputs, dead_letters = tmp_path / "views.jsonl", tmp_path / "dead.jsonl"
    done = CliRunner().invoke(
        app,
        [
            "replay",
            str(pipeline),
            "--input",
            f"one={users}",
            "--input",
            f"many={tweets}",
            "--output",
            str(outputs),
            "--dead-letters",
            str(dead_letters),
        ],
    )
    assert done.exit_code == 0, done.output

    views = [json.loads(line) for line in outputs.read_text().splitlines()]
    assert sorted(view["value"]["id"] for view in views) == [11, 12]
    (letter,) = [json.loads(line) for line in dead_letters.read_text().splitlines()]
    headers = letter["headers"]
    assert headers["enrichd.error.class"] == "OutputRejected"
    assert headers["enrichd.error.message"].startswith(
        "MSG_SIZE_TOO_LARGE: topic 'tweet-views.replay-"
    )
    # The tweet that made the view, by its provenance: replay's tweets topic, its first record.
    assert headers["enrichd.source.topic"].startswith("tweets.replay-")
    assert (headers["enrichd.source.partition"], headers["enrichd.source.offset"]) == ("0", "0")
    # Too large for the dead-letter topic too: the start of the view, and its whole length.
    whole = VIEWS.encode({"id": 10, "tweet": long_tweet, "author": ada})
    assert headers["enrichd.error.cut"] == str(len(whole))
    value = bytes.fromhex(letter["value"])
    assert 0 < len(value) < 1_000_000 and whole.startswith(value)
    assert letter["key"] == "10"
