"""What the two-stream benchmarks (``asof``, ``window``) share: topics, a raw loop, enrichd runs.

Both workloads have a left and a right topic keyed by the same join key, produced with the
murmur2 partitioner (as Kafka's Java clients and Quix Streams do), so partition N of both
topics holds the same keys: the two-process ceiling gives each process one partition of
each topic, and Quix Streams' joins find co-partitioned inputs, as they require.

The raw ceiling (:func:`run_raw`) is a tight confluent-kafka + fastavro loop that applies
records in the order enrichd's ``order = "arrival"`` joiners see them: by Kafka timestamp,
left before right on a tie. It merges its partitions on the fly, holding a partition's
records back only while another partition it still reads has nothing buffered (its next
record may be older). The join itself is a :class:`RawJoin` the workload supplies, a
plain-dict restatement of the joiner's rules, so the ceiling emits what enrichd emits.

enrichd runs (:func:`run_example`) load an example pipeline file as users would, point it
at the benchmark's topics with fresh output names and checkpoint, and measure throughput from
the query's progress reports (as :mod:`bench.enrichd` does for comap), peak memory of the
JVM and its Python workers, and the checkpoint's state folder. enrichd runs ``--runs`` times
over the same topics and the report gives the median (:class:`bench.runs.Repeated`).

:func:`run_contenders` produces a workload and runs every contender on it for a
:class:`Join`; :func:`contenders` and :func:`closing_lines` give the report parts both
workloads share.
"""

from __future__ import annotations

import io
import tempfile
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import fastavro

from bench import ceiling, tuning, wording
from bench.ceiling import LoopResult, RawResult
from bench.enrichd import EnrichdResult, batch_table, run_pipeline
from bench.quix import QuixResult
from bench.quixjoins import run_quix_join
from bench.rawjoin import RawJoin, RawSpec, schema
from bench.runs import Repeated, local_cores, repeat, repeated_contenders, spark_master
from bench.wording import Contender, ceiling_verdict, peer_verdict, quix_note
from bench.workloads import create_input_topics, input_producer, read_committed
from daemon.kafka import clients

QUIX_JOIN = {"asof": "join_asof", "window": "join_interval"}
"""Each workload's Quix Streams join (see :mod:`bench.quixjoins`)."""


def produce(conf: dict[str, str], records: Iterable[tuple[str, str, bytes, int]]) -> dict[str, int]:
    """Produce ``(topic, key, value, timestamp)`` records in order; each partition's end offset.

    Raises:
        RuntimeError: a record could not be delivered.
    """
    producer = input_producer(conf)  # co-partitioned, as Quix's joins require
    deliveries = clients.Deliveries()
    for i, (topic, key, value, timestamp) in enumerate(records):
        clients.produce(
            producer,
            topic,
            value=value,
            key=key.encode(),
            timestamp=timestamp,
            on_delivery=deliveries,
        )
        if i % 10_000 == 0:
            producer.poll(0)
    failures = deliveries.failures
    if producer.flush(60) != 0 or failures:
        raise RuntimeError(f"could not produce the workload: {failures[:1] or 'flush timed out'}")
    return deliveries.ends


@dataclass(frozen=True)
class JoinLoopResult(LoopResult):
    """What one raw loop did, on ``time.monotonic``, with its join's late and held records."""

    late: int
    held: int


