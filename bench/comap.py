"""``python -m bench comap``: enrichd's comap (users + tweets -> views) against the ceiling.

The workload is produced once and read by every contender: the raw loop in one process, the
raw loop in two processes, the peer (Quix Streams, in a child process), then the enrichd
pipeline (Spark starts last, so its JVM competes with nobody). Then, unless
``--no-latency``, enrichd's end-to-end latency at a fixed offered rate (see
:mod:`bench.latency`).

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
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console

from bench.ceiling import RawResult
from bench.enrichd import EnrichdResult, batch_table, configure, resources_lines, run_enrichd
from bench.latency import (
    LatencyWorkload,
    Offer,
    add_latency_arguments,
    latencies_ok,
    latency_checks,
    latency_command,
    latency_section,
    run_latencies,
)
from bench.quix import QuixResult, run_quix
from bench.raw import run_ceiling
from bench.report import (
    PEER_TARGET,
    SERVICE_LINE,
    TARGET_RATIO,
    Section,
    batches_lines,
    checks_line,
    count_checks,
    drift_line,
    enrichd_status,
    load_line,
    machine,
    markdown_table,
    needs,
    progress_check,
    quix_option,
    quix_status,
    run_header,
    scaling_caveat,
    short_of,
)
from bench.workloads import (
    Topics,
    Workload,
    codec,
    count_outputs,
    count_records,
    create_inputs,
    produce,
    tweet,
)
from daemon.pipeline.config import DEFAULT_MAX_RECORDS_PER_BATCH

if TYPE_CHECKING:
    from daemon.broker import EmbeddedBroker

TITLE = "## comap: users + tweets -> tweet views"

Row = tuple[str, float | None, float | None, float | None, str]
"""(name, records/s, seconds, ratio to the two-process ceiling, note); None: not measured."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The comap workload's sizes and options; the defaults are issue #9's sizes."""
    parser.add_argument("--users", type=int, default=10_000, help="users (the one side)")
    parser.add_argument("--tweets", type=int, default=1_000_000, help="tweets (the many side)")
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
        f".venv/bin/python -m bench comap --users {args.users} --tweets {args.tweets} "
        f"--max-batch {args.max_batch}"
    )
    return command + latency_command(args) + quix_option(args.quix_python)


def _rate(value: float) -> str:
    return f"{value:,.0f}"


def _quix_row(quix: QuixResult, two: RawResult) -> Row:
    name = "Quix Streams co-map"
    if not quix.ran:
        return (name, None, None, None, f"not run: {quix.reason}")
    return (
        name,
        quix.rate,
        quix.seconds,
        quix.rate / two.rate,
        f"{quix.version}, 1 process; start-up {quix.startup_s:.1f} s not counted",
    )


