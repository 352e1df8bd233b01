"""``python -m bench comap``: enrichd's comap (users + tweets -> views) against the ceiling.

The workload is produced once and read by every contender: the raw loop in one process, the
raw loop in two processes, the peer (Quix Streams, in as many child processes as the
pipeline's Spark master has cores), then the enrichd pipeline ``--runs`` times (Spark starts
last, so its JVM competes with nobody), then the two-process raw loop again. Then, unless
``--no-latency``, enrichd's end-to-end latency at a fixed offered rate against the yardstick's
(see :mod:`bench.latencies`). Each further ``--users`` value is a point of the key-count sweep on
fresh topics (:mod:`bench.runs`).

The peer needs Quix Streams: ``.venv/bin/pip install -e '.[bench]'`` (or a separate
virtualenv with ``quixstreams[avro]``, named by ``--quix-python``; see :mod:`bench.quix`).
Without it the report says the peer was not run, and why.
"""

from __future__ import annotations

import argparse
import os
import random
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console

from bench import batch_cost, commit, headline
from bench.ceiling import RawResult
from bench.enrichd import (
    EXAMPLE,
    EnrichdResult,
    batch_table,
    configure,
    resources_lines,
    run_enrichd,
)
from bench.latencies import (
    add_latency_arguments,
    latencies_ok,
    latency_checks,
    latency_command,
    latency_section,
    run_latencies,
)
from bench.latency import LatencyWorkload, Offer
from bench.quix import QuixResult, run_quix
from bench.raw import RawCoMap, run_ceiling
from bench.rawjoin import RawSpec
from bench.report import Section
from bench.runs import (
    Repeated,
    SweepPoint,
    add_run_arguments,
    local_cores,
    point_checks,
    repeat,
    run_checks,
    spark_master,
    sustained_line,
    sweep_lines,
)
from bench.wording import (
    PEER_TARGET,
    QUIX_SCALING,
    SERVICE_LINE,
    TARGET_RATIO,
    batches_lines,
    checks_line,
    count_checks,
    drift_line,
    load_line,
    machine,
    markdown_table,
    needs,
    quix_note,
    quix_option,
    quix_status,
    run_date,
    run_header,
    scaling_caveat,
    short_of,
)
from bench.workloads import (
    Topics,
    Workload,
    codec,
    contender_outputs,
    count_outputs,
    create_inputs,
    produce,
    tweet,
)
from daemon.model.config import DEFAULT_MAX_RECORDS_PER_BATCH

if TYPE_CHECKING:
    from daemon.broker import EmbeddedBroker

TITLE = "## comap: users + tweets -> tweet views"

Row = tuple[str, float | None, float | None, float | None, str]
"""(name, records/s, seconds, ratio to the two-process ceiling, note); None: not measured."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The comap workload's sizes and options.

    The defaults are issue 39's: 20,000 users then 3,000,000 tweets make seven micro-batches
    at the default cap of 500,000 records (a batch admits the earliest records of both
    topics together: six full ones, then the last 20,000), so the sustained rate is over six.
    """
    add_run_arguments(parser, "users (the one side)", 20_000)
    parser.add_argument("--tweets", type=int, default=3_000_000, help="tweets (the many side)")
    parser.add_argument(
        "--max-batch",
        type=int,
        default=DEFAULT_MAX_RECORDS_PER_BATCH,
        help="enrichd max_records_per_batch (the pipeline default)",
    )
    parser.add_argument("--seed", type=int, default=7, help="seed for authors and words")
    add_latency_arguments(parser, "tweets")


def _command(args: argparse.Namespace) -> str:
    command = (
        f".venv/bin/python -m bench comap --users {' '.join(map(str, args.users))} "
        f"--tweets {args.tweets} --max-batch {args.max_batch} --runs {args.runs}"
    )
    return command + latency_command(args) + quix_option(args.quix_python)


def _rate(value: float) -> str:
    return f"{value:,.0f}"


def _quix_row(quix: QuixResult, two: RawResult) -> Row:
    name = "Quix Streams co-map"
    if not quix.ran:
        return (name, None, None, None, f"not run: {quix.reason}")
    return (name, quix.rate, quix.seconds, quix.rate / two.rate, quix_note(quix))


