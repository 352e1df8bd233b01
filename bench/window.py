"""window: left events + right events within 10 s -> joined pairs (issue #7).

The workload of ``examples/window-join.toml``: two streams keyed by ``k``. Every record gets
the next slot of a global event-time clock (``--step-ms`` apart, 1 ms by default), a
uniformly chosen key and a side (exactly ``--per-side`` each), and is produced in that order
with its event time ``at`` as its Kafka timestamp: the input is in order, so no record is
late for anyone and every contender must find the same pairs. With the issue's sizes each
key sees a record of each side every 20 s on average, so a left record has about one right
partner within the 10 s window.

Every contender does the same inner join (the example's ``mode = "left"`` is overridden to
``"inner"``: Spark's and Quix's outer modes emit null results at other moments, so only
inner joins give comparable outputs): the raw loop (confluent-kafka + fastavro + the
``window`` rules in plain dicts) in 1 and 2 processes; Quix Streams' ``join_interval``;
enrichd's ``window`` pipeline on ``local[2]``, ``--runs`` times over the same topics (the
median reported); and, in the same Spark session, Spark's own stream-stream join over the
same topics (:func:`run_spark_join`).

Unless ``--no-latency``, enrichd's end-to-end latency follows (see :mod:`bench.latencies`):
pairs of a left and a right event of one key offered at a fixed rate, each pair's output
timed from the event that completed it.
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench import commit, headline, rawjoin, tuning, twostream
from bench.enrichd import Batch, EnrichdResult, resources_lines
from bench.latencies import (
    add_latency_arguments,
    latencies_ok,
    latency_checks,
    latency_command,
    latency_section,
    run_latencies,
)
from bench.latency import LatencyResult, LatencyWorkload, Offer
from bench.rawjoin import Emit, RawJoin
from bench.report import Section
from bench.resources import MIB, PeakMemory, state_bytes, state_line
from bench.runs import add_runs_argument, local_cores, run_checks, spark_master
from bench.wording import (
    QUIX_SCALING,
    SERVICE_LINE,
    Contender,
    machine,
    markdown_table,
    plot_of,
    quix_option,
    rate,
    run_date,
    run_header,
    throughput_table,
)
from bench.workloads import REPO, codec, count_records, create_input_topics
from daemon.model.config import DEFAULT_MAX_RECORDS_PER_BATCH

EXAMPLE = REPO / "examples" / "window-join.toml"
MODE = "inner"
"""The join every contender does (see the module docstring)."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The workload's sizes, the batch caps and enrichd's runs.

    1.6 times issue #7's sizes by default, so that the default cap makes six batches after
    the first (:data:`bench.runs.MIN_STEADY_BATCHES`).
    """
    parser.add_argument("--keys", type=int, default=10_000, help="join keys")
    parser.add_argument("--per-side", type=int, default=1_600_000, help="records per side")
    parser.add_argument(
        "--step-ms", type=int, default=1, help="event time between consecutive records"
    )
    parser.add_argument(
        "--max-batch",
        type=int,
        default=DEFAULT_MAX_RECORDS_PER_BATCH,
        help="enrichd max_records_per_batch (the pipeline default); Spark's join reads half of "
        "it per topic",
    )
    parser.add_argument("--seed", type=int, default=7, help="seed for keys and sides")
    parser.add_argument("--no-spark-join", action="store_true", help="skip Spark's own join")
    add_runs_argument(parser)
    # A key comes round every LATENCY_REPEAT_S and keeps its events for window + window +
    # grace (22 s in the example), so the state reaches its steady size about 24 s into the
    # run, and its batches their steady cost: 30 s left the slowest batches in the last few
    # seconds (p99 1.62 s in 30 s, 2.10 s in 60 s, on 2026-11-23).
    add_latency_arguments(parser, "events", seconds=60.0)


def example_options() -> dict[str, Any]:
    """The example's ``window`` options, validated (durations in ms), in inner mode."""
    from daemon.joiners.window import WindowOptions
    from daemon.model.config import load_pipeline_file

    pipe = load_pipeline_file(EXAMPLE).pipeline[0]
    options = WindowOptions.model_validate({**pipe.options, "mode": MODE}).model_dump()
    before, after = WindowOptions.model_validate(options).sides()
    return {**options, "before": before, "after": after}