def raw_loop(
    spec: RawSpec, partitions: list[tuple[str, int]], ends: dict[str, int], go: Any = None
) -> JoinLoopResult:
    """Join ``partitions`` (topic, partition) up to ``ends`` into ``spec.output``."""
    from confluent_kafka import TopicPartition

    readers = {topic: schema(name) for topic, name in spec.schemas.items()}
    rank = {topic: spec.rank(topic) for topic in spec.roles}
    out_schema = schema(spec.output_schema)
    consumer, producer = ceiling.consumer(spec.conf), ceiling.producer(spec.conf)
    reader: Any = fastavro.schemaless_reader
    writer: Any = fastavro.schemaless_writer
    buffer = io.BytesIO()
    output = spec.output
    emitted = 0

    def emit(key: str, value: dict[str, Any]) -> None:
        nonlocal emitted
        buffer.seek(0)
        buffer.truncate()
        writer(buffer, out_schema, value)
        emitted += 1
        ceiling.send(producer, output, buffer.getvalue(), key.encode())

    join = spec.join(spec.options, emit)
    ends_of = {(t, p): ends.get(f"{t}/{p}", 0) for t, p in partitions}
    reading = {tp for tp, end in ends_of.items() if end > 0}
    buffers: dict[tuple[str, int], deque[Any]] = {tp: deque() for tp in ends_of}
    consumed = 0

    def apply(message: Any) -> None:
        topic = message.topic()
        join.apply(spec.roles[topic], reader(io.BytesIO(message.value()), readers[topic], None))

    def order(message: Any) -> tuple[int, int]:
        return message.timestamp()[1], rank[message.topic()]

    def drain() -> None:
        # Apply records oldest first while every partition still being read has one buffered.
        while True:
            heads = []
            for tp, pending in buffers.items():
                if pending:
                    heads.append((order(pending[0]), tp))
                elif tp in reading:
                    return  # its next record may be older than every buffered one
            if not heads:
                return
            heads.sort()
            pending = buffers[heads[0][1]]
            if len(heads) == 1:
                while pending:
                    apply(pending.popleft())
                continue
            bound = heads[1][0]  # a run from the oldest partition up to the next one's head
            apply(pending.popleft())  # the oldest, also when it ties with the next head
            while pending and order(pending[0]) < bound:
                apply(pending.popleft())

    if go is not None:
        go.wait()
    consumer.assign([TopicPartition(t, p, 0) for t, p in partitions])
    first = 0.0
    try:
        while reading or any(buffers.values()):
            if reading:
                messages: list[Any] = consumer.consume(num_messages=10_000, timeout=0.5)
                if messages and not first:
                    first = time.monotonic()
                for message in messages:
                    if message.error() is not None:
                        continue
                    consumed += 1
                    where = (message.topic(), message.partition())
                    buffers[where].append(message)
                    if message.offset() + 1 >= ends_of[where]:
                        reading.discard(where)
            drain()
            producer.poll(0)
        done = ceiling.delivered(producer)
    finally:
        consumer.close()
    return JoinLoopResult(first, done, consumed, emitted, join.late, join.state_entries())


@dataclass(frozen=True)
class RawRun:
    """A ceiling measurement over all its processes, with the join's own counts."""

    result: RawResult
    late: int
    held: int

    @property
    def rate(self) -> float:
        """Input records per second."""
        return self.result.rate


def run_raw(spec: RawSpec, ends: dict[str, int], processes: int, input_records: int) -> RawRun:
    """Measure the ceiling in this process (1) or in spawned ones, one per partition number."""
    partitions = sorted((topic, int(p)) for topic, _, p in (name.rpartition("/") for name in ends))
    partitions = [(t, p) for t, p in partitions if t in spec.roles]
    shares = [(spec, partitions, ends)]
    if processes > 1:
        numbers = sorted({p for _, p in partitions})
        shares = [
            (spec, [(t, p) for t, p in partitions if p in numbers[i::processes]], ends)
            for i in range(processes)
        ]
    loops = ceiling.run_loops(raw_loop, shares)
    result = ceiling.measure(loops, input_records)
    return RawRun(result, sum(r.late for r in loops), sum(r.held for r in loops))


def configure(
    servers: str,
    example: Path,
    topics: dict[str, str],
    options: dict[str, Any],
    checkpoint: Path,
    max_records_per_batch: int,
    trigger_ms: int = 0,
) -> tuple[Any, Any]:
    """``example``'s pipeline file and pipeline, reading ``topics`` (role -> topic) on ``servers``.

    ``options`` update the example's joiner options; outputs get fresh topic names;
    ``trigger_ms`` 0 keeps the pipeline's default trigger.
    """
    from daemon.model.config import KafkaConfig, load_pipeline_file

    file = load_pipeline_file(example)
    file = file.model_copy(update={"kafka": KafkaConfig(bootstrap_servers=servers)})
    pipe = file.pipeline[0]
    suffix = uuid.uuid4().hex[:8]
    inputs = {
        role: spec.model_copy(update={"topic": topics[role]}) for role, spec in pipe.inputs.items()
    }
    pipe = pipe.model_copy(
        update={
            "name": f"bench-{pipe.joiner}-{suffix}",
            "inputs": inputs,
            "output": pipe.output.model_copy(update={"topic": f"bench-{pipe.joiner}-{suffix}"}),
            "dead_letter_topic": f"bench-{pipe.joiner}-{suffix}.dlq",
            "checkpoint": checkpoint,
            "max_records_per_batch": max_records_per_batch,
            "options": {**pipe.options, **options},
            "trigger": trigger_ms,
        }
    )
    return file, pipe


