"""Poison records go to the dead-letter topic through the real engine; good records still join.

Each keeps its record's headers, and says why under enrichd's names and Kafka Streams'
(KIP-1034); a good record's output carries its trace context (the default ``headers``)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from daemon.formats.avro.codec import AvroCodec, load_schema_file
from tests.kafka_helpers import (
    DEAD_LETTER_HEADERS,
    SCHEMAS,
    In,
    TweetViews,
    produce,
    read_topic,
    run_pipeline,
)

TRACE = ("traceparent", b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
TENANT = ("tenant", b"acme")


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
        In(b"\x00 this is not avro \xff", b"2", 1001, headers=[TRACE, TENANT]),  # 1: undecodable
        In(user_codec.encode({"id": 2, "name": "Grace"}), b"2", timestamp=1002),  # 2
    ]
    tweet_records = [
        In(tweet(100, 1), b"100", 2000, headers=[TENANT, TRACE]),  # 0
        In(b"\x02\x04", b"x", timestamp=2001),  # 1: truncated
        In(tweet(101, None), b"101", 2002, headers=[TENANT]),  # 2: no join key
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
    # Tweet 100's trace context goes on in its view; its other headers do not.
    assert by_key[b"100"].headers["traceparent"] == TRACE[1]
    assert "tenant" not in by_key[b"100"].headers
    assert "traceparent" not in by_key[b"102"].headers

    dead = read_topic(conf, dlq)
    expected = {
        (users, 1): ("UndecodableRecord", user_records[1]),
        (tweets, 1): ("UndecodableRecord", tweet_records[1]),
        (tweets, 2): ("MissingKey", tweet_records[2]),
        (tweets, 4): ("UnroutableTombstone", tweet_records[4]),
        (tweets, 6): ("UndecodableRecord", tweet_records[6]),
    }
    kept = {(users, 1): {TRACE, TENANT}, (tweets, 2): {TENANT}}
    found = {}
    for letter in dead:
        topic = letter.headers["enrichd.source.topic"].decode()
        offset = int(letter.headers["enrichd.source.offset"])
        assert letter.headers["enrichd.source.partition"] == b"0"
        found[(topic, offset)] = letter
    assert sorted(found) == sorted(expected) and len(dead) == len(expected)
    for origin, (kind, sent) in expected.items():
        letter = found[origin]
        # Every header the record had, not only the trace context its outputs carry.
        original = kept.get(origin, set())
        names = set(letter.headers) - {"__streams.errors.stacktrace"}
        assert names == DEAD_LETTER_HEADERS | {name for name, _ in original}, origin
        assert set(letter.headers.items()) >= original, origin
        assert letter.headers["enrichd.error.class"] == kind.encode(), origin
        assert letter.headers["enrichd.error.message"], origin
        assert letter.headers["__streams.errors.message"], origin
        if "__streams.errors.stacktrace" not in letter.headers:
            # Refused without an exception of its own (the source read no key, say):
            # enrichd's class, in KIP-1034's names too.
            assert letter.headers["__streams.errors.exception"] == kind.encode(), origin
        assert (letter.key, letter.value) == (sent.key, sent.value), origin
    # The source refused every one of them before the joiner ran (tweet 105's trailing byte
    # too: the field scan reads the whole record), so none has a stack trace; a joiner that
    # raises gets one (tests/unit/operator/test_processor_headers.py).
    assert not any("__streams.errors.stacktrace" in letter.headers for letter in dead)
    assert b"'author_id'" in found[(tweets, 2)].headers["enrichd.error.message"]
    assert b"left after the record" in found[(tweets, 6)].headers["enrichd.error.message"]
