"""End-to-end latency of an enrichd pipeline at a fixed offered rate, as a reader sees it.

A workload (:class:`LatencyWorkload`; the comap, lookup and asof benchmarks have one each)
makes fresh topics for each run and produces what its pipeline reads first (comap's users,
lookup's table, asof's moods), and the pipeline, with the run's trigger, reads it. Then this
process offers the workload's stream records (tweets, clicks, recommendations) at a fixed rate
for a fixed time, each stamped with the wall-clock time it was handed to the producer (its
Kafka CreateTime), while the pipeline keeps running. Meanwhile a ``read_committed`` consumer,
in a thread of this process, reads the output topic from offset 0 and notes the wall-clock
time at which it first receives each output; the output's provenance headers
(``enrichd.source.topic/partition/offset``) name the offered record it came from, whose
timestamp the producer's delivery reports gave. Latency is the difference: it covers the wait
for a trigger, the batch, and its transactions' commit, since a ``read_committed`` reader gets
nothing of a batch before its commit.

The outputs' own Kafka timestamps cannot measure this: enrichd stamps each output with the
timestamp of the input record that caused it (as Kafka Streams does), so an output's
timestamp is its source record's. The run counts the outputs for which that holds, which
checks it.
"""

from __future__ import annotations

import argparse
import math
import os
import random
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console

from bench.enrichd import Batch, await_consumed, serving

LATENCY_TARGET_MS = 1_000
"""The target (issue 39; 2 s before it): p99 end-to-end latency under 1 s at 5,000 records/s
offered."""
TARGET_RATE = 5_000

_PACE_S = 0.005
"""How often the offering loop tops the producer up to the records due by then."""
_FETCH_WAIT_MS = 10
"""The watcher's ``fetch.wait.max.ms``: the broker answers an empty fetch this soon, so a
committed output waits at most about this long for the watcher's next fetch."""


@dataclass(frozen=True)
class Offer:
    """One latency run's pipeline and inputs, made afresh by :attr:`LatencyWorkload.prepare`."""

    file: Any
    """The pipeline file (``PipelineFile``) the pipeline belongs to."""
    pipe: Any
    """The pipeline (``PipelineConfig``), its checkpoint in the folder the run owns."""
    loaded: dict[str, int]
    """Partition ends of what was produced before offering, which the pipeline reads first."""
    topics: tuple[str, ...]
    """The topics the offered records go to."""
    record: Callable[[int, random.Random], tuple[str, bytes, bytes]]
    """Offered record ``i``: its topic (one of :attr:`topics`), Kafka key and Avro value."""


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
    prepare: Callable[[Path, int], Offer]
    """Given a checkpoint folder and a trigger (ms, 0 for the default): fresh topics, what
    the pipeline reads first produced to them, and the pipeline."""
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
    """From the last record offered to the end of the batch that consumed the last record."""
    batches: tuple[Batch, ...] = ()
    """The micro-batches that read offered records."""
    reason: str = ""

    @property
    def achieved_rate(self) -> float:
        """Records per second actually offered."""
        return self.offered / self.seconds if self.seconds else 0.0


def percentile(values: list[float], q: float) -> float:
    """The nearest-rank ``q`` percentile (0 < q <= 1) of ``values`` (not empty)."""
    ordered = sorted(values)
    return float(ordered[max(0, math.ceil(q * len(ordered)) - 1)])


class _Stamps:
    """Delivery callback keeping each delivered record's timestamp by (topic, partition,
    offset)."""

    def __init__(self) -> None:
        self.stamps: dict[tuple[str, int, int], int] = {}
        self.ends: dict[str, int] = {}
        self.failures: list[str] = []

    def __call__(self, err: Any, msg: Any) -> None:
        if err is not None:
            self.failures.append(str(err))
            return
        topic, partition, offset = msg.topic(), msg.partition(), msg.offset()
        self.stamps[(topic, partition, offset)] = msg.timestamp()[1]
        name = f"{topic}/{partition}"
        self.ends[name] = max(self.ends.get(name, 0), offset + 1)


