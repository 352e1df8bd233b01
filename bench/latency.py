"""One latency run: a pipeline, or its yardstick, at a fixed offered rate, as a reader sees it.

A workload (:class:`LatencyWorkload`; comap, lookup, asof and window have one each) makes
fresh topics for each run and produces what its pipeline reads first (comap's users, lookup's
table, asof's moods, a few old window events). Then the contender reads it: the enrichd
pipeline with the run's trigger (:func:`run_latency`), or the yardstick, a raw
exactly-once loop doing the same join (:func:`run_yardstick`, :mod:`bench.yardstick`). Then
a load generator in a process of its own (:mod:`bench.offering`) offers the workload's
stream records (tweets, clicks, recommendations, events) at a fixed rate for a fixed time,
each stamped with the wall-clock time it was handed to the producer (its Kafka CreateTime),
while the contender keeps running. Meanwhile a ``read_committed`` consumer, in a thread of
this process, reads the output topic from offset 0 and notes the wall-clock time at which it
first receives each output; the output's provenance headers
(``enrichd.source.topic/partition/offset``) name the offered record it came from, whose
timestamp the producer's delivery reports gave. Latency is the difference: it covers the wait
for a trigger (or a poll), the batch, and its transactions' commit, since a
``read_committed`` reader gets nothing of a transaction before its commit.

The outputs' own Kafka timestamps cannot measure this: enrichd stamps each output with the
timestamp of the input record that caused it (as Kafka Streams does, and the yardstick), so
an output's timestamp is its source record's. The run counts the outputs for which that
holds, which checks it.

:mod:`bench.latencies` runs a joiner's set of latency runs and writes its section.
"""

from __future__ import annotations

import dataclasses
import math
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench import offering, tuning, yardstick
from bench.cpu import CpuShare
from bench.enrichd import Batch, await_consumed, serving
from bench.offering import Offered, Record
from bench.rawjoin import RawSpec
from bench.workloads import INPUT_PARTITIONS

ENRICHD = "enrichd"
YARDSTICK = "yardstick"
CONTINUOUS = "continuous"
"""The contenders of a latency run: the enrichd pipeline, the raw exactly-once loop, or the
pipeline in continuous mode (``mode = "continuous"``: docs/operations.md)."""

_FETCH_WAIT_MS = 10
"""The watcher's ``fetch.wait.max.ms``: the broker answers an empty fetch this soon, so a
committed output waits at most about this long for the watcher's next fetch."""


@dataclass(frozen=True)
class Offer:
    """One latency run's topics and inputs, made afresh by :attr:`LatencyWorkload.prepare`."""

    file: Any
    """The pipeline file (``PipelineFile``) the pipeline belongs to."""
    pipe: Any
    """The pipeline (``PipelineConfig``), its checkpoint in the folder the run owns."""
    loaded: dict[str, int]
    """Partition ends of what was produced before offering, which the pipeline reads first."""
    topics: tuple[str, ...]
    """The topics the offered records go to."""
    record: Record
    """Offered record ``i``: its topic (one of :attr:`topics`), Kafka key and Avro value.
    Picklable: the load generator runs in a process of its own."""
    raw: RawSpec
    """The pipeline's join restated for the yardstick, over the same topics (its output is
    set for each run)."""


@dataclass(frozen=True)
class LatencyWorkload:
    """What a benchmark measures latency with, and the words its report uses."""

    joiner: str
    """The joiner measured, for headings (``comap``)."""
    offered: str
    """The offered records, plural (``tweets``)."""
    outputs: str
    """The outputs, plural (``views``)."""
    loaded: str
    """What the pipeline has read before offering starts (``every user already read``)."""
    prepare: Callable[[Path, int, int], Offer]
    """Given a checkpoint folder, a trigger (ms, 0 for the default) and the rate records will
    be offered at: fresh topics, what the pipeline reads first produced to them, and the
    pipeline."""
    offered_per_output: int = 1
    """Offered records that make one output (2: the window joiner's pairs). An output's
    latency counts from its source record, the one whose arrival completed it."""
    detail: str = ""
    """A note on the workload's latency runs, for the report."""
    default_trigger: str = "the next batch as soon as the last one ends"
    """What the pipeline's default trigger does, for the report."""

    def expected(self, offered: int) -> int:
        """The outputs ``offered`` records make."""
        return offered // self.offered_per_output