def _rows(
    one: RawResult, two: RawResult, quix: QuixResult, runs: Repeated, again: RawResult
) -> list[Row]:
    """One :data:`Row` per table row; enrichd's are medians over its runs."""
    sustained = runs.sustained
    spark = runs.typical
    steady_s = sum(b.rows for b in spark.steady()) / spark.sustained_rate
    end_s = spark.batches[-1].ended - spark.query_started
    return [
        ("raw ceiling, 1 process", one.rate, one.seconds, one.rate / two.rate, "assign + dicts"),
        ("raw ceiling, 2 processes", two.rate, two.seconds, 1.0, "the issue's reference"),
        _quix_row(quix, two),
        ("enrichd comap, sustained", sustained, steady_s, sustained / two.rate, runs.note()),
        (
            "enrichd comap, end to end",
            runs.end_to_end,
            end_s,
            runs.end_to_end / two.rate,
            "from the service's start, incl. first batch"
            + (f"; median of {len(runs.runs)} runs" if len(runs.runs) > 1 else ""),
        ),
        (
            "raw ceiling, 2 processes, again",
            again.rate,
            again.seconds,
            again.rate / two.rate,
            "right after enrichd: the machine's drift",
        ),
    ]


_COLUMNS = ("run", "records/s", "seconds", "vs 2-process ceiling", "vs Quix", "note")


def _cells(row: Row, quix: QuixResult) -> tuple[str, ...]:
    """A row's table cells; "-" where nothing was measured."""
    name, rate, seconds, ratio, note = row
    versus = "-" if rate is None or not quix.ran else f"{rate / quix.rate:.2f}"
    return (
        name,
        "-" if rate is None else _rate(rate),
        "-" if seconds is None else f"{seconds:.2f}",
        "-" if ratio is None else f"{ratio:.2f}",
        versus,
        note,
    )


def _split_line(spark: EnrichdResult, users: int) -> str:
    """Per-batch versus per-record cost of addBatch, fitted over the steady batches."""
    cost = batch_cost.fit([(b.rows, b.durations_ms.get("addBatch", 0)) for b in spark.steady()])
    if cost is None:
        return (
            "- Per-batch versus per-record cost cannot be separated: every steady batch had "
            "the same size (use a record count that is not a multiple of --max-batch)."
        )
    fixed, per_row = cost.fixed_ms, cost.per_record_ms
    rows = spark.max_records_per_batch
    keys = users * (1 - (1 - 1 / users) ** rows)
    dominant = (
        "the fixed part (per batch and per key) is most of a full batch"
        if fixed > per_row * rows
        else "the per-record part is most of a full batch"
    )
    return (
        f"- Fitting addBatch over the steady batches by size: about {fixed:,.0f} ms per batch "
        f"plus {per_row * 1000:.1f} us per record. A full batch of {rows:,} uniform tweets "
        f"touches about {keys:,.0f} of the {users:,} authors' keys, and the joiner's "
        f"operator reads, unpickles, repickles and writes each touched key's state (the "
        f"author and the ids of its tweets; the tweets themselves are appended once to "
        f"their bucket's stash log and not read again without a fan-out); {dominant}."
    )


def _peer_line(quix: QuixResult, runs: Repeated) -> str:
    """The issue's peer target, met or missed, or why it could not be judged."""
    if not quix.ran:
        return (
            f"- Target: enrichd sustained >= {PEER_TARGET:.0f}x Quix Streams. Not judged: the "
            f"peer did not run ({quix.reason})."
        )
    versus = runs.sustained / quix.rate
    verdict = "meets" if versus >= PEER_TARGET else "misses"
    return (
        f"- Target: enrichd sustained >= {PEER_TARGET:.0f}x Quix Streams with as many "
        f"cores ({quix.processes}). This run {verdict} it: enrichd sustained is "
        f"{short_of(versus, PEER_TARGET)}x Quix ({_rate(runs.sustained)} against "
        f"{_rate(quix.rate)} records/s; end to end {runs.end_to_end / quix.rate:.2f}x)"
        + (
            f"; reaching it needs {needs(PEER_TARGET / versus)} the measured sustained rate."
            if versus < PEER_TARGET
            else "."
        )
    )