def _offer(
    conf: dict[str, str], offer: Offer, rate: int, seconds: float, seed: int
) -> tuple[_Stamps, float, float]:
    """Offer ``rate`` records/s for ``seconds``; the stamps and when offering began and ended.

    The times are epoch seconds, as the progress reports' batch times are.
    """
    from confluent_kafka import Producer

    from daemon.kafka import clients

    producer = Producer({**conf, "linger.ms": 5, "partitioner": "murmur2_random"})
    stamps = _Stamps()
    rng = random.Random(seed)
    total = int(rate * seconds)
    sent = 0
    started = time.time()
    began = time.monotonic()
    while sent < total:
        due = min(total, int(rate * (time.monotonic() - began)))
        while sent < due:
            topic, key, value = offer.record(sent, rng)
            clients.produce(
                producer,
                topic,
                value=value,
                key=key,
                timestamp=int(time.time() * 1000),
                on_delivery=stamps,
            )
            sent += 1
        producer.poll(0)
        time.sleep(_PACE_S)
    ended = time.time()
    if producer.flush(60) != 0 or stamps.failures:
        raise RuntimeError(
            f"could not offer the records: {stamps.failures[:1] or 'flush timed out'}"
        )
    return stamps, started, ended


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


def run_latency(
    servers: str,
    workload: LatencyWorkload,
    rate: int,
    seconds: float,
    trigger_ms: int,
    seed: int = 7,
    timeout_s: float = 600.0,
) -> LatencyResult:
    """Measure ``workload``'s pipeline's latency at ``rate`` records/s offered for ``seconds``.

    The pipeline runs through ``daemon run``'s service (:func:`bench.enrichd.serving`) on the
    process's Spark session. A pipeline that fails or falls too far behind comes back as a
    result with ``reason`` set, not an exception.
    """
    from daemon.pipeline.plan import client_conf, plan_pipeline
    from daemon.spark.session import spark_session

    conf = {"bootstrap.servers": servers}
    with tempfile.TemporaryDirectory(prefix="enrichd-bench-latency-") as tmp:
        offer = workload.prepare(Path(tmp) / "checkpoint", trigger_ms)
        # Planned here only for its output topic, which the watcher needs before the first
        # output; the service plans the pipeline again when it starts.
        plan_pipeline(offer.file, offer.pipe, client_conf(offer.file))
        watcher = _Watcher(conf, offer.pipe.output.topic, offer.topics)
        try:
            watcher.start_watching()
            spark = spark_session(offer.file.spark)
            with serving(offer.file, offer.pipe, spark, timeout_s) as query:
                running = query(offer.pipe.name)
                first = await_consumed(running, offer.loaded, timeout_s)
                stamps, offered_from, offered_until = _offer(conf, offer, rate, seconds, seed)
                batches = await_consumed(running, {**offer.loaded, **stamps.ends}, timeout_s)
            watcher.finish(timeout_s)
        except RuntimeError as exc:
            return LatencyResult(rate, seconds, trigger_ms, reason=str(exc))
        finally:
            # On failure the watcher may still be reading: let it close its consumer.
            watcher.stop(60)
    offered_batches = tuple(b for b in batches if b.batch_id > first[-1].batch_id)
    latencies: list[float] = []
    same = 0
    for source, (received, output_stamp) in watcher.seen.items():
        if source in stamps.stamps:
            latencies.append(received * 1000 - stamps.stamps[source])
            same += output_stamp == stamps.stamps[source]
    if not latencies:
        reason = f"no output named a known record of {', '.join(offer.topics)}"
        return LatencyResult(rate, seconds, trigger_ms, reason=reason)
    return LatencyResult(
        rate,
        offered_until - offered_from,
        trigger_ms,
        offered=len(stamps.stamps),
        outputs=len(latencies),
        p50_ms=percentile(latencies, 0.50),
        p99_ms=percentile(latencies, 0.99),
        max_ms=max(latencies),
        timestamp_types=", ".join(sorted(watcher.types)),
        same_timestamp=same,
        drain_s=max(b.ended for b in offered_batches) - offered_until if offered_batches else 0.0,
        batches=offered_batches,
    )