def records(
    args: argparse.Namespace, topics: dict[str, str]
) -> Iterator[tuple[str, str, bytes, int]]:
    """The workload in production order: ``(topic, key, Avro value, Kafka timestamp)``."""
    rng = random.Random(args.seed)
    sides = ["left"] * args.per_side + ["right"] * args.per_side
    rng.shuffle(sides)
    codecs = {"left": codec("left_event"), "right": codec("right_event")}
    base = 1_700_000_000_000
    for slot, side in enumerate(sides):
        key = rng.randrange(args.keys)
        at = base + slot * args.step_ms
        value = {"k": key, "v": f"{side[0]}{slot}", "at": at}
        yield topics[side], str(key), codecs[side].encode(value), at


class RawWindow(RawJoin):
    """The ``window`` rules in plain dicts: per-key stream time, pairs, lateness, eviction."""

    def __init__(self, options: dict[str, Any], emit: Emit) -> None:
        super().__init__(options, emit)
        self.before: int = options["before"]
        self.after: int = options["after"]
        self.grace: int = options["grace"]
        self.keep = self.before + self.after + self.grace
        self.unmatched = {"inner": (), "left": (True,), "outer": (True, False)}[options["mode"]]
        self.keys: dict[int, list[Any]] = {}
        """key -> [stream time, next seq, held: [event time, seq, is left, value, matched]]"""

    def apply(self, role: str, value: dict[str, Any]) -> None:
        """Apply one record: late check, close what no on-time record can join, pair, hold."""
        left = role == "left"
        key, at = value["k"], value["at"]
        state = self.keys.get(key)
        if state is None:
            state = self.keys[key] = [None, 0, []]
        now = state[0]
        if now is not None and at + (self.after if left else self.before) + self.grace < now:
            self.late += 1
            return
        now = state[0] = at if now is None or at > now else now
        held = state[2]
        if held and min(h[0] for h in held) + self.keep < now:
            closed = sorted((h for h in held if h[0] + self.keep < now), key=lambda h: h[:2])
            state[2] = held = [h for h in held if h[0] + self.keep >= now]
            for h in closed:
                if not h[4] and h[2] in self.unmatched:
                    pair = {"left": h[3], "right": None} if h[2] else {"left": None, "right": h[3]}
                    self.emit(str(key), pair)
        if left:
            lo, hi = at - self.before, at + self.after
            partners = [h for h in held if not h[2] and lo <= h[0] <= hi]
        else:
            lo, hi = at - self.after, at + self.before
            partners = [h for h in held if h[2] and lo <= h[0] <= hi]
        partners.sort(key=lambda h: h[:2])
        for partner in partners:
            partner[4] = True
            pair = (
                {"left": value, "right": partner[3]}
                if left
                else {"left": partner[3], "right": value}
            )
            self.emit(str(key), pair)
        held.append([at, state[1], left, value, bool(partners)])
        state[1] += 1

    def state_entries(self) -> int:
        """Records held at the end."""
        return sum(len(s[2]) for s in self.keys.values())


JOIN = twostream.Join(
    "window", EXAMPLE, ("left_event", "right_event", "joined_pair"), RawWindow, {"mode": MODE}
)


