"""End-to-end latency of enrichd's comap at a fixed offered rate, as a downstream reader sees it.

The users are produced first and the pipeline (the example's comap, with a processing-time
trigger) reads them; then this process offers tweets at a fixed rate for a fixed time, each
stamped with the wall-clock time it was handed to the producer (its Kafka CreateTime), while
the pipeline keeps running. Meanwhile a ``read_committed`` consumer, in a thread of this
process, reads the output topic from offset 0 and notes the wall-clock time at which it first
receives each view; the view's provenance headers (``enrichd.source.topic/partition/offset``)
name the tweet it came from, whose timestamp the producer's delivery reports gave. Latency is
the difference: it covers the wait for a trigger, the batch, and its transactions' commit,
since a ``read_committed`` reader gets nothing of a batch before its commit.

The views' own Kafka timestamps cannot measure this: enrichd stamps each output with the
timestamp of the input record that caused it (as Kafka Streams does), so a view's timestamp is
its tweet's. The run counts the views for which that holds, which checks it.
"""

from __future__ import annotations

import math
import random
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.enrichd import Batch, await_consumed, configure
from bench.workloads import Topics, Workload, codec, create_inputs, produce, tweet

_PACE_S = 0.005
"""How often the offering loop tops the producer up to the records due by then."""
_FETCH_WAIT_MS = 10
"""The watcher's ``fetch.wait.max.ms``: the broker answers an empty fetch this soon, so a
committed view waits at most about this long for the watcher's next fetch."""


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
    """Views received by the watcher that name a tweet offered (first receipt only)."""
    p50_ms: float = 0.0
    p99_ms: float = 0.0
    max_ms: float = 0.0
    timestamp_types: str = ""
    """The Kafka timestamp types of the views read back (CreateTime expected)."""
    same_timestamp: int = 0
    """Views whose Kafka timestamp equals their source tweet's (all of them, expected)."""
    drain_s: float = 0.0
    """From the last tweet offered to the end of the batch that consumed the last record."""
    batches: tuple[Batch, ...] = ()
    """The micro-batches that read tweets."""
    reason: str = ""

    @property
    def achieved_rate(self) -> float:
        """Tweets per second actually offered."""
        return self.tweets / self.seconds if self.seconds else 0.0


def percentile(values: list[float], q: float) -> float:
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