@dataclass(frozen=True)
class LatencyResult:
    """Latency percentiles of one run at a fixed offered rate, or why there are none."""

    offered_rate: int
    """Records per second the run aimed to offer."""
    seconds: float
    """How long records were offered (planned, until measured)."""
    trigger_ms: int
    """The enrichd pipeline's processing-time trigger (0: its default; the yardstick: 0)."""
    offered: int = 0
    """Records offered."""
    outputs: int = 0
    """Outputs received by the watcher that name a record offered (first receipt only)."""
    p50_ms: float = 0.0
    p99_ms: float = 0.0
    max_ms: float = 0.0
    timestamp_types: str = ""
    """The Kafka timestamp types of the outputs read back (CreateTime expected)."""
    same_timestamp: int = 0
    """Outputs whose Kafka timestamp equals their source record's (all of them, expected)."""
    drain_s: float = 0.0
    """From the last record offered to the end of the batch (the commit) that covered the
    last record."""
    batches: tuple[Batch, ...] = ()
    """The micro-batches that read offered records (enrichd)."""
    reason: str = ""
    contender: str = ENRICHD
    """:data:`ENRICHD`, :data:`YARDSTICK` or :data:`CONTINUOUS`."""
    for_fit: bool = False
    """A run at another rate, made for the batch-cost fit (``--fit-rates``)."""
    transactions: int = 0
    """Transactions the yardstick committed while the offered records came in."""
    cpu: CpuShare | None = None
    """How busy the broker, the load generator and the machine were while offering."""

    @property
    def achieved_rate(self) -> float:
        """Records per second actually offered."""
        return self.offered / self.seconds if self.seconds else 0.0

    @property
    def name(self) -> str:
        """The run as the report names it (``enrichd, default trigger``)."""
        if self.contender == YARDSTICK:
            return "yardstick (raw loop, exactly once)"
        if self.contender == CONTINUOUS:
            return "enrichd, continuous (long batches)"
        return f"enrichd, {trigger_name(self.trigger_ms)} trigger"


def trigger_name(trigger_ms: int) -> str:
    """A trigger as the report names it."""
    return "default" if trigger_ms == 0 else f"{trigger_ms:,} ms"


def percentile(values: list[float], q: float) -> float:
    """The nearest-rank ``q`` percentile (0 < q <= 1) of ``values`` (not empty)."""
    ordered = sorted(values)
    return float(ordered[max(0, math.ceil(q * len(ordered)) - 1)])


def yardstick_of(result: LatencyResult, results: Sequence[LatencyResult]) -> LatencyResult | None:
    """The measured yardstick run at ``result``'s offered rate among ``results``, if any."""
    return next(
        (
            r
            for r in results
            if r.contender == YARDSTICK and not r.reason and r.offered_rate == result.offered_rate
        ),
        None,
    )


def shown(latencies: Sequence[LatencyResult]) -> LatencyResult | None:
    """The enrichd run a summary shows: at the latency rate (not a fit run), the default
    trigger's, which is what a pipeline that sets none gets, else the first one measured."""
    done = [r for r in latencies if r.contender == ENRICHD and not r.reason and not r.for_fit]
    return next((r for r in done if r.trigger_ms == 0), done[0] if done else None)


def versus(value_ms: float, reference: LatencyResult | None, q: str) -> float | None:
    """``value_ms`` over the ``reference`` run's ``q`` percentile (``"p50"``, ``"p99"``);
    None without a reference, or with one of 0 ms."""
    if reference is None:
        return None
    base = float(getattr(reference, f"{q}_ms"))
    return value_ms / base if base > 0 else None


class _Watcher(threading.Thread):
    """A ``read_committed`` consumer of the output topic, running beside the pipeline.

    It reads every partition from offset 0 with a short ``fetch.wait.max.ms``, so an output
    reaches it soon after the transaction that wrote it commits, which is when any downstream
    consumer could first see it. For each output naming a record of ``source_topics`` it keeps
    the wall-clock time of the first receipt and the output's own Kafka timestamp, by source
    record.
    """

    def __init__(self, conf: dict[str, str], output: str, source_topics: tuple[str, ...]) -> None:
        super().__init__(name="enrichd-bench-latency-watcher", daemon=True)
        self.conf = conf
        self.output = output
        self.source_topics = {topic.encode() for topic in source_topics}
        self.seen: dict[tuple[str, int, int], tuple[float, int]] = {}
        """Source (topic, partition, offset) -> (epoch seconds first received, output's
        timestamp)."""
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
                    # and the log ends listed now are past every output it wrote.
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
            topic = headers.get("enrichd.source.topic", b"")
            if topic not in self.source_topics:
                continue
            source = (
                topic.decode(),
                int(headers["enrichd.source.partition"]),
                int(headers["enrichd.source.offset"]),
            )
            kind, stamp = message.timestamp()
            self.types.add("CreateTime" if kind == TIMESTAMP_CREATE_TIME else "LogAppendTime")
            self.seen.setdefault(source, (now, stamp))