def run_example(
    servers: str,
    example: Path,
    topics: dict[str, str],
    options: dict[str, Any],
    ends: dict[str, int],
    input_records: int,
    max_records_per_batch: int,
    timeout_s: float = 0.0,
) -> EnrichdResult:
    """Run ``example``'s pipeline over the produced topics until all is consumed.

    Raises:
        RuntimeError: the query failed or did not consume everything within ``timeout_s``.
    """
    from daemon.spark.session import spark_session

    with tempfile.TemporaryDirectory(prefix="enrichd-bench-") as tmp:
        file, pipe = configure(
            servers, example, topics, options, Path(tmp) / "checkpoint", max_records_per_batch
        )
        keep_progress(spark_session(tuning.spark(file.spark)))
        return run_pipeline(
            file, pipe, ends, input_records, timeout_s or timeout_for(input_records)
        )


def timeout_for(records: int) -> float:
    """How long a contender may take: 30 min, or longer than 200 records/s would need."""
    return max(1800.0, records / 200)


def keep_progress(spark: Any) -> None:
    """Keep every progress report of a query (Spark's default keeps the last 100 only)."""
    spark.conf.set("spark.sql.streaming.numRecentProgressUpdates", "100000")


def count_keys(conf: dict[str, str], topic: str, timeout_s: float = 60.0) -> dict[bytes, int]:
    """How many committed records each key of ``topic`` has."""
    counts: dict[bytes, int] = {}
    for _, records in read_committed(conf, topic, "enrichd-bench-count", timeout_s):
        for record in records:
            key = record.key() or b""
            counts[key] = counts.get(key, 0) + 1
    return counts


def where_time_goes(spark: EnrichdResult, one_process_rate: float) -> str:
    """Why enrichd trails the ceiling, from its steady batches' progress reports."""
    steady = spark.steady()
    rows = sum(b.rows for b in steady) / len(steady)
    trigger = spark.mean_ms("triggerExecution")
    add = spark.mean_ms("addBatch")
    per_record = add * 1000 / rows if rows else 0.0
    ceiling = 1e6 / one_process_rate
    return (
        f"Steady batches average {rows:,.0f} records in {trigger:,.0f} ms; addBatch (read, "
        f"decode, the joiner with its RocksDB state, encode, transactional produce) takes "
        f"{add:,.0f} ms of it, {per_record:.1f} us per record against {ceiling:.1f} us for "
        f"the whole one-process raw loop ({per_record / ceiling:.1f}x); the other "
        f"{trigger - add:,.0f} ms per batch go to planning, offsets and commits."
    )


def latest_values(conf: dict[str, str], topic: str, timeout_s: float = 60.0) -> dict[bytes, bytes]:
    """The last committed value of each key of ``topic`` (what a compacted topic keeps)."""
    latest: dict[bytes, bytes] = {}
    for _, records in read_committed(conf, topic, "enrichd-bench-latest", timeout_s):
        for record in records:
            latest[record.key() or b""] = record.value() or b""
    return latest


@dataclass(frozen=True)
class Runs:
    """Every contender's run on one produced workload."""

    total: int
    """Input records."""
    ends: dict[str, int]
    """Each input partition's end offset."""
    one: RawRun
    two: RawRun
    quix: QuixResult
    enrichd: Repeated

    @property
    def spark(self) -> EnrichdResult:
        """The enrichd run whose sustained rate is the median: its batches, outputs and
        memory are the ones a report shows."""
        return self.enrichd.typical


@dataclass(frozen=True)
class Join:
    """What a two-stream workload joins, for :func:`run_contenders`."""

    kind: str
    """``"asof"`` or ``"window"``: the joiner, and Quix Streams' join (:data:`QUIX_JOIN`)."""
    example: Path
    """The example pipeline file enrichd runs."""
    schemas: tuple[str, str, str]
    """The left, right and output schema names."""
    raw: type[RawJoin]
    """The raw loop's restatement of the joiner."""
    overrides: dict[str, Any]
    """What the enrichd run changes in the example's joiner options."""