def _analysis(
    one: RawResult, two: RawResult, quix: QuixResult, runs: Repeated, users: int
) -> list[str]:
    """Sentences on the gap (the median run's rate) and where enrichd's time goes, from the
    progress reports of the median run."""
    spark = runs.typical
    steady = spark.steady()
    ratio = runs.sustained / two.rate
    verdict = "meets" if ratio >= TARGET_RATIO else "misses"
    needed = TARGET_RATIO * two.rate / runs.sustained
    rows = sum(b.rows for b in steady) / len(steady)
    trigger = spark.mean_ms("triggerExecution")
    add = spark.mean_ms("addBatch")
    latest = spark.mean_ms("latestOffset")
    commits = spark.mean_ms("walCommit") + spark.mean_ms("commitOffsets")
    planning = spark.mean_ms("queryPlanning") + spark.mean_ms("getBatch")
    other = trigger - add - latest - commits - planning
    per_record_us = add * 1000 / rows if rows else 0.0
    ceiling_us = 1e6 / one.rate
    first = spark.batches[0]
    lines = [
        f"- Target: enrichd sustained >= {TARGET_RATIO:.0%} of the two-process raw ceiling. "
        f"This run {verdict} it: {short_of(ratio, TARGET_RATIO)} of the ceiling"
        + (
            f"; reaching the target needs {needs(needed)} the measured sustained rate."
            if ratio < TARGET_RATIO
            else "."
        )
        + scaling_caveat(runs.sustained, one.rate, two.rate),
        f"- Steady batches of the median run (after the first; {len(steady)} of them, "
        f"{rows:,.0f} records "
        f"each on average): {trigger:,.0f} ms per batch, of which addBatch (read, decode, "
        f"joiner with RocksDB state, encode, transactional produce) {add:,.0f} ms = "
        f"{per_record_us:.1f} us per record, against {ceiling_us:.1f} us per record for the "
        f"whole one-process raw loop ({per_record_us / ceiling_us:.1f}x).",
        f"- Per-batch work outside addBatch: latestOffset {latest:,.0f} ms (planning the "
        f"offset range; with more records waiting than max_records_per_batch it reads the "
        f"candidate records' timestamps to admit the earliest first), walCommit + "
        f"commitOffsets {commits:,.0f} ms, queryPlanning + getBatch {planning:,.0f} ms, "
        f"other {other:,.0f} ms: {trigger - add:,.0f} ms in all, "
        f"{(trigger - add) / trigger:.0%} of the batch.",
        f"- First batch: {first.rows:,} records, ended {spark.first_batch_s:.1f} s after the "
        f"service started (its triggerExecution {first.durations_ms.get('triggerExecution', 0):,} "
        f"ms; addBatch {first.durations_ms.get('addBatch', 0):,} ms); the Spark session took "
        f"{spark.session_start_s:.1f} s to start before that (not counted anywhere above).",
    ]
    lines.insert(1, _peer_line(quix, runs))
    lines.insert(3, _split_line(spark, users))
    return lines


def _quix_notes(quix: QuixResult) -> list[str]:
    """What the peer did, for the report's notes."""
    lines = [
        "- *Quix Streams*: an `Application` with Quix's defaults (at-least-once, RocksDB "
        "state, 5 s commits) but no changelog topic for its state, in child processes (the "
        "changelog would get an author's every tweet at each tweet: at these sizes about 18 "
        "GB, more than the test broker's machine holds in memory; without it the peer does "
        "less work than by default). Tweets are "
        "keyed by tweet id, so `group_by(author_id)` re-keys them through a `repartition__` "
        "topic Quix creates (JSON values); the users dataframe (already keyed by id) is "
        "`concat`-ed with it and one `apply(stateful=True, expand=True)` keeps the latest user "
        "and the tweets under each author in Quix's state, emitting views as enrichd's comap "
        "does; views go out through Quix's `AvroSerializer`. Quix's `State` reads and writes "
        "one value per name under the message key (no scans), so an author's tweets are one "
        "value, read and rewritten per tweet, as enrichd rewrites a key's state once per "
        "micro-batch.",
        QUIX_SCALING,
        "- Installing the peer: `.venv/bin/pip install -e '.[bench]'`. Quix Streams 3.x pins "
        "`confluent-kafka<2.13` and `pydantic<2.14`, so that may downgrade both in the "
        "project's environment; to avoid it, install `quixstreams[avro]` into a separate "
        "virtualenv and name its interpreter with `--quix-python` (as the command above may "
        "show). Without Quix the table's Quix row says why it was not run.",
    ]
    if quix.ran:
        lines.append(
            f"- Quix start-up, not counted above: {quix.startup_s:.1f} s from the first "
            f"`Application.run()` to the first record (joining the consumer group, which the "
            f"embedded broker is slow at, and creating its repartition topic); "
            f"leaving the group after the last final commit took {quix.stop_s:.1f} s."
        )
    return lines


