"""End-to-end latency of enrichd's comap at a fixed offered rate.

The users are produced first and the pipeline (the example's comap, with a processing-time
trigger) reads them; then this process offers tweets at a fixed rate for a fixed time, each
stamped with the wall-clock time it was handed to the producer (its Kafka CreateTime), while
the pipeline keeps running. When the pipeline has consumed everything, every view is read
back: its provenance headers (``enrichd.source.topic/partition/offset``) name the tweet it
came from, whose timestamp the producer's delivery reports gave, and the view's own Kafka
timestamp is when enrichd's sink handed it to its producer. Latency is the difference.

The view's timestamp is set inside the micro-batch, before the sink's transaction commits,
so a ``read_committed`` consumer sees the view up to that batch's flush and commit later; the
report gives the batches' durations next to the percentiles for that reason.
"""

from __future__ import annotations

import math
import random
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.enrichd import Batch, await_consumed, configure
from bench.workloads import Topics, Workload, codec, create_inputs, produce, tweet

_PACE_S = 0.005
"""How often the offering loop tops the producer up to the records due by then."""


@dataclass(frozen=True)
class LatencyResult:
    """Latency percentiles of one run at a fixed offered rate, or why there are none."""

    offered_rate: int
    """Records per second the run aimed to offer."""
    seconds: float
    """How long tweets were offered (planned, until measured)."""
    trigger_ms: int
    tweets: int = 0
    """Tweets offered."""
    views: int = 0
    """Views read back with a known source tweet."""
    p50_ms: float = 0.0
    p99_ms: float = 0.0
    max_ms: float = 0.0
    timestamp_types: str = ""
    """The Kafka timestamp types of the views read back (CreateTime expected)."""
    drain_s: float = 0.0
    """From the last tweet offered to the end of the batch that consumed the last record."""
    batches: tuple[Batch, ...] = ()
    """The micro-batches that read tweets."""
    reason: str = ""

    @property
    def achieved_rate(self) -> float:
        """Tweets per second actually offered."""
        return self.tweets / self.seconds if self.seconds else 0.0


def percentile(values: list[int], q: float) -> float:
    """The nearest-rank ``q`` percentile (0 < q <= 1) of ``values`` (not empty)."""
    ordered = sorted(values)
    return float(ordered[max(0, math.ceil(q * len(ordered)) - 1)])


class _Stamps:
    """Delivery callback keeping each delivered tweet's timestamp by (partition, offset)."""

    def __init__(self) -> None:
        self.stamps: dict[tuple[int, int], int] = {}
        self.ends: dict[str, int] = {}
        self.failures: list[str] = []

    def __call__(self, err: Any, msg: Any) -> None:
        if err is not None:
            self.failures.append(str(err))
            return
        partition, offset = msg.partition(), msg.offset()
        self.stamps[(partition, offset)] = msg.timestamp()[1]
        name = f"{msg.topic()}/{partition}"
        self.ends[name] = max(self.ends.get(name, 0), offset + 1)


def _offer(
    conf: dict[str, str], topic: str, users: int, rate: int, seconds: float, seed: int
) -> tuple[_Stamps, float, float]:
    """Offer ``rate`` tweets/s for ``seconds``; the stamps and when offering began and ended.

    The times are epoch seconds, as the progress reports' batch times are.
    """
    from confluent_kafka import Producer

    from daemon.kafka import clients

    producer = Producer({**conf, "linger.ms": 5, "partitioner": "murmur2_random"})
    stamps = _Stamps()
    encoder = codec("tweet")
    rng = random.Random(seed)
    total = int(rate * seconds)
    sent = 0
    started = time.time()
    began = time.monotonic()
    while sent < total:
        due = min(total, int(rate * (time.monotonic() - began)))
        while sent < due:
            value = encoder.encode(tweet(sent, rng.randrange(users), rng))
            clients.produce(
                producer,
                topic,
                value=value,
                key=str(sent).encode(),
                timestamp=int(time.time() * 1000),
                on_delivery=stamps,
            )
            sent += 1
        producer.poll(0)
        time.sleep(_PACE_S)
    ended = time.time()
    if producer.flush(60) != 0 or stamps.failures:
        raise RuntimeError(
            f"could not offer the tweets: {stamps.failures[:1] or 'flush timed out'}"
        )
    return stamps, started, ended


