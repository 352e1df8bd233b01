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
import multiprocessing
import queue
import time
from dataclasses import dataclass
from typing import Any

import fastavro

from bench.workloads import SCHEMAS, Topics


@dataclass(frozen=True)
class LoopResult:
    """What one loop did, on the shared monotonic clock (``time.monotonic``)."""

    first_consumed: float
    done: float
    consumed: int
    emitted: int


@dataclass(frozen=True)
class RawResult:
    """A ceiling measurement over all its processes."""

    processes: int
    input_records: int
    seconds: float
    emitted: int

    @property
    def rate(self) -> float:
        """Input records per second."""
        return self.input_records / self.seconds


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
    from confluent_kafka import Consumer, Producer, TopicPartition

    user_schema, tweet_schema, view_schema = (
        _schema("user"),
        _schema("tweet"),
        _schema("tweet_view"),
    )
    consumer = Consumer(
        {
            **conf,
            "group.id": "enrichd-bench-raw",  # required by the client; never joined
            "enable.auto.commit": False,
            "enable.partition.eof": False,
        }
    )
    producer = Producer(
        {
            **conf,
            "linger.ms": 20,
            "batch.num.messages": 100_000,
            "queue.buffering.max.messages": 1_000_000,
        }
    )
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
        value = buffer.getvalue()
        while True:
            try:
                producer.produce(output, value, key)
                return
            except BufferError:
                producer.poll(0.01)

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
        if producer.flush(120) != 0:
            raise RuntimeError("the ceiling's producer did not deliver everything")
        done = time.monotonic()
    finally:
        consumer.close()
    return LoopResult(first, done, consumed, emitted)


def _worker(
    conf: dict[str, str],
    topics: Topics,
    partitions: list[tuple[str, int]],
    ends: dict[str, int],
    output: str,
    go: Any,
    results: Any,
) -> None:
    results.put(comap_loop(conf, topics, partitions, ends, output, go))


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
    if processes == 1:
        loop = comap_loop(conf, topics, user_parts + tweet_parts, ends, output)
        return RawResult(1, input_records, loop.done - loop.first_consumed, loop.emitted)
    context = multiprocessing.get_context("spawn")  # librdkafka's threads do not survive fork
    go, results = context.Event(), context.Queue()
    shares = [tweet_parts[i::processes] for i in range(processes)]
    workers = [
        context.Process(
            target=_worker, args=(conf, topics, user_parts + share, ends, output, go, results)
        )
        for share in shares
    ]
    for worker in workers:
        worker.start()
    time.sleep(3.0)  # let every worker import and build its clients before the start signal
    go.set()
    loops: list[LoopResult] = []
    while len(loops) < len(workers):
        try:
            loops.append(results.get(timeout=1.0))
        except queue.Empty:
            failed = [w.exitcode for w in workers if w.exitcode not in (None, 0)]
            if failed:
                raise RuntimeError(f"a ceiling process exited with code {failed[0]}") from None
    for worker in workers:
        worker.join(timeout=30)
    seconds = max(r.done for r in loops) - min(r.first_consumed for r in loops)
    return RawResult(processes, input_records, seconds, sum(r.emitted for r in loops))


def _partitions(ends: dict[str, int], topic: str) -> list[tuple[str, int]]:
    found = []
    for name in ends:
        name_topic, _, partition = name.rpartition("/")
        if name_topic == topic:
            found.append((topic, int(partition)))
    return found