def raw_spec(
    join: Join, conf: dict[str, str], topics: dict[str, str], output: str, options: dict[str, Any]
) -> RawSpec:
    """What a raw loop of ``join`` reads (``topics``: role -> topic) and writes (``output``),
    with the joiner's ``options``."""
    left, right, output_schema = join.schemas
    return RawSpec(
        conf=conf,
        roles={topics["left"]: "left", topics["right"]: "right"},
        schemas={topics["left"]: left, topics["right"]: right},
        output_schema=output_schema,
        output=output,
        join=join.raw,
        options=options,
    )


def run_contenders(
    console: Any,
    join: Join,
    conf: dict[str, str],
    topics: dict[str, str],
    outputs: dict[str, str],
    options: dict[str, Any],
    workload: Callable[[], Iterable[tuple[str, str, bytes, int]]],
    total: int,
    quix_python: str,
    max_batch: int,
    enrichd_runs: int = 1,
) -> Runs:
    """Produce ``workload()`` to ``topics`` (role -> topic), then run the raw ceiling in 1
    and 2 processes (into ``outputs["raw1"]``, ``["raw2"]``) and Quix Streams' join (into
    ``["quix"]``) with the joiner's ``options``, and ``join.example``'s enrichd pipeline
    ``enrichd_runs`` times."""
    from daemon.kafka.admin import create_topics

    kind, servers = join.kind, conf["bootstrap.servers"]
    spec = raw_spec(join, conf, topics, outputs["raw1"], options)
    create_input_topics(conf, topics.values())
    create_topics(conf, dict.fromkeys(outputs.values(), 2))
    with console.status(f"producing {total:,} records"):
        ends = produce(conf, workload())
    with console.status("raw ceiling, 1 process"):
        one = run_raw(spec, ends, 1, total)
    console.print(f"raw ceiling, 1 process: {one.rate:,.0f} records/s", highlight=False)
    with console.status("raw ceiling, 2 processes"):
        two = run_raw(RawSpec(**{**spec.__dict__, "output": outputs["raw2"]}), ends, 2, total)
    console.print(f"raw ceiling, 2 processes: {two.rate:,.0f} records/s", highlight=False)
    cores = local_cores(spark_master(join.example))
    with console.status(f"Quix Streams {QUIX_JOIN[kind]} ({cores} child processes)"):
        quix = run_quix_join(
            quix_python,
            servers,
            kind,
            topics,
            outputs["quix"],
            options,
            total,
            timeout_for(total),
            processes=cores,
        )
    console.print(
        f"Quix Streams: {quix.rate:,.0f} records/s" if quix.ran else f"Quix not run: {quix.reason}",
        highlight=False,
    )
    enrichd = repeat(
        lambda: run_example(servers, join.example, topics, join.overrides, ends, total, max_batch),
        enrichd_runs,
        console,
        f"enrichd {kind}",
    )
    return Runs(total, ends, one, two, quix, enrichd)


def contenders(kind: str, runs: Runs, quix_detail: str) -> list[Contender]:
    """The report's rows for the raw ceiling, Quix Streams (``quix_detail`` after its version,
    processes and start-up) and enrichd, sustained and end to end."""
    one, two, quix = runs.one, runs.two, runs.quix
    return [
        Contender("raw ceiling, 1 process", one.rate, one.result.seconds, "merge + dicts"),
        Contender("raw ceiling, 2 processes", two.rate, two.result.seconds, "the reference"),
        Contender(
            f"Quix Streams {QUIX_JOIN[kind]}",
            quix.rate if quix.ran else None,
            quix.seconds if quix.ran else None,
            quix_note(quix) + quix_detail if quix.ran else f"not run: {quix.reason}",
        ),
        *repeated_contenders(f"enrichd {kind}", runs.enrichd),
    ]


def closing_lines(
    kind: str, runs: Runs, max_batch: int, checks: list[str], latency: Iterable[str] = ()
) -> list[str]:
    """The verdicts against the ceiling and Quix Streams, enrichd's batches, the ``latency``
    section, and ``checks``."""
    one, two, quix, spark = runs.one, runs.two, runs.quix, runs.spark
    sustained = runs.enrichd.sustained
    return [
        ceiling_verdict(sustained, two.rate, where_time_goes(spark, one.rate), one=one.rate),
        peer_verdict(
            sustained,
            quix.rate if quix.ran else None,
            f"Quix Streams' {QUIX_JOIN[kind]}",
            quix.reason,
        ),
        "",
        *wording.batches_lines(
            "Micro-batches of enrichd that read records", max_batch, batch_table(spark.batches)
        ),
        *latency,
        wording.checks_line(checks),
    ]
