"""The benchmark's input data: users and tweets, produced to fresh topics on a broker.

Users come first, then tweets, each with a Kafka timestamp one millisecond after the last
(starting at 1), so the co-map sees every author before its tweets. Values are plain Avro
(no Confluent framing) in the example's schemas, about 100 bytes each; keys are the records'
ids as decimal text, as ``daemon replay`` writes integer keys.
"""

from __future__ import annotations

import functools
import random
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from daemon.formats.avro.codec import AvroCodec, load_schema_file
from daemon.kafka import clients

REPO = Path(__file__).resolve().parent.parent
SCHEMAS = REPO / "schemas"
INPUT_PARTITIONS = 2

_WORDS = (
    "stream state kafka spark join enrich view tweet user offset batch record key value "
    "topic schema avro python latency throughput checkpoint partition broker"
).split()


@functools.cache
def codec(name: str) -> AvroCodec:
    """The plain-format codec of ``schemas/<name>.avsc``, made once per process (a latency
    run's load generator encodes each record it offers with it)."""
    return AvroCodec(load_schema_file(SCHEMAS / f"{name}.avsc"))


@dataclass(frozen=True)
class Workload:
    """How many users and tweets, and the seed that picks authors and words."""

    users: int
    tweets: int
    seed: int = 7

    @property
    def records(self) -> int:
        """Input records in total."""
        return self.users + self.tweets


@dataclass(frozen=True)
class Topics:
    """The topic names of one benchmark run."""

    users: str
    tweets: str

    def inputs(self) -> tuple[str, str]:
        """Both input topics, users first."""
        return (self.users, self.tweets)


def user(i: int) -> dict[str, Any]:
    """User ``i``: a name, an avatar URL and an update time."""
    return {
        "id": i,
        "name": f"user-{i:07d}",
        "avatar": f"https://img.example/u/{i}.png",
        "updated_at": 1_700_000_000_000 + i,
    }


def tweet(i: int, author: int, rng: random.Random) -> dict[str, Any]:
    """Tweet ``i`` by ``author``, with about 60 characters of content."""
    words = " ".join(rng.choice(_WORDS) for _ in range(8))
    return {"id": i, "author_id": author, "content": f"#{i} {words}"[:72]}


def create_inputs(conf: dict[str, str], topics: Topics) -> None:
    """Create both input topics with :data:`INPUT_PARTITIONS` partitions each.

    Their retention is set explicitly (unlimited: every contender reads from offset 0). Quix
    Streams derives its internal topics' retention from the inputs' described configs, and
    the embedded broker describes only the configs a topic was created with.

    Raises:
        RuntimeError: a topic could not be created.
    """
    create_input_topics(conf, topics.inputs())


def create_input_topics(conf: dict[str, str], names: Iterable[str]) -> None:
    """Create input topics as :func:`create_inputs` does (unlimited retention, and why).

    Raises:
        RuntimeError: a topic could not be created.
    """
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient(dict(conf))
    retention = {"retention.ms": "-1", "retention.bytes": "-1"}
    wanted = [NewTopic(name, INPUT_PARTITIONS, 1, config=retention) for name in names]
    for name, future in admin.create_topics(wanted).items():
        try:
            future.result(timeout=30)
        except Exception as exc:
            raise RuntimeError(f"cannot create topic {name!r}: {exc}") from exc


def input_producer(conf: dict[str, str]) -> Any:
    """The batching producer that writes a workload's input topics.

    It partitions with murmur2, as Kafka's Java clients and Quix Streams do: the peer keeps
    state per partition number, so records it joins (a user and the tweets it re-keys to
    that user, the two sides of a join) must sit on the same partition number.
    """
    from confluent_kafka import Producer

    return Producer(
        {
            **conf,
            "linger.ms": 20,
            "batch.num.messages": 100_000,
            "queue.buffering.max.messages": 1_000_000,
            "partitioner": "murmur2_random",
        }
    )