def _lines(
    args: argparse.Namespace,
    workload: Workload,
    table: list[tuple[str, ...]],
    quix: QuixResult,
    analysis: list[str],
    spark: EnrichdResult,
    sweep: list[str],
    latency_lines: list[str],
    checks: list[str],
    machine_line: str,
    date: str,
) -> list[str]:
    """The section's Markdown body; ``spark`` is the median run."""
    return [
        *run_header(_command(args), machine_line, date),
        f"Workload: {workload.users:,} users then {workload.tweets:,} tweets "
        f"({workload.records:,} input records, plain Avro, about 100 B each) on an embedded "
        "Tansu broker, 2 partitions per input topic (keys partitioned with murmur2, as "
        "Kafka's Java clients do), tweet authors uniform over the users; every contender "
        "reads the same topics from offset 0 and emits one view per tweet.",
        "",
        *markdown_table(table, left=(0, 5)),
        "",
        "- *raw ceiling*: confluent-kafka `assign()` + fastavro + dicts + batching producer, "
        "timed from the first record consumed to the last output delivered; two processes "
        "each read every user and one tweet partition.",
        SERVICE_LINE,
        sustained_line(args.runs),
        *_quix_notes(quix),
        "- *vs Quix*: the row's records/s over Quix Streams' records/s.",
        *resources_lines(spark, workload.users),
        "",
        *sweep,
        "### Where the time goes",
        "",
        *analysis,
        "",
        *batches_lines(
            "Micro-batches that read records",
            spark.max_records_per_batch,
            batch_table(spark.batches),
        ),
        *latency_lines,
        checks_line(checks),
        "",
    ]


@dataclass(frozen=True)
class OfferedTweets:
    """Offered tweet ``i`` to ``topic``, by one of ``users`` authors drawn at random (picklable,
    for the load generator's process)."""

    topic: str
    users: int

    def __call__(self, i: int, rng: random.Random) -> tuple[str, bytes, bytes]:
        value = codec("tweet").encode(tweet(i, rng.randrange(self.users), rng))
        return self.topic, str(i).encode(), value


def latency_workload(servers: str, users: int, max_records_per_batch: int) -> LatencyWorkload:
    """The comap latency runs: ``users`` users read first, then tweets offered."""

    def prepare(checkpoint: Path, trigger_ms: int, rate: int) -> Offer:
        conf = {"bootstrap.servers": servers}
        suffix = uuid.uuid4().hex[:8]
        topics = Topics(users=f"lat-users-{suffix}", tweets=f"lat-tweets-{suffix}")
        create_inputs(conf, topics)
        loaded = produce(conf, topics, Workload(users, 0))
        file, pipe = configure(servers, topics, checkpoint, max_records_per_batch, trigger_ms)
        raw = RawSpec(
            conf,
            {topics.users: "one", topics.tweets: "many"},
            {topics.users: "user", topics.tweets: "tweet"},
            "tweet_view",
            "",
            RawCoMap,
            {},
        )
        return Offer(file, pipe, loaded, (topics.tweets,), OfferedTweets(topics.tweets, users), raw)

    return LatencyWorkload("comap", "tweets", "views", "every user already read", prepare)


def _produced(
    conf: dict[str, str], users: int, args: argparse.Namespace, console: Console
) -> tuple[Workload, Topics, dict[str, int]]:
    """``users`` users then ``args.tweets`` tweets on fresh topics; (workload, topics, ends)."""
    workload = Workload(users, args.tweets, args.seed)
    suffix = uuid.uuid4().hex[:8]
    topics = Topics(users=f"users-{suffix}", tweets=f"tweets-{suffix}")
    create_inputs(conf, topics)
    began = time.monotonic()
    with console.status(f"producing {workload.records:,} records"):
        ends = produce(conf, topics, workload)
    console.print(f"produced {workload.records:,} records in {time.monotonic() - began:.1f} s")
    return workload, topics, ends


def _enrichd(
    args: argparse.Namespace,
    servers: str,
    workload: Workload,
    topics: Topics,
    ends: dict[str, int],
    console: Console,
) -> Repeated:
    """enrichd's comap over the produced topics, ``args.runs`` times."""

    def once() -> EnrichdResult:
        return run_enrichd(servers, topics, ends, workload.records, args.max_batch, 3600.0)

    return repeat(once, args.runs, console, f"enrichd comap, {workload.users:,} users")


def _sweep_point(
    args: argparse.Namespace, broker: EmbeddedBroker, users: int, console: Console
) -> tuple[SweepPoint, list[str], bool]:
    """One more key count on fresh topics: the 2-process ceiling once, enrichd
    ``args.runs`` times; (the point, its checks, whether they passed)."""
    from daemon.kafka.admin import create_topics

    conf = {"bootstrap.servers": broker.bootstrap_servers}
    console.rule(f"comap at {users:,} users")
    workload, topics, ends = _produced(conf, users, args, console)
    output = f"raw2-{uuid.uuid4().hex[:8]}"
    create_topics(conf, {output: 2})
    with console.status("raw ceiling, 2 processes"):
        two = run_ceiling(conf, topics, ends, output, 2, workload.records)
    console.print(f"raw ceiling, 2 processes: {_rate(two.rate)} records/s")
    runs = _enrichd(args, broker.bootstrap_servers, workload, topics, ends, console)
    checks, ok = point_checks(conf, users, output, runs, workload.tweets, "views", workload.records)
    return SweepPoint(users, two.rate, runs), checks, ok