# -- the command line and the report ---------------------------------------------------------


def add_latency_arguments(
    parser: argparse.ArgumentParser, offered: str, seconds: float = 30.0
) -> None:
    """The options of a benchmark's latency runs: ``offered`` names the records offered,
    ``seconds`` is how long a run offers them by default."""
    parser.add_argument(
        "--latency-rate",
        type=int,
        default=TARGET_RATE,
        help=f"{offered}/s offered in the latency run",
    )
    parser.add_argument(
        "--latency-seconds", type=float, default=seconds, help="how long the latency run offers"
    )
    parser.add_argument(
        "--trigger-ms",
        type=int,
        nargs="+",
        default=[0, 1_000],
        help="processing-time triggers, one latency run each (0: the pipeline's default: the "
        "next batch as soon as the last one ends)",
    )
    parser.add_argument("--no-latency", action="store_true", help="skip the latency run")


def latency_command(args: argparse.Namespace) -> str:
    """The latency options of a benchmark's command, as the report shows it."""
    if args.no_latency:
        return " --no-latency"
    return (
        f" --latency-rate {args.latency_rate} --latency-seconds {args.latency_seconds:g} "
        f"--trigger-ms {' '.join(str(ms) for ms in args.trigger_ms)}"
    )


def trigger_name(trigger_ms: int) -> str:
    """A trigger as the report names it."""
    return "default" if trigger_ms == 0 else f"{trigger_ms:,} ms"


def run_latencies(
    args: argparse.Namespace,
    servers: str,
    workload: LatencyWorkload,
    console: Console,
    loads: list[tuple[str, float]],
) -> list[LatencyResult]:
    """One latency run per trigger of ``--trigger-ms`` (none with ``--no-latency``)."""
    latencies: list[LatencyResult] = []
    if args.no_latency:
        return latencies
    for trigger_ms in args.trigger_ms:
        name = trigger_name(trigger_ms)
        with console.status(
            f"enrichd latency: {args.latency_rate:,} records/s for {args.latency_seconds:g} s, "
            f"{name} trigger"
        ):
            latency = run_latency(
                servers,
                workload,
                args.latency_rate,
                args.latency_seconds,
                trigger_ms,
                args.seed,
            )
        console.print(
            f"latency ({name} trigger): p50 {latency.p50_ms:,.0f} ms, p99 "
            f"{latency.p99_ms:,.0f} ms; {latency.same_timestamp:,} of {latency.outputs:,} "
            f"{workload.outputs} carry their source record's timestamp"
            if not latency.reason
            else f"latency ({name} trigger) not measured: {latency.reason}",
            highlight=False,
        )
        loads.append((f"latency run ({name} trigger)", os.getloadavg()[0]))
        latencies.append(latency)
    return latencies


def latency_checks(latencies: list[LatencyResult], workload: LatencyWorkload) -> list[str]:
    """The report's checks of the latency runs: every offered record's output read back."""
    return [
        f"latency run ({trigger_name(r.trigger_ms)} trigger): {r.outputs:,} "
        f"{workload.outputs} of {workload.expected(r.offered):,} read back "
        f"({r.offered:,} {workload.offered} offered)"
        for r in latencies
        if not r.reason
    ]


def latencies_ok(latencies: list[LatencyResult], workload: LatencyWorkload) -> bool:
    """Whether every measured latency run read back every output its offered records make."""
    return all(r.outputs == workload.expected(r.offered) for r in latencies if not r.reason)


def _verdict(latency: LatencyResult, workload: LatencyWorkload) -> str:
    """Whether one run meets the latency target, in a sentence."""
    trigger = (
        f"With the default trigger ({workload.default_trigger})"
        if latency.trigger_ms == 0
        else f"With a {latency.trigger_ms:,} ms processing-time trigger"
    )
    if latency.offered_rate != TARGET_RATE:
        return (
            f"{trigger} this run offered {latency.offered_rate:,}/s, so it does not judge the "
            "target."
        )
    p99 = latency.p99_ms
    if p99 < LATENCY_TARGET_MS:
        return f"{trigger} this run meets it: p99 {p99 / 1000:.2f} s."
    return (
        f"{trigger} this run misses it: p99 {p99 / 1000:.2f} s, "
        f"{p99 / LATENCY_TARGET_MS:.2f}x the target."
    )


