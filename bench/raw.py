"""The ceiling: a tight confluent-kafka + fastavro co-map loop, without Spark.

Each loop ``assign()``\\ s its partitions from offset 0 (no consumer group), consumes in
batches, decodes with fastavro, keeps the users by id and the tweets by author in plain dicts
(:class:`RawCoMap`, the ``comap`` rules: a tweet emits a view when its author is known, a
user emits a view for every stored tweet of theirs), encodes each ``TweetView`` and produces
it, keyed by the tweet id, with a batching producer. The clock runs from the first record
consumed to the last output delivered (``flush()`` returned).

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
from bench.rawjoin import Emit, RawJoin, schema
from bench.workloads import Topics


class RawCoMap(RawJoin):
    """The ``comap`` rules in plain dicts: users by id, tweets by author (roles ``one``, ``many``).

    A tweet emits a view when its author is known; a user emits a view for every stored tweet
    of theirs. Views are keyed by the tweet id, as produced.
    """

    def __init__(self, options: dict[str, Any], emit: Emit) -> None:
        super().__init__(options, emit)
        self.users: dict[int, dict[str, Any]] = {}
        self.tweets_by_author: dict[int, dict[int, dict[str, Any]]] = {}

    def apply(self, role: str, value: dict[str, Any]) -> None:
        """Apply one user (``one``) or tweet (``many``)."""
        if role == "one":
            self.users[value["id"]] = value
            for tweet in self.tweets_by_author.get(value["id"], {}).values():
                self.emit(str(tweet["id"]), {"id": tweet["id"], "tweet": tweet, "author": value})
            return
        self.tweets_by_author.setdefault(value["author_id"], {})[value["id"]] = value
        author = self.users.get(value["author_id"])
        if author is not None:
            self.emit(str(value["id"]), {"id": value["id"], "tweet": value, "author": author})

    def state_entries(self) -> int:
        """Users and tweets held."""
        return len(self.users) + sum(len(t) for t in self.tweets_by_author.values())


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

    readers = {topics.users: schema("user"), topics.tweets: schema("tweet")}
    roles = {topics.users: "one", topics.tweets: "many"}
    view_schema = schema("tweet_view")
    consumer, producer = ceiling.consumer(conf), ceiling.producer(conf)
    todo = {(t, p): ends.get(f"{t}/{p}", 0) for t, p in partitions}
    remaining = {tp: end for tp, end in todo.items() if end > 0}
    reader: Any = fastavro.schemaless_reader  # records, as the schemas say: plain dicts
    writer: Any = fastavro.schemaless_writer
    consumed = emitted = 0

    buffer = io.BytesIO()

    def emit(key: str, view: dict[str, Any]) -> None:
        nonlocal emitted
        buffer.seek(0)
        buffer.truncate()
        writer(buffer, view_schema, view)
        ceiling.send(producer, output, buffer.getvalue(), key.encode())
        emitted += 1

    join = RawCoMap({}, emit)
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
                join.apply(roles[topic], reader(io.BytesIO(message.value()), readers[topic], None))
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