def run(args: argparse.Namespace, broker: EmbeddedBroker) -> Section:
    """Run the comap benchmark on ``broker``: the first ``--users`` in full, the others as
    points of the key-count sweep."""
    console = Console()
    master = spark_master(EXAMPLE)
    measured = commit.measured()
    machine_line = machine(master, measured)
    conf = {"bootstrap.servers": broker.bootstrap_servers}
    workload, topics, ends = _produced(conf, args.users[0], args, console)
    outputs = contender_outputs(conf)
    with console.status("raw ceiling, 1 process"):
        one = run_ceiling(conf, topics, ends, outputs["one"], 1, workload.records)
    console.print(f"raw ceiling, 1 process: {_rate(one.rate)} records/s")
    loads = [("raw 1 process", os.getloadavg()[0])]
    with console.status("raw ceiling, 2 processes"):
        two = run_ceiling(conf, topics, ends, outputs["two"], 2, workload.records)
    console.print(f"raw ceiling, 2 processes: {_rate(two.rate)} records/s")
    loads.append(("raw 2 processes", os.getloadavg()[0]))
    cores = local_cores(master)
    with console.status(f"Quix Streams co-map ({cores} child processes)"):
        quix = run_quix(
            args.quix_python,
            broker.bootstrap_servers,
            topics.users,
            topics.tweets,
            outputs["quix"],
            workload.tweets,
            workload.records,
            processes=cores,
        )
    console.print(quix_status(quix), highlight=False)
    loads.append(("Quix Streams", os.getloadavg()[0]))
    runs = _enrichd(args, broker.bootstrap_servers, workload, topics, ends, console)
    spark = runs.typical
    loads.append(("enrichd", os.getloadavg()[0]))
    with console.status("raw ceiling, 2 processes, again"):
        again = run_ceiling(conf, topics, ends, outputs["again"], 2, workload.records)
    console.print(f"raw ceiling, 2 processes, again: {_rate(again.rate)} records/s")
    latency = latency_workload(broker.bootstrap_servers, workload.users, args.max_batch)
    latencies = run_latencies(args, broker, latency, console, loads)
    with console.status("checking outputs"):
        counted = count_outputs(conf, outputs, None, quix.ran)
        ran, runs_ok = run_checks(conf, runs, workload.tweets, "views", workload.records)
    # Other work on the machine slows whichever run it overlaps: say how busy it was.
    busy = load_line(loads)
    checks = [*count_checks(counted, "views", workload.tweets), *ran]
    checks += latency_checks(latencies, latency)
    points = [SweepPoint(workload.users, two.rate, runs)]
    ok = all(count == workload.tweets for count in counted.values()) and runs_ok
    ok = ok and latencies_ok(latencies, latency)
    for users in args.users[1:]:
        point, point_checks, point_ok = _sweep_point(args, broker, users, console)
        points.append(point)
        checks += point_checks
        ok = ok and point_ok
    rows = _rows(one, two, quix, runs, again)
    analysis = _analysis(one, two, quix, runs, workload.users)
    analysis.insert(1, drift_line(runs.sustained, two.rate, again.rate))
    table: list[tuple[str, ...]] = [_COLUMNS, *(_cells(row, quix) for row in rows)]
    sweep = sweep_lines(points)
    console.print(busy, highlight=False)
    for line in sweep:
        console.print(line, highlight=False)
    for line in analysis:
        if not line.startswith("- Target"):  # print_section shows the verdicts
            console.print(line, highlight=False)
    console.print("Checks: " + "; ".join(checks), highlight=False)
    date = run_date()
    return Section(
        name="comap",
        title=TITLE,
        lines=_lines(
            args,
            workload,
            table,
            quix,
            analysis,
            spark,
            sweep,
            latency_section(
                latencies,
                latency,
                spark.max_records_per_batch,
                runs.sustained,
                tuple(args.fit_records),
            ),
            checks,
            f"{machine_line}. {busy}",
            date,
        ),
        table=table,
        plot={name: value for name, value, *_ in rows if value is not None},
        ok=ok,
        headline=headline.measured(
            "comap", runs.sustained, two.rate, cores, quix, latencies, points, date, measured
        ),
    )