def _latencies(
    conf: dict[str, str], output: str, tweets_topic: str, stamps: dict[tuple[int, int], int]
) -> tuple[list[int], set[str]]:
    """Each view's latency in ms (view timestamp - source tweet timestamp) and the ts types."""
    from confluent_kafka import TIMESTAMP_CREATE_TIME, Consumer, TopicPartition

    from daemon.kafka import clients

    consumer = Consumer(
        {
            **conf,
            "group.id": "enrichd-bench-latency",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        }
    )
    latencies: list[int] = []
    types: set[str] = set()
    try:
        metadata = consumer.list_topics(output, timeout=10).topics[output]
        for partition in sorted(metadata.partitions):
            tp = TopicPartition(output, partition, 0)
            for records in clients.read_partition(consumer, tp, stall_s=60):
                for record in records:
                    headers = {k: v for k, v in record.headers() or ()}
                    if headers.get("enrichd.source.topic", b"").decode() != tweets_topic:
                        continue
                    source = (
                        int(headers["enrichd.source.partition"]),
                        int(headers["enrichd.source.offset"]),
                    )
                    kind, stamp = record.timestamp()
                    types.add("CreateTime" if kind == TIMESTAMP_CREATE_TIME else "LogAppendTime")
                    if source in stamps:
                        latencies.append(stamp - stamps[source])
    finally:
        consumer.close()
    return latencies, types


def run_latency(
    servers: str,
    users: int,
    rate: int,
    seconds: float,
    trigger_ms: int,
    max_records_per_batch: int,
    seed: int = 7,
    timeout_s: float = 600.0,
) -> LatencyResult:
    """Measure the comap pipeline's latency at ``rate`` tweets/s offered for ``seconds``.

    Uses the process's Spark session (started on first use). A pipeline that fails or falls
    too far behind comes back as a result with ``reason`` set, not an exception.
    """
    from daemon.engine.pipeline import client_conf, plan_pipeline, start_query
    from daemon.engine.session import spark_session

    conf = {"bootstrap.servers": servers}
    suffix = uuid.uuid4().hex[:8]
    topics = Topics(users=f"lat-users-{suffix}", tweets=f"lat-tweets-{suffix}")
    create_inputs(conf, topics)
    user_ends = produce(conf, topics, Workload(users, 0, seed))
    with tempfile.TemporaryDirectory(prefix="enrichd-bench-latency-") as tmp:
        file, pipe = configure(
            servers, topics, Path(tmp) / "checkpoint", max_records_per_batch, trigger_ms
        )
        plan = plan_pipeline(file, pipe, client_conf(file))
        query = start_query(spark_session(file.spark), plan)
        try:
            first = await_consumed(query, user_ends, timeout_s)
            stamps, offered_from, offered_until = _offer(
                conf, topics.tweets, users, rate, seconds, seed
            )
            batches = await_consumed(query, {**user_ends, **stamps.ends}, timeout_s)
        except RuntimeError as exc:
            return LatencyResult(rate, seconds, trigger_ms, reason=str(exc))
        finally:
            query.stop()
    tweet_batches = tuple(b for b in batches if b.batch_id > first[-1].batch_id)
    latencies, types = _latencies(conf, pipe.output.topic, topics.tweets, stamps.stamps)
    if not latencies:
        return LatencyResult(rate, seconds, trigger_ms, reason="no view named a known tweet")
    return LatencyResult(
        rate,
        offered_until - offered_from,
        trigger_ms,
        tweets=len(stamps.stamps),
        views=len(latencies),
        p50_ms=percentile(latencies, 0.50),
        p99_ms=percentile(latencies, 0.99),
        max_ms=float(max(latencies)),
        timestamp_types=", ".join(sorted(types)),
        drain_s=max(b.ended for b in tweet_batches) - offered_until if tweet_batches else 0.0,
        batches=tweet_batches,
    )