def _rows(
    one: RawResult, two: RawResult, quix: QuixResult, spark: EnrichdResult, again: RawResult
) -> list[Row]:
    """One :data:`Row` per table row."""
    sustained = spark.sustained_rate
    steady_rows = sum(b.rows for b in spark.steady())
    steady_s = steady_rows / sustained
    end_s = spark.batches[-1].ended - spark.query_started
    return [
        ("raw ceiling, 1 process", one.rate, one.seconds, one.rate / two.rate, "assign + dicts"),
        ("raw ceiling, 2 processes", two.rate, two.seconds, 1.0, "the issue's reference"),
        _quix_row(quix, two),
        (
            "enrichd comap, sustained",
            sustained,
            steady_s,
            sustained / two.rate,
            f"{len(spark.steady())} batch(es) after the first",
        ),
        (
            "enrichd comap, end to end",
            spark.end_to_end_rate,
            end_s,
            spark.end_to_end_rate / two.rate,
            "from the service's start, incl. first batch",
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


def _fit(points: list[tuple[int, int]]) -> tuple[float, float] | None:
    """Least-squares ``ms = fixed + per_row * rows``; None without two distinct sizes."""
    if len({rows for rows, _ in points}) < 2:
        return None
    n = len(points)
    mean_x = sum(x for x, _ in points) / n
    mean_y = sum(y for _, y in points) / n
    sxx = sum((x - mean_x) ** 2 for x, _ in points)
    slope = sum((x - mean_x) * (y - mean_y) for x, y in points) / sxx
    return mean_y - slope * mean_x, slope


def _split_line(spark: EnrichdResult, users: int) -> str:
    """Per-batch versus per-record cost of addBatch, fitted over the steady batches."""
    fit = _fit([(b.rows, b.durations_ms.get("addBatch", 0)) for b in spark.steady()])
    if fit is None:
        return (
            "- Per-batch versus per-record cost cannot be separated: every steady batch had "
            "the same size (use a record count that is not a multiple of --max-batch)."
        )
    fixed, per_row = fit
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


def _peer_line(quix: QuixResult, spark: EnrichdResult) -> str:
    """The issue's peer target, met or missed, or why it could not be judged."""
    if not quix.ran:
        return (
            f"- Target: enrichd sustained >= {PEER_TARGET:.0f}x Quix Streams. Not judged: the "
            f"peer did not run ({quix.reason})."
        )
    versus = spark.sustained_rate / quix.rate
    verdict = "meets" if versus >= PEER_TARGET else "misses"
    return (
        f"- Target: enrichd sustained >= {PEER_TARGET:.0f}x Quix Streams. This run {verdict} "
        f"it: enrichd sustained is {short_of(versus, PEER_TARGET)}x Quix "
        f"({_rate(spark.sustained_rate)} against {_rate(quix.rate)} records/s; "
        f"end to end {spark.end_to_end_rate / quix.rate:.2f}x)"
        + (
            f"; reaching it needs {needs(PEER_TARGET / versus)} the measured sustained rate."
            if versus < PEER_TARGET
            else "."
        )
    )


def _analysis(
    one: RawResult, two: RawResult, quix: QuixResult, spark: EnrichdResult, users: int
) -> list[str]:
    """Sentences on the gap and where enrichd's time goes, from the progress reports."""
    steady = spark.steady()
    ratio = spark.sustained_rate / two.rate
    verdict = "meets" if ratio >= TARGET_RATIO else "misses"
    needed = TARGET_RATIO * two.rate / spark.sustained_rate
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
        + scaling_caveat(spark.sustained_rate, one.rate, two.rate),
        f"- Steady batches (after the first; {len(steady)} of them, {rows:,.0f} records "
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
    lines.insert(1, _peer_line(quix, spark))
    lines.insert(3, _split_line(spark, users))
    return lines


def _quix_notes(quix: QuixResult) -> list[str]:
    """What the peer did, for the report's notes."""
    lines = [
        "- *Quix Streams*: one `Application` (one process, Quix's defaults: at-least-once, "
        "RocksDB state with changelog topics, 5 s commits) in a child process. Tweets are "
        "keyed by tweet id, so `group_by(author_id)` re-keys them through a `repartition__` "
        "topic Quix creates (JSON values); the users dataframe (already keyed by id) is "
        "`concat`-ed with it and one `apply(stateful=True, expand=True)` keeps the latest user "
        "and the tweets under each author in Quix's state, emitting views as enrichd's comap "
        "does; views go out through Quix's `AvroSerializer`. Quix's `State` reads and writes "
        "one value per name under the message key (no scans), so an author's tweets are one "
        "value, read and rewritten per tweet, as enrichd rewrites a key's state once per "
        "micro-batch. Timed from the first input record "
        "the application sees to its final checkpoint commit (which flushes its producer). "
        "Quix scales by running more instances in one consumer group; one instance uses one "
        "core, where enrichd and the 2-process ceiling use two.",
        "- Installing the peer: `.venv/bin/pip install -e '.[bench]'`. Quix Streams 3.x pins "
        "`confluent-kafka<2.13` and `pydantic<2.14`, so that may downgrade both in the "
        "project's environment; to avoid it, install `quixstreams[avro]` into a separate "
        "virtualenv and name its interpreter with `--quix-python` (as the command above may "
        "show). Without Quix the table's Quix row says why it was not run.",
    ]
    if quix.ran:
        lines.append(
            f"- Quix start-up, not counted above: {quix.startup_s:.1f} s from `Application.run()` "
            f"to the first record (joining the consumer group, which the embedded broker is slow "
            f"at, and creating its repartition and changelog topics); leaving the group after "
            f"the final commit took {quix.stop_s:.1f} s."
        )
    return lines


def _lines(
    args: argparse.Namespace,
    workload: Workload,
    table: list[tuple[str, ...]],
    quix: QuixResult,
    analysis: list[str],
    spark: EnrichdResult,
    latency_lines: list[str],
    checks: list[str],
    machine_line: str,
) -> list[str]:
    """The section's Markdown body."""
    return [
        *run_header(_command(args), machine_line),
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
        "- *enrichd sustained*: input records after the first micro-batch over the time "
        "from the end of the first batch to the end of the last (from the query's progress "
        "reports); *end to end* also counts the first batch and query start-up, but not "
        "the Spark session start-up.",
        *_quix_notes(quix),
        "- *vs Quix*: the row's records/s over Quix Streams' records/s.",
        *resources_lines(spark, workload.users),
        "",
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


def latency_workload(servers: str, users: int, max_records_per_batch: int) -> LatencyWorkload:
    """The comap latency runs: ``users`` users read first, then tweets offered."""
    encoder = codec("tweet")

    def prepare(checkpoint: Path, trigger_ms: int) -> Offer:
        conf = {"bootstrap.servers": servers}
        suffix = uuid.uuid4().hex[:8]
        topics = Topics(users=f"lat-users-{suffix}", tweets=f"lat-tweets-{suffix}")
        create_inputs(conf, topics)
        loaded = produce(conf, topics, Workload(users, 0))
        file, pipe = configure(servers, topics, checkpoint, max_records_per_batch, trigger_ms)

        def record(i: int, rng: random.Random) -> tuple[str, bytes, bytes]:
            value = encoder.encode(tweet(i, rng.randrange(users), rng))
            return topics.tweets, str(i).encode(), value

        return Offer(file, pipe, loaded, (topics.tweets,), record)

    return LatencyWorkload("comap", "tweets", "views", "every user already read", prepare)


def run(args: argparse.Namespace, broker: EmbeddedBroker) -> Section:
    """Run the comap benchmark on ``broker``."""
    console = Console()
    workload = Workload(args.users, args.tweets, args.seed)
    machine_line = machine()
    suffix = uuid.uuid4().hex[:8]
    topics = Topics(users=f"users-{suffix}", tweets=f"tweets-{suffix}")
    conf = {"bootstrap.servers": broker.bootstrap_servers}
    create_inputs(conf, topics)
    from daemon.kafka.admin import create_topics

    outputs = {
        "one": f"raw1-{suffix}",
        "two": f"raw2-{suffix}",
        "quix": f"quix-{suffix}",
        "again": f"raw2-again-{suffix}",
    }
    create_topics(conf, dict.fromkeys(outputs.values(), 2))
    began = time.monotonic()
    with console.status(f"producing {workload.records:,} records"):
        ends = produce(conf, topics, workload)
    console.print(f"produced {workload.records:,} records in {time.monotonic() - began:.1f} s")
    with console.status("raw ceiling, 1 process"):
        one = run_ceiling(conf, topics, ends, outputs["one"], 1, workload.records)
    console.print(f"raw ceiling, 1 process: {_rate(one.rate)} records/s")
    loads = [("raw 1 process", os.getloadavg()[0])]
    with console.status("raw ceiling, 2 processes"):
        two = run_ceiling(conf, topics, ends, outputs["two"], 2, workload.records)
    console.print(f"raw ceiling, 2 processes: {_rate(two.rate)} records/s")
    loads.append(("raw 2 processes", os.getloadavg()[0]))
    with console.status("Quix Streams co-map (child process)"):
        quix = run_quix(
            args.quix_python,
            broker.bootstrap_servers,
            topics.users,
            topics.tweets,
            outputs["quix"],
            workload.tweets,
            workload.records,
        )
    console.print(quix_status(quix), highlight=False)
    loads.append(("Quix Streams", os.getloadavg()[0]))
    with console.status("enrichd comap (Spark)"):
        spark = run_enrichd(
            broker.bootstrap_servers, topics, ends, workload.records, args.max_batch, 3600.0
        )
    console.print(enrichd_status(spark))
    loads.append(("enrichd", os.getloadavg()[0]))
    with console.status("raw ceiling, 2 processes, again"):
        again = run_ceiling(conf, topics, ends, outputs["again"], 2, workload.records)
    console.print(f"raw ceiling, 2 processes, again: {_rate(again.rate)} records/s")
    latency = latency_workload(broker.bootstrap_servers, workload.users, args.max_batch)
    latencies = run_latencies(args, broker.bootstrap_servers, latency, console, loads)
    with console.status("checking outputs"):
        counted = count_outputs(conf, outputs, spark.output_topic, quix.ran)
        dead = count_records(conf, spark.dead_letter_topic)
    # Other work on the machine slows whichever run it overlaps: say how busy it was.
    busy = load_line(loads)
    checks = count_checks(counted, "views", workload.tweets)
    checks.append(f"enrichd dead letters: {dead:,}")
    checks += latency_checks(latencies, latency)
    checks += progress_check(spark.batches, workload.records)
    rows = _rows(one, two, quix, spark, again)
    analysis = _analysis(one, two, quix, spark, workload.users)
    analysis.insert(1, drift_line(spark.sustained_rate, two.rate, again.rate))
    table: list[tuple[str, ...]] = [_COLUMNS, *(_cells(row, quix) for row in rows)]
    ok = all(count == workload.tweets for count in counted.values()) and dead == 0
    ok = ok and latencies_ok(latencies, latency)
    console.print(busy, highlight=False)
    for line in analysis:
        if not line.startswith("- Target"):  # print_section shows the verdicts
            console.print(line, highlight=False)
    console.print("Checks: " + "; ".join(checks), highlight=False)
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
            latency_section(latencies, latency, spark.max_records_per_batch, spark.sustained_rate),
            checks,
            f"{machine_line}. {busy}",
        ),
        table=table,
        plot={name: value for name, value, *_ in rows if value is not None},
        ok=ok,
    )
