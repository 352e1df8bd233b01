"""The ceiling: a tight confluent-kafka + fastavro co-map loop, without Spark.

Each loop ``assign()``\\ s its partitions from offset 0 (no consumer group), consumes in
batches, decodes with fastavro, keeps the users by id and the tweets by author in plain dicts
(the ``comap`` semantics: a tweet emits a view when its author is known, a user emits a view
for every stored tweet of theirs), encodes each ``TweetView`` and produces it, keyed by the
tweet id, with a batching producer. The clock runs from the first record consumed to the
last output delivered (``flush()`` returned).

With two processes, each reads every user partition and one tweet partition, so the two
hold disjoint tweets and together emit exactly the views one process would; the input rate
counts each input record once (the users, read twice, are a small part of the input).
"""

from __future__ import annotations

import io
import time
from typing import Any

import fastavro

from bench import ceiling
from bench.ceiling import LoopResult, RawResult
from bench.workloads import SCHEMAS, Topics


def _schema(name: str) -> Any:
    return fastavro.schema.load_schema(str(SCHEMAS / f"{name}.avsc"))


def comap_loop(
    conf: dict[str, str],
    topics: Topics,
    partitions: list[tuple[str, int]],
    ends: dict[str, int],
    output: str,
    go: Any = None,
) -> LoopResult:
    """Co-map ``partitions`` (topic, partition) up to ``ends`` into ``output``.

    ``go``, when given, is an event to wait for after the clients are set up, so several
    processes start consuming together.
    """
    from confluent_kafka import TopicPartition

    user_schema, tweet_schema, view_schema = (
        _schema("user"),
        _schema("tweet"),
        _schema("tweet_view"),
    )
    consumer, producer = ceiling.consumer(conf), ceiling.producer(conf)
    todo = {(t, p): ends.get(f"{t}/{p}", 0) for t, p in partitions}
    remaining = {tp: end for tp, end in todo.items() if end > 0}
    users: dict[int, dict[str, Any]] = {}
    tweets_by_author: dict[int, dict[int, dict[str, Any]]] = {}
    reader: Any = fastavro.schemaless_reader  # records, as the schemas say: plain dicts
    writer: Any = fastavro.schemaless_writer
    consumed = emitted = 0

    buffer = io.BytesIO()

    def emit(tweet: dict[str, Any], author: dict[str, Any], key: bytes) -> None:
        buffer.seek(0)
        buffer.truncate()
        writer(buffer, view_schema, {"id": tweet["id"], "tweet": tweet, "author": author})
        ceiling.send(producer, output, buffer.getvalue(), key)

    if go is not None:
        go.wait()
    consumer.assign([TopicPartition(t, p, 0) for t, p in partitions])
    first = 0.0
    try:
        while remaining:
            messages: list[Any] = consumer.consume(num_messages=10_000, timeout=0.5)
            if messages and not first:
                first = time.monotonic()
            for message in messages:
                if message.error() is not None:
                    continue
                consumed += 1
                topic, offset = message.topic(), message.offset()
                where = (topic, message.partition())
                if where in remaining and offset + 1 >= remaining[where]:
                    del remaining[where]
                if topic == topics.users:
                    author = reader(io.BytesIO(message.value()), user_schema, None)
                    users[author["id"]] = author
                    for tweet in tweets_by_author.get(author["id"], {}).values():
                        emit(tweet, author, str(tweet["id"]).encode())
                        emitted += 1
                else:
                    tweet = reader(io.BytesIO(message.value()), tweet_schema, None)
                    stored = tweets_by_author.setdefault(tweet["author_id"], {})
                    stored[tweet["id"]] = tweet
                    known = users.get(tweet["author_id"])
                    if known is not None:
                        emit(tweet, known, message.key())  # the tweet id, as produced
                        emitted += 1
            producer.poll(0)
        done = ceiling.delivered(producer)
    finally:
        consumer.close()
    return LoopResult(first, done, consumed, emitted)


def run_ceiling(
    conf: dict[str, str],
    topics: Topics,
    ends: dict[str, int],
    output: str,
    processes: int,
    input_records: int,
) -> RawResult:
    """Measure the ceiling with one process (this one) or several (spawned, one per partition)."""
    user_parts = sorted(_partitions(ends, topics.users))
    tweet_parts = sorted(_partitions(ends, topics.tweets))
    shares = [
        (conf, topics, user_parts + tweet_parts[i::processes], ends, output)
        for i in range(processes)
    ]
    return ceiling.run_processes(comap_loop, shares, input_records)


def _partitions(ends: dict[str, int], topic: str) -> list[tuple[str, int]]:
    found = []
    for name in ends:
        name_topic, _, partition = name.rpartition("/")
        if name_topic == topic:
            found.append((topic, int(partition)))
    return found
