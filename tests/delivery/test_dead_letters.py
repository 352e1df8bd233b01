"""Poison records go to the dead-letter topic through the real engine; good records still join."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from daemon.formats.avro.codec import AvroCodec, load_schema_file
from tests.kafka_helpers import SCHEMAS, In, TweetViews, produce, read_topic, run_pipeline

HEADERS = {
    "enrichd.source.topic",
    "enrichd.source.partition",
    "enrichd.source.offset",
    "enrichd.error.class",
    "enrichd.error.message",
}


def loose_tweet_schema(folder: Path) -> Path:
    """tweet.avsc with a nullable ``author_id``, so a tweet can lack its join key."""
    raw = json.loads((SCHEMAS / "tweet.avsc").read_text(encoding="utf-8"))
    for spec in raw["fields"]:
        if spec["name"] == "author_id":
            spec["type"], spec["default"] = ["null", "long"], None
    path = folder / "loose_tweet.avsc"
    path.write_text(json.dumps(raw), encoding="utf-8")
    return path


def test_poison_records_reach_the_dead_letter_topic_and_good_ones_join(
    spark: Any, tweet_views: Callable[..., TweetViews], tmp_path: Path
) -> None:
    setup = tweet_views("dlq")
    conf, users, tweets = setup.conf, setup.users, setup.tweets
    output, dlq = setup.output, setup.dead_letters
    file = setup.file()
    loose_path = loose_tweet_schema(tmp_path)
    pipe = file.pipeline[0]
    many = pipe.inputs["many"].model_copy(update={"schema_file": loose_path})
    file = file.model_copy(
        update={"pipeline": [pipe.model_copy(update={"inputs": {**pipe.inputs, "many": many}})]}
    )
    user_codec = AvroCodec(load_schema_file(SCHEMAS / "user.avsc"))
    tweet_codec = AvroCodec(load_schema_file(loose_path))

    def tweet(i: int, author: int | None) -> bytes:
        return tweet_codec.encode({"id": i, "author_id": author, "content": f"tweet {i}"})

    user_records = [
        In(user_codec.encode({"id": 1, "name": "Ada"}), b"1", timestamp=1000),  # 0
        In(b"\x00 this is not avro \xff", b"2", timestamp=1001),  # 1: undecodable
        In(user_codec.encode({"id": 2, "name": "Grace"}), b"2", timestamp=1002),  # 2
    ]
    tweet_records = [
        In(tweet(100, 1), b"100", timestamp=2000),  # 0
        In(b"\x02\x04", b"x", timestamp=2001),  # 1: truncated
        In(tweet(101, None), b"101", timestamp=2002),  # 2: no join key
        In(tweet(102, 2), b"102", timestamp=2003),  # 3
        In(None, b"103", timestamp=2004),  # 4: many-side tombstone
        In(tweet(104, 1), b"104", timestamp=2005),  # 5
        In(tweet(105, 2) + b"\x00", b"105", timestamp=2006),  # 6: trailing bytes
    ]
    produce(conf, users, user_records)
    produce(conf, tweets, tweet_records)

    run_pipeline(spark, file)

    views = read_topic(conf, output)
    view_codec = AvroCodec(load_schema_file(SCHEMAS / "tweet_view.avsc"))
    by_key = {v.key: v for v in views}
    assert sorted(v.key or b"" for v in views) == [b"100", b"102", b"104"]
    for key, author, offset in ((b"100", "Ada", 0), (b"102", "Grace", 3), (b"104", "Ada", 5)):
        value = view_codec.decode(by_key[key].value or b"")
        assert value["id"] == int(key) and value["author"]["name"] == author
        assert value["tweet"]["content"] == f"tweet {int(key)}"
        # Each view names the tweet that made it (every user came first in event time).
        assert by_key[key].headers["enrichd.source.topic"] == tweets.encode()
        assert by_key[key].headers["enrichd.source.offset"] == str(offset).encode()

    dead = read_topic(conf, dlq)
    expected = {
        (users, 1): ("UndecodableRecord", user_records[1]),
        (tweets, 1): ("UndecodableRecord", tweet_records[1]),
        (tweets, 2): ("MissingKey", tweet_records[2]),
        (tweets, 4): ("UnroutableTombstone", tweet_records[4]),
        (tweets, 6): ("UndecodableRecord", tweet_records[6]),
    }
    found = {}
    for letter in dead:
        assert set(letter.headers) == HEADERS, letter.headers
        topic = letter.headers["enrichd.source.topic"].decode()
        offset = int(letter.headers["enrichd.source.offset"])
        assert letter.headers["enrichd.source.partition"] == b"0"
        found[(topic, offset)] = letter
    assert sorted(found) == sorted(expected) and len(dead) == len(expected)
    for origin, (kind, sent) in expected.items():
        letter = found[origin]
        assert letter.headers["enrichd.error.class"] == kind.encode(), origin
        assert letter.headers["enrichd.error.message"], origin
        assert (letter.key, letter.value) == (sent.key, sent.value), origin
    assert b"'author_id'" in found[(tweets, 2)].headers["enrichd.error.message"]
    assert b"left after the record" in found[(tweets, 6)].headers["enrichd.error.message"]