Reached = Callable[[dict[str, int]], Any]
"""``consumed_to(ends)``: wait until the contender has consumed (and committed) to ``ends``."""


def _measure(
    conf: dict[str, str],
    offer: Offer,
    output: str,
    contender: AbstractContextManager[Reached],
    rate: int,
    seconds: float,
    seed: int,
    timeout_s: float,
    broker_pid: int | None,
) -> tuple[Offered, _Watcher, Any, Any]:
    """Watch ``output`` while ``contender`` runs: it reads what ``offer`` loaded, then the
    records offered at ``rate`` for ``seconds``; (what was offered, the watcher, and what
    ``consumed_to`` gave at the loaded ends and at the end).

    Raises:
        RuntimeError: the contender, the load generator or the watcher failed, or one of them
            did not get there within ``timeout_s``.
    """
    watcher = _Watcher(conf, output, offer.topics)
    try:
        watcher.start_watching()
        with contender as consumed_to:
            loaded = consumed_to(offer.loaded)
            offered = offering.offer(conf, offer.record, rate, seconds, seed, broker_pid)
            done = consumed_to({**offer.loaded, **offered.ends})
        watcher.finish(timeout_s)
    finally:
        # On failure the watcher may still be reading: let it close its consumer.
        watcher.stop(60)
    return offered, watcher, loaded, done


def _measured(base: LatencyResult, offered: Offered, watcher: _Watcher) -> LatencyResult:
    """``base`` with the latencies of the outputs ``watcher`` saw of the records offered."""
    latencies: list[float] = []
    same = 0
    for source, (received, output_stamp) in watcher.seen.items():
        if source in offered.stamps:
            latencies.append(received * 1000 - offered.stamps[source])
            same += output_stamp == offered.stamps[source]
    if not latencies:
        topics = ", ".join(sorted({topic for topic, _, _ in offered.stamps}))
        return dataclasses.replace(base, reason=f"no output named a known record of {topics}")
    return dataclasses.replace(
        base,
        seconds=offered.ended - offered.started,
        offered=len(offered.stamps),
        outputs=len(latencies),
        p50_ms=percentile(latencies, 0.50),
        p99_ms=percentile(latencies, 0.99),
        max_ms=max(latencies),
        timestamp_types=", ".join(sorted(watcher.types)),
        same_timestamp=same,
        cpu=offered.cpu,
    )


@contextmanager
def _serving(offer: Offer, timeout_s: float) -> Iterator[Reached]:
    """The offer's pipeline through ``daemon run``'s service on the process's Spark session."""
    from daemon.spark.session import spark_session

    spark = spark_session(tuning.spark(offer.file.spark))
    with serving(offer.file, offer.pipe, spark, timeout_s) as query:
        running = query(offer.pipe.name)
        yield lambda ends: await_consumed(running, ends, timeout_s)


def _enrichd(offer: Offer, timeout_s: float) -> tuple[str, AbstractContextManager[Reached]]:
    """The pipeline's output topic, and the pipeline to run."""
    from daemon.pipeline.plan import client_conf, plan_pipeline

    # Planned here only for its output topic, which the watcher needs before the first
    # output; the service plans the pipeline again when it starts.
    plan_pipeline(offer.file, offer.pipe, client_conf(offer.file))
    return offer.pipe.output.topic, _serving(offer, timeout_s)


def _yardstick(
    conf: dict[str, str], offer: Offer, timeout_s: float
) -> tuple[str, AbstractContextManager[Reached]]:
    """A fresh output topic, and the yardstick's loop doing the pipeline's join into it (the
    pipeline itself is not run)."""
    from daemon.kafka.admin import create_topics

    output = f"bench-yardstick-{uuid.uuid4().hex[:8]}"
    create_topics(conf, {output: INPUT_PARTITIONS})
    return output, yardstick.running(dataclasses.replace(offer.raw, output=output), timeout_s)


def _continuous(
    offer: Offer, timeout_s: float, batches: Any
) -> tuple[str, AbstractContextManager[Reached]]:
    """The pipeline's output topic, and the pipeline to run in continuous mode.

    With ``mode = "continuous"`` and the long batches' settings of ``batches``
    (:class:`daemon.continuous.lease_source.LongBatches`), through ``daemon run``'s service as
    the micro-batch contender runs; it has consumed to some ends once its lag group, which
    the daemon commits from the tasks' reports, is there.
    """
    from daemon.pipeline.plan import client_conf, plan_pipeline

    pipe = offer.pipe.model_copy(
        update={
            "mode": "continuous",
            "long_batch": batches.long_batch_ms,
            "commit_interval": batches.commit_interval_ms,
            "leases": batches.leases,
            "trigger": 0,
        }
    )
    continuous = dataclasses.replace(offer, pipe=pipe)
    # Planned here only for its output topic, which the watcher needs before the first
    # output; the service plans the pipeline again when it starts.
    plan_pipeline(offer.file, pipe, client_conf(offer.file))
    return pipe.output.topic, _serving_continuous(continuous, timeout_s)