def run_spark_join(
    servers: str,
    topics: dict[str, str],
    ends: dict[str, int],
    options: dict[str, Any],
    total: int,
    max_batch: int,
    timeout_s: float = 0.0,
) -> tuple[EnrichdResult, dict[str, Any]]:
    """Spark's own stream-stream inner join of the two topics; its batches and final state.

    Each topic is read through enrichd's source (``format("enrichd-kafka")``, one input per
    source, at most half of ``max_batch`` records per batch each, so a batch is as large as
    enrichd's), its packs of records unpacked and their Avro values decoded with fastavro in
    one ``mapInArrow`` step, and joined on ``k`` with watermarks of ``grace`` on both sides and
    the time-range condition of the window, into Spark's ``noop`` sink.
    """
    import pyarrow as pa
    from pyspark.sql import functions as F
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    from daemon.model.config import load_pipeline_file
    from daemon.pipeline.plan import register_data_sources
    from daemon.source.spec import SourceInput, SourceSpec
    from daemon.spark.session import TRACK_STATE_ROWS, spark_session

    conf = {"bootstrap.servers": servers}
    timeout_s = timeout_s or twostream.timeout_for(total)
    spark = spark_session(tuning.spark(load_pipeline_file(EXAMPLE).spark))
    register_data_sources(spark)
    twostream.keep_progress(spark)
    shape = StructType(
        [
            StructField("k", LongType()),
            StructField("v", StringType()),
            StructField("at", LongType()),
        ]
    )
    arrow_shape = pa.schema([("k", pa.int64()), ("v", pa.string()), ("at", pa.int64())])

    def side(role: str, schema_name: str) -> Any:
        schema_text = json.dumps(rawjoin.schema(schema_name))

        def decode(packs: Iterator[Any]) -> Iterator[Any]:
            import io

            import fastavro
            import pyarrow as pa

            from daemon.model.wire import unpack

            schema = fastavro.parse_schema(json.loads(schema_text))
            for pack in packs:
                for blob in pack.column("records").to_pylist():
                    records = unpack(blob)
                    values = (
                        fastavro.schemaless_reader(io.BytesIO(value), schema, None)
                        for input_index, value in zip(
                            records.column("input").to_pylist(),
                            records.column("value").to_pylist(),
                            strict=True,
                        )
                        if input_index == 0  # the one input, not end-of-input markers
                    )
                    yield pa.RecordBatch.from_pylist(list(values), schema=arrow_shape)

        spec = SourceSpec(
            (SourceInput(role, topics[role], "k", "at", codec(schema_name), False),),
            conf,
            max(max_batch // 2, 1),  # two sources: the same records per batch as enrichd
        )
        p = role[0]
        rows = (
            spark.readStream.format("enrichd-kafka")
            .option("spec", spec.encode())
            .load()
            .mapInArrow(decode, shape)
        )
        return rows.select(
            F.col("k").alias(f"{p}k"),
            F.col("v").alias(f"{p}v"),
            F.timestamp_millis(F.col("at")).alias(f"{p}t"),
        ).withWatermark(f"{p}t", f"{options['grace']} milliseconds")

    left, right = side("left", "left_event"), side("right", "right_event")
    before, after = options["before"] / 1000, options["after"] / 1000
    joined = left.join(
        right,
        F.expr(
            f"lk = rk AND rt >= lt - INTERVAL {before:g} SECONDS "
            f"AND rt <= lt + INTERVAL {after:g} SECONDS"
        ),
        "inner",
    )
    with tempfile.TemporaryDirectory(prefix="enrichd-bench-spark-") as tmp:
        checkpoint = Path(tmp) / "checkpoint"
        with PeakMemory() as peak:
            result = EnrichdResult(
                input_records=total, session_start_s=0.0, query_started=time.time()
            )
            # Spark's default, which enrichd's session turns off: the report counts the join's
            # state rows. A query reads the setting as it starts.
            spark.conf.set(TRACK_STATE_ROWS, "true")
            try:
                query = (
                    joined.writeStream.format("noop")
                    .option("checkpointLocation", str(checkpoint))
                    .queryName(f"bench-spark-join-{uuid.uuid4().hex[:8]}")
                    .start()
                )
            finally:
                spark.conf.set(TRACK_STATE_ROWS, "false")
            try:
                reports = _await_sources(query, ends, timeout_s)
            finally:
                query.stop()
        state = state_bytes(checkpoint)
    batches = [batch for batch in map(Batch.of, reports) if batch.rows]
    result.batches = batches
    result.peaks, result.state_bytes = peak.result, state
    outputs = sum(max(r.sink.numOutputRows, 0) for r in reports)
    operators = reports[-1].stateOperators if reports else []
    extra = {
        "outputs": outputs if all(r.sink.numOutputRows >= 0 for r in reports) else None,
        "state_rows": sum(op.numRowsTotal for op in operators),
        "state_memory": sum(op.memoryUsedBytes for op in operators),
        "dropped": sum(op.numRowsDroppedByWatermark for r in reports for op in r.stateOperators),
    }
    return result, extra


def _await_sources(query: Any, ends: dict[str, int], timeout_s: float) -> list[Any]:
    """Wait until every source of ``query`` consumed to ``ends``; every progress report.

    Raises:
        RuntimeError: the query failed or did not get there within ``timeout_s``.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        if query.exception() is not None:
            raise RuntimeError(f"Spark's join failed: {query.exception()}")
        last = query.lastProgress
        reached: dict[str, int] = {}
        for source in last.sources if last is not None else []:
            reached.update(json.loads(source.endOffset or "{}"))
        if all(reached.get(name, 0) >= end for name, end in ends.items()):
            break
        if time.monotonic() > deadline:
            raise RuntimeError(f"Spark's join did not consume everything in {timeout_s:.0f}s")
        time.sleep(0.1)
    reports = {r.batchId: r for r in query.recentProgress}
    return [reports[i] for i in sorted(reports)]


LATENCY_REPEAT_S = 12
"""How long before a key of the latency run comes round again: longer than the window, so
each offered event pairs with its own partner only."""


@dataclass(frozen=True)
class OfferedPairs:
    """Offered event ``i``: pairs of a left then a right event of one key, the ``keys`` keys
    taken in turn, the wall-clock time their event time (picklable, for the load generator's
    process)."""

    topics: dict[str, str]
    """Role (``left``, ``right``) -> topic."""
    keys: int

    def __call__(self, i: int, rng: random.Random) -> tuple[str, bytes, bytes]:
        side = "left" if i % 2 == 0 else "right"
        key = i // 2 % self.keys
        value = {"k": key, "v": f"{side[0]}{i}", "at": int(time.time() * 1000)}
        return self.topics[side], str(key).encode(), codec(f"{side}_event").encode(value)


def latency_keys(rate: int) -> int:
    """How many keys the events offered at ``rate`` take in turn: a key comes round every
    :data:`LATENCY_REPEAT_S`."""
    return max(1, rate * LATENCY_REPEAT_S // 2)


def latency_workload(servers: str, max_records_per_batch: int) -> LatencyWorkload:
    """The window latency runs: events offered in pairs, a left then a right of one key, each
    with the wall-clock time it is offered as its event time."""

    def prepare(checkpoint: Path, trigger_ms: int, rate: int) -> Offer:
        conf = {"bootstrap.servers": servers}
        suffix = uuid.uuid4().hex[:8]
        topics = {"left": f"lat-left-{suffix}", "right": f"lat-right-{suffix}"}
        create_input_topics(conf, tuple(topics.values()))
        keys = latency_keys(rate)
        # Something to read first, so that the pipeline is running when offering starts:
        # left events of other keys, a minute old, which no offered event pairs with.
        old = int(time.time() * 1000) - 60_000
        left = codec("left_event")
        warm = [
            (topics["left"], str(k), left.encode({"k": k, "v": "warm", "at": old}), old)
            for k in range(keys, keys + 100)
        ]
        loaded = twostream.produce(conf, warm)
        file, pipe = twostream.configure(
            servers, EXAMPLE, topics, {"mode": MODE}, checkpoint, max_records_per_batch, trigger_ms
        )
        raw = twostream.raw_spec(JOIN, conf, topics, "", example_options())
        offered = OfferedPairs(topics, keys)
        return Offer(file, pipe, loaded, tuple(topics.values()), offered, raw)

    return LatencyWorkload(
        "window",
        "events",
        "pairs",
        "100 older left events of other keys already read",
        prepare,
        offered_per_output=2,
        default_trigger=(
            "the next batch as soon as the last one ends, and one within a second of a key's "
            "due time while no record comes in, since the joiner wakes quiet keys"
        ),
        detail=(
            f"Events are offered in pairs, a left and then a right event of one key with the "
            f"wall-clock time as their event time (mode inner), the keys taken in turn "
            f"({latency_keys(5_000):,} of them at 5,000 events/s, in proportion at other "
            f"rates, so that a key comes round every {LATENCY_REPEAT_S} s, after its window): each "
            "pair makes one output, timed from the CreateTime of the event whose "
            "arrival completed it (the one its `enrichd.source.*` headers name). A pipeline "
            "whose joiner wakes keys also runs a batch when a key is due and no event comes in "
            "(a clock in the source's offsets makes it: Spark fires timers only in batches), "
            "and none while no key is due; see `docs/operations.md`."
        ),
    )


def run(args: argparse.Namespace, broker: Any) -> Section:
    """Produce the workload, run every contender on it, and report."""
    from rich.console import Console

    console = Console()
    measured = commit.measured()
    machine_line = machine(measured=measured)
    conf = {"bootstrap.servers": broker.bootstrap_servers}
    suffix = uuid.uuid4().hex[:8]
    topics = {"left": f"left-events-{suffix}", "right": f"right-events-{suffix}"}
    outputs = {name: f"window-{name}-{suffix}" for name in ("raw1", "raw2", "quix")}
    total = 2 * args.per_side
    options = example_options()
    runs = twostream.run_contenders(
        console,
        JOIN,
        conf,
        topics,
        outputs,
        options,
        lambda: records(args, topics),
        total,
        args.quix_python,
        args.max_batch,
        args.runs,
    )
    quix, ends = runs.quix, runs.ends
    own: tuple[EnrichdResult, dict[str, Any]] | None = None
    if not args.no_spark_join:
        with console.status("Spark's own stream-stream join"):
            own = run_spark_join(
                broker.bootstrap_servers, topics, ends, options, total, args.max_batch
            )
        console.print(
            f"Spark's join: sustained {own[0].sustained_rate:,.0f} records/s", highlight=False
        )
    with console.status("checking outputs"):
        counted = {
            "raw 1 process": count_records(conf, outputs["raw1"]),
            "raw 2 processes": count_records(conf, outputs["raw2"]),
            **({"Quix Streams": count_records(conf, outputs["quix"])} if quix.ran else {}),
        }
        ran = run_checks(
            conf, runs.enrichd, counted["raw 1 process"], "pairs", total, dead_letters=runs.one.late
        )
    latency = latency_workload(broker.bootstrap_servers, args.max_batch)
    latencies = run_latencies(args, broker, latency, console, [])
    return _section(
        args, machine_line, measured, options, runs, own, counted, ran, latency, latencies
    )


def _section(
    args: argparse.Namespace,
    machine_line: str,
    measured: str,
    options: dict[str, Any],
    runs: twostream.Runs,
    own: tuple[EnrichdResult, dict[str, Any]] | None,
    counted: dict[str, int],
    ran: tuple[list[str], bool],
    latency: LatencyWorkload,
    latencies: list[LatencyResult],
) -> Section:
    one, two, quix, spark = runs.one, runs.two, runs.quix, runs.spark
    total = 2 * args.per_side
    pairs = counted["raw 1 process"]
    sustained = runs.enrichd.sustained
    contenders = twostream.contenders("window", runs, "")
    spark_lines: list[str] = []
    if own is not None:
        joined, extra = own
        contenders.append(
            Contender(
                "Spark stream-stream join, sustained",
                joined.sustained_rate,
                sum(b.rows for b in joined.steady()) / joined.sustained_rate,
                "same session, noop sink: no Avro encode, no produce",
            )
        )
        produced = extra["outputs"]
        spark_lines = [
            f"- *Spark's own join*: the same topics read through enrichd's source "
            f'(`format("enrichd-kafka")`, one source per topic, at most '
            f"{max(args.max_batch // 2, 1):,} records per topic per batch, as many per batch as "
            "enrichd reads), its packs of records unpacked and values decoded in one "
            "`mapInArrow` step (fastavro), `withWatermark` of the grace on both sides, "
            "joined on `k` with "
            "`rt BETWEEN lt - window AND lt + window`, written to the `noop` sink: it decodes "
            "and joins but neither encodes nor produces its "
            + (f"{produced:,} pairs" if produced is not None else "pairs")
            + ", and its state store counts rows (Spark's default; enrichd's pipelines do not)"
            + f". enrichd against it: {sustained / joined.sustained_rate:.2f}x. Its state at "
            f"the end: {extra['state_rows']:,} rows, {extra['state_memory'] / MIB:,.1f} MiB in "
            f"memory; {state_line(joined.state_bytes, args.keys)}; "
            f"{joined.peaks.describe()}; rows dropped by the watermark: {extra['dropped']:,}.",
        ]
    table = throughput_table(contenders, two.rate, quix.rate if quix.ran else None)
    checks = [f"{name} wrote {n:,} pairs (raw loop: {pairs:,})" for name, n in counted.items()]
    checks += ran[0]
    ok = all(n == pairs for n in counted.values()) and ran[1]
    if own is not None:
        produced = own[1]["outputs"]
        checks.append(f"Spark's join emitted {rate(produced)} pairs")
        ok = ok and (produced is None or produced == pairs)
    checks += latency_checks(latencies, latency)
    ok = ok and latencies_ok(latencies, latency)
    command = (
        f".venv/bin/python -m bench window --keys {args.keys} --per-side {args.per_side} "
        f"--step-ms {args.step_ms} --max-batch {args.max_batch} --runs {args.runs}"
        + (" --no-spark-join" if args.no_spark_join else "")
        + latency_command(args)
        + quix_option(args.quix_python)
    )
    date = run_date()
    lines = [
        *run_header(command, machine_line, date),
        f"Workload: {args.per_side:,} left and {args.per_side:,} right events over "
        f"{args.keys:,} keys ({total:,} input records, plain Avro), one every "
        f"{args.step_ms} ms of event time, in order, the event time also the Kafka timestamp; "
        f"{pairs:,} pairs within the window ({pairs / args.per_side:.2f} per left event). The "
        f"example's options with mode inner: window {options['window']:,} ms, grace "
        f"{options['grace']:,} ms, idle_timeout {options['idle_timeout']:,} ms. Both topics "
        "have 2 partitions keyed by `k` (murmur2); every contender reads them from offset 0.",
        "",
        *markdown_table(table, left=(0, 5)),
        "",
        *resources_lines(spark, args.keys),
        f"- The raw loop held {one.held:,} records at the end.",
        "- *raw ceiling*: confluent-kafka `assign()` + fastavro + the window rules in plain "
        "dicts, records merged across partitions by Kafka timestamp (enrichd's arrival order); "
        "two processes each read one partition of both topics (disjoint keys). Timed from "
        "the first record consumed to the last pair delivered.",
        '- *Quix Streams*: `join_interval(how="inner", backward_ms=window, forward_ms=window, '
        "grace_ms=window + grace)` on Kafka timestamps; it finds a pair when the later record "
        "arrives, looking back only, so it agrees with the others on in-order input like this.",
        *spark_lines,
        QUIX_SCALING,
        SERVICE_LINE,
        "- *enrichd sustained*: input records after the first micro-batch over the time after "
        "it (progress reports); *end to end* counts the first batch and query start-up too.",
        "",
        *twostream.closing_lines(
            "window",
            runs,
            args.max_batch,
            checks,
            latency_section(
                latencies, latency, args.max_batch, runs.enrichd.sustained, tuple(args.fit_records)
            ),
        ),
    ]
    return Section(
        name="window",
        title="## window: left + right events within 10 s -> joined pairs",
        lines=lines,
        table=table,
        plot=plot_of(contenders),
        ok=ok,
        headline=headline.measured(
            "window",
            runs.enrichd.sustained,
            two.rate,
            local_cores(spark_master(EXAMPLE)),
            quix,
            latencies,
            (),
            date,
            measured,
        ),
    )
