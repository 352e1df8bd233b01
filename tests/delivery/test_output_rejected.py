"""A record the output topic refuses goes to the dead-letter topic; the batch's other outputs are
written and the pipeline goes on.

Two refusals in one replay. Two 600 kB inputs make one 1.2 MB tweet view, more than the Kafka
client's 1,000,000-byte ``message.max.bytes``: the client refuses it. And the broker refuses
a view it was sent (``MESSAGE_TOO_LARGE``, as a topic whose ``max.message.bytes`` is below the
client's answers), by a proxy in front of the session's broker (tests/refusing_proxy.py): the
task meets that refusal when it commits, and writes its output again. Through
``daemon replay`` here; through ``daemon run`` in ``tests/service/test_nothing_lost.py``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from daemon.broker import EmbeddedBroker
from daemon.cli import app
from daemon.formats.avro.codec import AvroCodec, load_schema_file
from daemon.verify.check import Received
from daemon.verify.readback import read_committed
from tests.committed_read import committed
from tests.kafka_helpers import SCHEMAS, client_conf
from tests.refusing_proxy import refusing

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "tweet-views.toml"
VIEWS = AvroCodec(load_schema_file(SCHEMAS / "tweet_view.avsc"))
TWEETS = AvroCodec(load_schema_file(SCHEMAS / "tweet.avsc"))
ADA = {"id": 1, "name": "n" * 600_000, "avatar": None, "updated_at": 1}
GRACE = {"id": 2, "name": "grace", "avatar": None, "updated_at": 2}
LONG_TWEET = {"id": 10, "author_id": 1, "content": "t" * 600_000}  # with ada: 1.2 MB
REFUSED = "refused by the broker"
"""The content of the tweet whose view the proxy refuses: its bytes mark the record batch."""
REFUSED_TWEET = {"id": 14, "author_id": 2, "content": REFUSED}


def write_jsonl(path: Path, lines: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    return path


def replay(bootstrap_servers: str, tmp_path: Path) -> tuple[Path, Path]:
    """``daemon replay`` of the tweet-views example through ``bootstrap_servers``.

    Returns:
        The files of its views and of its dead letters.
    """
    pipeline = tmp_path / "tweet-views.toml"
    text = EXAMPLE.read_text(encoding="utf-8").replace('"../', f'"{EXAMPLE.parent.parent}/')
    pipeline.write_text(f'[kafka]\nbootstrap_servers = "{bootstrap_servers}"\n\n{text}')
    users = write_jsonl(
        tmp_path / "users.jsonl",
        [{"key": 1, "value": ADA, "timestamp": 1}, {"key": 2, "value": GRACE, "timestamp": 2}],
    )
    tweets = write_jsonl(
        tmp_path / "tweets.jsonl",
        [
            {"key": 10, "value": LONG_TWEET, "timestamp": 10},
            {"key": 11, "value": {"id": 11, "author_id": 1, "content": "short"}, "timestamp": 11},
            {"key": 12, "value": {"id": 12, "author_id": 2, "content": "hi"}, "timestamp": 12},
            {"key": 14, "value": REFUSED_TWEET, "timestamp": 14},
            {"key": 13, "value": {"id": 13, "author_id": 2, "content": "later"}, "timestamp": 15},
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
    return outputs, dead_letters


def source_of(records: list[Received], headers: dict[str, str]) -> Received:
    """The record of ``records`` a dead letter's ``enrichd.source.*`` headers name."""
    (found,) = [
        record
        for record in records
        if (str(record.partition), str(record.offset))
        == (headers["enrichd.source.partition"], headers["enrichd.source.offset"])
    ]
    return found


def test_replay_dead_letters_views_the_client_or_the_broker_refuses_and_writes_the_others(
    broker: EmbeddedBroker, spark: Any, tmp_path: Path
) -> None:
    with refusing(broker, "tweet-views.replay-", REFUSED.encode()) as proxy:
        outputs, dead_letters = replay(proxy.bootstrap_servers, tmp_path)
    assert proxy.refused >= 1  # the broker's refusal did happen

    # The test broker hands aborted records to read_committed readers, replay's too, so the
    # view file may hold the refused task's first try again: exactly once is checked below.
    views = [json.loads(line) for line in outputs.read_text().splitlines()]
    assert {view["value"]["id"] for view in views} == {11, 12, 13}
    letters = {
        letter["key"]: letter
        for letter in (json.loads(line) for line in dead_letters.read_text().splitlines())
    }
    assert set(letters) == {"10", "14"}

    client_refused = letters["10"]["headers"]
    assert client_refused["enrichd.error.class"] == "OutputRejected"
    reason = client_refused["enrichd.error.message"]
    assert reason.startswith("MSG_SIZE_TOO_LARGE: topic 'tweet-views.replay-"), reason
    assert reason.endswith("the client's message.max.bytes is 1000000)"), reason
    # Too large for the dead-letter topic too: the start of the view, and its whole length.
    whole = VIEWS.encode({"id": 10, "tweet": LONG_TWEET, "author": ADA})
    assert client_refused["enrichd.error.cut"] == str(len(whole))
    value = bytes.fromhex(letters["10"]["value"])
    assert 0 < len(value) < 1_000_000 and whole.startswith(value)

    broker_refused = letters["14"]["headers"]
    assert broker_refused["enrichd.error.class"] == "OutputRejected"
    reason = broker_refused["enrichd.error.message"]
    output_topic = reason.split("'")[1]
    assert reason.startswith(f"MSG_SIZE_TOO_LARGE: topic '{output_topic}' refused"), reason
    assert reason.endswith("the broker answered: Broker: Message size too large)"), reason
    assert "enrichd.error.cut" not in broker_refused  # it fits the dead-letter topic whole
    assert bytes.fromhex(letters["14"]["value"]) == VIEWS.encode(
        {"id": 14, "tweet": REFUSED_TWEET, "author": GRACE}
    )

    # Each letter's provenance is the tweet that made its view, in replay's tweets topic.
    conf = client_conf(broker.bootstrap_servers)
    tweets_topic = broker_refused["enrichd.source.topic"]
    assert tweets_topic.startswith("tweets.replay-")
    assert client_refused["enrichd.source.topic"] == tweets_topic
    tweets = read_committed(conf, tweets_topic, TWEETS).records
    assert source_of(tweets, client_refused).value == LONG_TWEET
    assert source_of(tweets, broker_refused).value == REFUSED_TWEET

    # Exactly once, by what committed: each view once, each refused view one dead letter.
    written = committed(conf, output_topic, VIEWS)
    assert sorted(view.value["id"] for view in written) == [11, 12, 13]
    dead_letter_topic = output_topic.replace("tweet-views.", "tweet-views.dlq.", 1)
    assert sorted(letter.key or "" for letter in committed(conf, dead_letter_topic)) == [
        "10",
        "14",
    ]