@contextmanager
def _serving_continuous(offer: Offer, timeout_s: float) -> Iterator[Reached]:
    """The offer's continuous pipeline through ``daemon run``'s service."""
    from daemon.kafka.names import pipeline_group
    from daemon.pipeline.plan import client_conf
    from daemon.spark.session import spark_session

    spark = spark_session(tuning.spark(offer.file.spark))
    group = pipeline_group(offer.file.kafka.id_prefix, offer.pipe.name)
    conf = client_conf(offer.file)
    with serving(offer.file, offer.pipe, spark, timeout_s) as query:
        running = query(offer.pipe.name)

        def covered_to(ends: dict[str, int]) -> tuple[Batch, ...]:
            deadline = time.monotonic() + timeout_s
            while not group_at(conf, group, ends):
                if running.exception() is not None:
                    raise RuntimeError(f"the pipeline failed: {running.exception()}")
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"the pipeline did not consume everything in {timeout_s:.0f}s"
                    )
                time.sleep(0.2)
            return ()

        yield covered_to


def group_at(conf: dict[str, str], group: str, ends: dict[str, int]) -> bool:
    """Whether ``group``'s committed offsets reach ``ends`` on every partition."""
    from confluent_kafka import ConsumerGroupTopicPartitions

    from daemon.kafka import connect

    admin = connect.admin(conf)
    asked = [ConsumerGroupTopicPartitions(group)]
    (answer,) = admin.list_consumer_group_offsets(asked, request_timeout=30).values()
    found = answer.result(timeout=30).topic_partitions or []
    at = {f"{tp.topic}/{tp.partition}": tp.offset for tp in found if tp.offset >= 0}
    return all(at.get(name, 0) >= end for name, end in ends.items() if end > 0)


def run_latency(
    servers: str,
    workload: LatencyWorkload,
    rate: int,
    seconds: float,
    trigger_ms: int = 0,
    seed: int = 7,
    timeout_s: float = 600.0,
    broker_pid: int | None = None,
    for_fit: bool = False,
    contender: str = ENRICHD,
    batches: Any = None,
) -> LatencyResult:
    """Measure the latency of ``workload``'s pipeline (``contender`` :data:`ENRICHD`, with
    ``trigger_ms``) or of its yardstick (:data:`YARDSTICK`) at ``rate`` records/s offered for
    ``seconds``, on fresh topics. :data:`CONTINUOUS` runs the pipeline as a continuous query
    cut into ``batches`` (:class:`daemon.continuous.lease_source.LongBatches`).

    The pipeline runs through ``daemon run``'s service (:func:`bench.enrichd.serving`) on the
    process's Spark session, the yardstick in a process of its own
    (:func:`bench.yardstick.running`). ``broker_pid``: the broker's process, whose CPU is
    measured. A contender that fails or falls too far behind comes back as a result with
    ``reason`` set, not an exception.
    """
    base = LatencyResult(rate, seconds, trigger_ms, contender=contender, for_fit=for_fit)
    conf = {"bootstrap.servers": servers}
    with tempfile.TemporaryDirectory(prefix="enrichd-bench-latency-") as tmp:
        offer = workload.prepare(Path(tmp) / "checkpoint", trigger_ms, rate)
        if contender == YARDSTICK:
            output, running = _yardstick(conf, offer, timeout_s)
        elif contender == CONTINUOUS:
            output, running = _continuous(offer, timeout_s, batches)
        else:
            output, running = _enrichd(offer, timeout_s)
        try:
            offered, watcher, loaded, done = _measure(
                conf, offer, output, running, rate, seconds, seed, timeout_s, broker_pid
            )
        except RuntimeError as exc:
            return dataclasses.replace(base, reason=str(exc))
    result = _measured(base, offered, watcher)
    if contender == YARDSTICK:
        return dataclasses.replace(
            result,
            transactions=done.transactions - loaded.transactions,
            drain_s=done.committed_at - offered.ended,
        )
    if contender == CONTINUOUS:
        return result
    mine = tuple(b for b in done if b.batch_id > loaded[-1].batch_id)
    drain_s = max(b.ended for b in mine) - offered.ended if mine else 0.0
    return dataclasses.replace(result, batches=mine, drain_s=drain_s)