class _Watcher(threading.Thread):
    """A ``read_committed`` consumer of the output topic, running beside the pipeline.

    It reads every partition from offset 0 with a short ``fetch.wait.max.ms``, so a view
    reaches it soon after the transaction that wrote it commits, which is when any downstream
    consumer could first see it. For each view naming a tweet of ``tweets_topic`` it keeps the
    wall-clock time of the first receipt and the view's own Kafka timestamp, by source tweet.
    """

    def __init__(self, conf: dict[str, str], output: str, tweets_topic: str) -> None:
        super().__init__(name="enrichd-bench-latency-watcher", daemon=True)
        self.conf = conf
        self.output = output
        self.tweets_topic = tweets_topic
        self.seen: dict[tuple[int, int], tuple[float, int]] = {}
        """Source tweet (partition, offset) -> (epoch seconds first received, view timestamp)."""
        self.types: set[str] = set()
        self.error: BaseException | None = None
        self._ready = threading.Event()
        self._finish = threading.Event()

    def start_watching(self, timeout_s: float = 30.0) -> None:
        """Start, and return once the consumer has its partitions assigned."""
        self.start()
        if not self._ready.wait(timeout_s) or self.error is not None:
            raise RuntimeError(f"the latency watcher did not start: {self.error}")

    def finish(self, timeout_s: float) -> None:
        """Read to the output's current end, then stop.

        Raises:
            RuntimeError: the watcher failed or did not get there within ``timeout_s``.
        """
        self._finish.set()
        self.join(timeout_s)
        if self.is_alive():
            raise RuntimeError(f"the latency watcher did not reach the end in {timeout_s:.0f}s")
        if self.error is not None:
            raise RuntimeError(f"the latency watcher failed: {self.error}")

    def stop(self, timeout_s: float) -> None:
        """Like :meth:`finish`, but quietly: for a run that has already failed."""
        self._finish.set()
        if self.is_alive():
            self.join(timeout_s)

    def run(self) -> None:
        try:
            self._watch()
        except BaseException as exc:  # handed to the caller, which is in another thread
            self.error = exc
            self._ready.set()

    def _watch(self) -> None:
        from confluent_kafka import Consumer, TopicPartition

        consumer = Consumer(
            {
                **self.conf,
                "group.id": "enrichd-bench-latency",
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
                "fetch.wait.max.ms": _FETCH_WAIT_MS,
            }
        )
        try:
            metadata = consumer.list_topics(self.output, timeout=10).topics[self.output]
            tps = [TopicPartition(self.output, p, 0) for p in sorted(metadata.partitions)]
            consumer.assign(tps)
            self._ready.set()
            listed: list[int] | None = None
            while listed is None or not self._at_end(consumer, tps, listed):
                if listed is None and self._finish.is_set():
                    # Asked after the pipeline stopped, so its last transaction has committed
                    # and the log ends listed now are past every view it wrote.
                    listed = [
                        consumer.get_watermark_offsets(tp, timeout=10, cached=False)[1]
                        for tp in tps
                    ]
                self._receive(consumer.consume(num_messages=10_000, timeout=0.05))
        finally:
            consumer.close()

    @staticmethod
    def _at_end(consumer: Any, tps: list[Any], listed: list[int]) -> bool:
        """Whether the position is at the log end on every partition.

        The end is the larger of the listed one and the high watermark of the latest Fetch
        response (ListOffsets under-reports it on some brokers); positions, not records seen,
        since transaction markers take offsets but are never delivered.
        """
        positions = consumer.position(tps)
        return all(
            position.offset >= max(end, consumer.get_watermark_offsets(tp, cached=True)[1])
            for tp, position, end in zip(tps, positions, listed, strict=True)
        )

    def _receive(self, messages: list[Any]) -> None:
        from confluent_kafka import TIMESTAMP_CREATE_TIME

        # One clock reading per delivery: the records in it reached this reader together.
        now = time.time()
        for message in messages:
            if message.error() is not None:
                continue
            headers = dict(message.headers() or ())
            if headers.get("enrichd.source.topic", b"").decode() != self.tweets_topic:
                continue
            source = (
                int(headers["enrichd.source.partition"]),
                int(headers["enrichd.source.offset"]),
            )
            kind, stamp = message.timestamp()
            self.types.add("CreateTime" if kind == TIMESTAMP_CREATE_TIME else "LogAppendTime")
            self.seen.setdefault(source, (now, stamp))


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
        # Planning creates the output topic, which the watcher needs before the first view.
        plan = plan_pipeline(file, pipe, client_conf(file))
        watcher = _Watcher(conf, pipe.output.topic, topics.tweets)
        try:
            watcher.start_watching()
            query = start_query(spark_session(file.spark), plan)
            try:
                first = await_consumed(query, user_ends, timeout_s)
                stamps, offered_from, offered_until = _offer(
                    conf, topics.tweets, users, rate, seconds, seed
                )
                batches = await_consumed(query, {**user_ends, **stamps.ends}, timeout_s)
            finally:
                query.stop()
            watcher.finish(timeout_s)
        except RuntimeError as exc:
            return LatencyResult(rate, seconds, trigger_ms, reason=str(exc))
        finally:
            # On failure the watcher may still be reading: let it close its consumer.
            watcher.stop(60)
    tweet_batches = tuple(b for b in batches if b.batch_id > first[-1].batch_id)
    latencies: list[float] = []
    same = 0
    for source, (received, view_stamp) in watcher.seen.items():
        if source in stamps.stamps:
            latencies.append(received * 1000 - stamps.stamps[source])
            same += view_stamp == stamps.stamps[source]
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
        max_ms=max(latencies),
        timestamp_types=", ".join(sorted(watcher.types)),
        same_timestamp=same,
        drain_s=max(b.ended for b in tweet_batches) - offered_until if tweet_batches else 0.0,
        batches=tweet_batches,
    )