def _row(latency: LatencyResult) -> str:
    batches = latency.batches
    rows = sum(b.rows for b in batches) / len(batches) if batches else 0.0
    trigger = (
        sum(b.durations_ms.get("triggerExecution", 0) for b in batches) / len(batches)
        if batches
        else 0.0
    )
    return (
        f"| {trigger_name(latency.trigger_ms)} | {latency.offered_rate:,} | "
        f"{latency.outputs:,} | {latency.p50_ms:,.0f} | {latency.p99_ms:,.0f} | "
        f"{latency.max_ms:,.0f} | {len(batches)} | {rows:,.0f} | {trigger:,.0f} | "
        f"{latency.drain_s:.1f} |"
    )


def latency_section(
    latencies: list[LatencyResult],
    workload: LatencyWorkload,
    max_records_per_batch: int,
    sustained_rate: float,
) -> list[str]:
    """The report's latency section: one row per trigger, the target, the batches behind them."""
    if not latencies:
        return []
    offered, outputs = workload.offered, workload.outputs
    lines = [f"### End-to-end latency (enrichd {workload.joiner})", ""]
    lines += [
        f"Not measured with the {trigger_name(r.trigger_ms)} trigger: {r.reason}."
        for r in latencies
        if r.reason
    ]
    measured = [r for r in latencies if not r.reason]
    if not measured:
        return [*lines, ""]
    first = measured[0]
    lines += [
        f"{first.offered:,} {offered} offered at {first.offered_rate:,} records/s for "
        f"{first.seconds:.0f} s (achieved "
        + ", ".join(f"{r.achieved_rate:,.0f}/s" for r in measured)
        + f") to the {workload.joiner} pipeline, in one run per trigger below, with its "
        f"{max_records_per_batch:,}-record batch cap and {workload.loaded}. "
        "The default trigger is the pipeline's when it sets none; a processing-time trigger "
        "starts a batch at most that often, which spends less per record on each batch's "
        "fixed cost and makes a record wait up to an interval longer. "
        "Latency is the wall-clock time at which a `read_committed` consumer, reading the "
        "output topic from offset 0 while the pipeline runs, first receives an output, minus "
        "its source record's CreateTime (the wall-clock time the bench handed the record to "
        "its producer), the record found through the output's `enrichd.source.*` headers. It "
        "includes the batch's transaction commit, since such a reader gets no output before "
        "it: what a downstream consumer experiences.",
        "",
        f"| trigger | offered records/s | {outputs} | p50 ms | p99 ms | max ms | batches "
        "| records per batch | ms per batch | drain s |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        *(_row(r) for r in measured),
        "",
        f"- Target: p99 < {LATENCY_TARGET_MS / 1000:.0f} s at {TARGET_RATE:,} records/s "
        "offered. " + " ".join(_verdict(r, workload) for r in measured),
        "- *drain*: from the last record offered to the end of the batch that read the last "
        "record. Timestamps read back: "
        + ", ".join(sorted({r.timestamp_types or "none" for r in measured}))
        + ".",
        f"- {outputs.capitalize()} whose Kafka timestamp equals their source record's: "
        + ", ".join(f"{r.same_timestamp:,} of {r.outputs:,}" for r in measured)
        + f" (enrichd stamps an output with its input's timestamp, so the {outputs}' "
        "timestamps cannot measure latency).",
    ]
    if workload.detail:
        lines.append(f"- {workload.detail}")
    if first.offered_rate > sustained_rate:
        lines.append(
            f"- The offered rate is above the sustained throughput measured above "
            f"({sustained_rate:,.0f} records/s), so a backlog builds for as long as "
            f"{offered} are offered and latency grows with it: the percentiles then measure "
            "the queue, not the pipeline's per-batch delay."
        )
    return [*lines, ""]