def produce(conf: dict[str, str], topics: Topics, workload: Workload) -> dict[str, int]:
    """Produce the workload with a batching producer; return each partition's end offset.

    The ends are keyed ``"topic/partition"``, as the enrichd source names its offsets.

    Raises:
        RuntimeError: a record could not be delivered.
    """
    producer = input_producer(conf)  # user N where Quix re-keys author N's tweets
    deliveries = clients.Deliveries()

    def send(topic: str, key: int, value: bytes, timestamp: int) -> None:
        clients.produce(
            producer,
            topic,
            value=value,
            key=str(key).encode(),
            timestamp=timestamp,
            on_delivery=deliveries,
        )

    users, tweets = codec("user"), codec("tweet")
    rng = random.Random(workload.seed)
    timestamp = 1
    for i in range(workload.users):
        send(topics.users, i, users.encode(user(i)), timestamp)
        timestamp += 1
        if i % 10_000 == 0:
            producer.poll(0)
    for i in range(workload.tweets):
        author = rng.randrange(workload.users)
        send(topics.tweets, i, tweets.encode(tweet(i, author, rng)), timestamp)
        timestamp += 1
        if i % 10_000 == 0:
            producer.poll(0)
    failures = deliveries.failures
    if producer.flush(60) != 0 or failures:
        raise RuntimeError(f"could not produce the workload: {failures[:1] or 'flush timed out'}")
    return deliveries.ends


def read_committed(
    conf: dict[str, str], topic: str, group: str, stall_s: float = 60.0
) -> Iterator[tuple[int, list[Any]]]:
    """``(partition, records)`` chunks of every committed record of ``topic``, partition by
    partition from offset 0 (``group`` is required by the client but never joined), with
    the fetch settings of a read to a known end (:data:`daemon.kafka.clients.RANGE_FETCH`:
    with librdkafka's own, each partition's first records waited 500 ms on the broker)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {
            **conf,
            **clients.RANGE_FETCH,
            "group.id": group,
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        }
    )
    try:
        metadata = consumer.list_topics(topic, timeout=10).topics[topic]
        for partition in sorted(metadata.partitions):
            tp = TopicPartition(topic, partition, 0)
            for records in clients.read_partition(consumer, tp, stall_s=stall_s):
                yield partition, records
    finally:
        consumer.close()


def count_records(conf: dict[str, str], topic: str, timeout_s: float = 60.0) -> int:
    """Count the committed records of ``topic`` (transaction markers are not records)."""
    chunks = read_committed(conf, topic, "enrichd-bench-count", timeout_s)
    return sum(len(records) for _, records in chunks)


def count_outputs(
    conf: dict[str, str], outputs: dict[str, str], enrichd: str | None, quix_ran: bool = False
) -> dict[str, int]:
    """Records each contender wrote: the raw ceilings' (``outputs["one"]``, ``["two"]``, and
    ``["again"]`` if the two-process one ran again), Quix Streams' (``["quix"]``) when it ran,
    and enrichd's (``enrichd``; None: counted by the caller), in that order."""
    counted = {
        "raw 1 process": count_records(conf, outputs["one"]),
        "raw 2 processes": count_records(conf, outputs["two"]),
    }
    if "again" in outputs:
        counted["raw 2 processes, again"] = count_records(conf, outputs["again"])
    if quix_ran:
        counted["Quix Streams"] = count_records(conf, outputs["quix"])
    if enrichd is not None:
        counted["enrichd"] = count_records(conf, enrichd)
    return counted


def contender_outputs(conf: dict[str, str]) -> dict[str, str]:
    """Fresh output topics, created, for the contenders :func:`count_outputs` counts: the
    raw ceiling in one process (``"one"``), in two (``"two"``), Quix Streams (``"quix"``) and
    the two-process ceiling again (``"again"``).

    Raises:
        RuntimeError: a topic could not be created.
    """
    from daemon.kafka.admin import create_topics

    suffix = uuid.uuid4().hex[:8]
    outputs = {
        "one": f"raw1-{suffix}",
        "two": f"raw2-{suffix}",
        "quix": f"quix-{suffix}",
        "again": f"raw2-again-{suffix}",
    }
    create_topics(conf, dict.fromkeys(outputs.values(), INPUT_PARTITIONS))
    return outputs
