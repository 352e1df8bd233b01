"""``python -m bench lookup``: clicks + user regions -> enriched clicks (the ``lookup`` joiner).

Issue #6's benchmark: a table of user regions (a changelog keyed by user, one record per
user) and a stream of clicks keyed by click id that name their user in a field (the
foreign-key case of ``examples/clicks-per-region.toml``). Every region is produced before
every click (Kafka timestamps 1, 2, ...), so each click is joined with its user's region;
clicks of users the table does not know (about 1 in 21: users are drawn from 5% more ids than
the table holds) get the example's ``default`` region "UNKNOWN" (left mode).

Contenders, on the same topics:

- the raw ceiling (confluent-kafka + fastavro + a dict): a process reads the whole table
  first (as a GlobalKTable is bootstrapped), then its share of the click partitions, and
  produces one ``EnrichedClick`` per click; in one process and in two (each reads the whole
  table and one click partition);
- the peer, Quix Streams (:mod:`bench.quix_lookup`: it has no table join over a Kafka topic,
  so a stateful ``apply`` over the concatenated table and re-keyed clicks), in as many
  processes as enrichd has Spark cores, one consumer group;
- enrichd: the example pipeline as users wrote it, pointed at the benchmark's topics, with
  its running-totals stage left out (the issue measures the lookup join; the totals are a
  second query over the enriched topic). ``--totals`` keeps it: the second query then runs
  beside the first, as ``daemon run`` runs both, and its rate is reported on its own row.
- enrichd again with ``versioned = true, revisions = true`` (issue #33), on the same topics
  and with an output schema that has ``revision``, unless ``--no-versioned``: the table
  history, arrival order and every click kept for revision within the default one-hour
  retention (the workload's timestamps, a millisecond apart, span about 52 minutes at the
  default sizes, so every click stays kept).

enrichd's lookup runs ``--runs`` times (the versioned one once). Unless ``--no-latency``,
enrichd's end-to-end latency at a fixed rate of clicks offered to the loaded table follows
(see :mod:`bench.latencies`). Each further ``--users`` value is a point of the key-count sweep
on fresh topics (:mod:`bench.runs`).
"""

from __future__ import annotations

import argparse
import io
import os
import random
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import fastavro
from rich.console import Console

from bench import ceiling, commit, headline
from bench.ceiling import LoopResult, RawResult
from bench.enrichd import Batch, EnrichdResult, batch_table, resources_lines, run_pipeline
from bench.latencies import (
    add_latency_arguments,
    latencies_ok,
    latency_checks,
    latency_command,
    latency_section,
    run_latencies,
)
from bench.latency import LatencyWorkload, Offer
from bench.quix import QuixResult
from bench.quix_lookup import run_quix_lookup
from bench.rawjoin import Emit, RawJoin, RawSpec
from bench.report import Section
from bench.runs import (
    Repeated,
    SweepPoint,
    add_run_arguments,
    local_cores,
    point_checks,
    repeat,
    repeated_contenders,
    run_checks,
    spark_master,
    sustained_line,
    sweep_lines,
)
from bench.wording import (
    QUIX_SCALING,
    SERVICE_LINE,
    Contender,
    batches_lines,
    ceiling_verdict,
    checks_line,
    count_checks,
    drift_line,
    enrichd_contenders,
    enrichd_status,
    load_line,
    machine,
    markdown_table,
    peer_verdict,
    plot_of,
    progress_check,
    quix_note,
    quix_option,
    quix_status,
    rate,
    run_date,
    run_header,
    throughput_table,
)
from bench.workloads import (
    INPUT_PARTITIONS,
    REPO,
    SCHEMAS,
    codec,
    contender_outputs,
    count_outputs,
    count_records,
    create_input_topics,
    input_producer,
    read_committed,
)
from daemon.kafka import clients
from daemon.model.config import DEFAULT_MAX_RECORDS_PER_BATCH

if TYPE_CHECKING:
    from daemon.broker import EmbeddedBroker

TITLE = "## lookup: clicks + user regions -> enriched clicks"
EXAMPLE = REPO / "examples" / "clicks-per-region.toml"
REGIONS = tuple(f"region-{i:02d}" for i in range(50))
DEFAULT = {"user": "", "region": "UNKNOWN"}
"""The example's ``default``: the table side of a click whose user has no region."""
UNKNOWN_SHARE = 0.05
"""Clicks' users are drawn from this many more ids than the table has."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The lookup workload's sizes and options.

    The defaults are issue 39's: 100,000 user regions then 3,000,000 clicks make seven
    micro-batches at the default cap of 500,000 records (a batch admits the earliest records
    of both topics together: six full ones, then the last 100,000), so the sustained rate is
    over six.
    """
    add_run_arguments(parser, "table keys (user regions)", 100_000)
    parser.add_argument("--clicks", type=int, default=3_000_000, help="stream records (clicks)")
    parser.add_argument(
        "--max-batch",
        type=int,
        default=DEFAULT_MAX_RECORDS_PER_BATCH,
        help="enrichd max_records_per_batch (the pipeline default)",
    )
    parser.add_argument("--seed", type=int, default=7, help="seed for click users and regions")
    parser.add_argument(
        "--totals",
        action="store_true",
        help="also run the example's running totals per region (its second query) and time it",
    )
    parser.add_argument(
        "--no-versioned",
        dest="versioned",
        action="store_false",
        help="leave out the run with versioned = true, revisions = true",
    )
    add_latency_arguments(parser, "clicks")


def _command(args: argparse.Namespace) -> str:
    command = (
        f".venv/bin/python -m bench lookup --users {' '.join(map(str, args.users))} "
        f"--clicks {args.clicks} --max-batch {args.max_batch} --runs {args.runs}"
    )
    if args.totals:
        command += " --totals"
    if not args.versioned:
        command += " --no-versioned"
    return command + latency_command(args) + quix_option(args.quix_python)


def user_id(i: int) -> str:
    """User ``i``'s id, the table key and the clicks' ``user`` field."""
    return f"user-{i:07d}"


# -- the workload ----------------------------------------------------------------------------


def produce(conf: dict[str, str], table: str, clicks: str, args: argparse.Namespace) -> Any:
    """Produce the regions, then the clicks; (partition ends, clicks by unknown users).

    Topics are created with unlimited retention (see ``workloads.create_inputs``) and
    ``murmur2`` partitioning, so the peer's re-keyed clicks meet their user's region.

    Raises:
        RuntimeError: a record could not be delivered.
    """
    create_input_topics(conf, (table, clicks))
    producer = input_producer(conf)
    deliveries = clients.Deliveries()
    regions, click = codec("user_region"), codec("click")
    rng = random.Random(args.seed)
    timestamp = 1
    for i in range(args.users):
        user = user_id(i)
        value = regions.encode({"user": user, "region": rng.choice(REGIONS)})
        clients.produce(
            producer,
            table,
            value=value,
            key=user.encode(),
            timestamp=timestamp,
            on_delivery=deliveries,
        )
        timestamp += 1
        if i % 10_000 == 0:
            producer.poll(0)
    population = int(args.users * (1 + UNKNOWN_SHARE))
    unknown = 0
    for i in range(args.clicks):
        who = rng.randrange(population)
        unknown += who >= args.users
        value = click.encode({"id": f"click-{i}", "user": user_id(who), "clicks": 1 + i % 5})
        clients.produce(
            producer,
            clicks,
            value=value,
            key=f"click-{i}".encode(),
            timestamp=timestamp,
            on_delivery=deliveries,
        )
        timestamp += 1
        if i % 10_000 == 0:
            producer.poll(0)
    if producer.flush(60) != 0 or deliveries.failures:
        raise RuntimeError(f"could not produce: {deliveries.failures[:1] or 'flush timed out'}")
    return deliveries.ends, unknown


VERSIONED = {"versioned": True, "revisions": True}
"""The options of the versioned run, added to the example's."""
REVISED_SCHEMA = SCHEMAS / "revised_enriched_click.avsc"
"""The versioned run's output schema: an enriched click with its ``revision``."""


def count_defaulted(conf: dict[str, str], topic: str, schema_path: Path | None = None) -> int:
    """Enriched clicks in ``topic`` whose region is the default (committed records only)."""
    schema = fastavro.schema.load_schema(str(schema_path or SCHEMAS / "enriched_click.avsc"))
    reader: Any = fastavro.schemaless_reader
    found = 0
    for _, records in read_committed(conf, topic, "enrichd-bench-count"):
        for record in records:
            value = reader(io.BytesIO(record.value()), schema, None)
            found += value["region"] == DEFAULT
    return found


# -- the ceiling -----------------------------------------------------------------------------


class RawLookup(RawJoin):
    """The ``lookup`` rules in plain dicts, as the yardstick applies them (roles ``table``,
    ``stream``): the latest region of each user, and each click enriched with its user's, or
    with :data:`DEFAULT` (left mode). The latency workload writes no tombstones."""

    def __init__(self, options: dict[str, Any], emit: Emit) -> None:
        super().__init__(options, emit)
        self.table: dict[str, dict[str, Any]] = {}

    def apply(self, role: str, value: dict[str, Any]) -> None:
        """Keep a region (``table``) or enrich a click (``stream``), keyed by its id."""
        if role == "table":
            self.table[value["user"]] = value
            return
        self.emit(value["id"], {"click": value, "region": self.table.get(value["user"], DEFAULT)})

    def state_entries(self) -> int:
        """Regions held."""
        return len(self.table)


def lookup_loop(
    conf: dict[str, str],
    table_parts: list[tuple[str, int]],
    click_parts: list[tuple[str, int]],
    ends: dict[str, int],
    output: str,
    go: Any = None,
) -> LoopResult:
    """Read the table to its end into a dict, then enrich every click of ``click_parts``."""
    region_schema, click_schema, enriched_schema = (
        fastavro.schema.load_schema(str(SCHEMAS / f"{name}.avsc"))
        for name in ("user_region", "click", "enriched_click")
    )
    reader: Any = fastavro.schemaless_reader
    writer: Any = fastavro.schemaless_writer
    consumer, producer = ceiling.consumer(conf), ceiling.producer(conf)
    if go is not None:
        go.wait()
    first = 0.0
    consumed = emitted = 0
    table: dict[str, dict[str, Any]] = {}
    buffer = io.BytesIO()
    try:
        for messages in ceiling.read_to_ends(consumer, table_parts, ends):
            first = first or time.monotonic()
            for message in messages:
                value = message.value()
                if value is None:  # a tombstone forgets the user
                    table.pop(message.key().decode(), None)
                    continue
                region = reader(io.BytesIO(value), region_schema, None)
                table[region["user"]] = region
            consumed += len(messages)
        for messages in ceiling.read_to_ends(consumer, click_parts, ends):
            first = first or time.monotonic()
            for message in messages:
                click = reader(io.BytesIO(message.value()), click_schema, None)
                region = table.get(click["user"], DEFAULT)
                buffer.seek(0)
                buffer.truncate()
                writer(buffer, enriched_schema, {"click": click, "region": region})
                ceiling.send(producer, output, buffer.getvalue(), message.key())
            consumed += len(messages)
            emitted += len(messages)
            producer.poll(0)
        done = ceiling.delivered(producer)
    finally:
        consumer.close()
    return LoopResult(first, done, consumed, emitted)


def run_ceiling(
    conf: dict[str, str],
    table: str,
    clicks: str,
    ends: dict[str, int],
    output: str,
    processes: int,
) -> RawResult:
    """The lookup loop in ``processes`` processes; each reads the whole table."""
    table_parts = ceiling.partitions_of(ends, table)
    click_parts = ceiling.partitions_of(ends, clicks)
    shares = [
        (conf, table_parts, click_parts[i::processes], ends, output) for i in range(processes)
    ]
    return ceiling.run_processes(lookup_loop, shares, sum(ends.values()))


# -- enrichd ---------------------------------------------------------------------------------


def configure(
    servers: str,
    table: str,
    clicks: str,
    checkpoint: Path,
    max_records_per_batch: int,
    totals: bool = False,
    trigger_ms: int = 0,
    versioned: bool = False,
) -> tuple[Any, Any]:
    """The example's pipeline file and pipeline over ``table`` and ``clicks`` on ``servers``.

    Output topics get fresh names; the totals stage is kept only if ``totals``;
    ``trigger_ms`` 0 keeps the pipeline's default trigger; ``versioned`` adds
    :data:`VERSIONED` to the options, with :data:`REVISED_SCHEMA` as the output's schema.
    """
    from daemon.model.config import KafkaConfig, load_pipeline_file

    example = load_pipeline_file(EXAMPLE)
    file = example.model_copy(update={"kafka": KafkaConfig(bootstrap_servers=servers)})
    pipe = file.pipeline[0]
    suffix = uuid.uuid4().hex[:8]
    options = {k: v for k, v in pipe.options.items() if totals or k != "aggregate"}
    output = pipe.output.model_copy(update={"topic": f"bench-enriched-{suffix}"})
    if versioned:
        options.update(VERSIONED)
        output = output.model_copy(update={"schema_file": REVISED_SCHEMA})
    outputs = {
        name: spec.model_copy(update={"topic": f"bench-{name}-{suffix}"})
        for name, spec in pipe.outputs.items()
        if totals
    }
    pipe = pipe.model_copy(
        update={
            "name": f"bench-lookup-{suffix}",
            "inputs": {
                "stream": pipe.inputs["stream"].model_copy(update={"topic": clicks}),
                "table": pipe.inputs["table"].model_copy(update={"topic": table}),
            },
            "output": output,
            "outputs": outputs,
            "options": options,
            "dead_letter_topic": f"bench-enriched-{suffix}.dlq",
            "checkpoint": checkpoint,
            "max_records_per_batch": max_records_per_batch,
            "trigger": trigger_ms,
        }
    )
    return file, pipe


def run_enrichd(
    servers: str,
    table: str,
    clicks: str,
    ends: dict[str, int],
    max_records_per_batch: int,
    totals: bool = False,
    timeout_s: float = 3600.0,
    versioned: bool = False,
) -> EnrichdResult:
    """The example pipeline over the benchmark's topics, its totals stage only if ``totals``,
    with ``versioned = true, revisions = true`` if ``versioned``.

    Raises:
        RuntimeError: the query failed or did not consume everything in ``timeout_s``.
    """
    with tempfile.TemporaryDirectory(prefix="enrichd-bench-") as tmp:
        file, pipe = configure(
            servers,
            table,
            clicks,
            Path(tmp) / "checkpoint",
            max_records_per_batch,
            totals,
            versioned=versioned,
        )
        return run_pipeline(file, pipe, ends, sum(ends.values()), timeout_s, stages=totals)


@dataclass(frozen=True)
class OfferedClicks:
    """Offered click ``i`` to ``topic``, by one of ``population`` users drawn at random, a
    twentieth of them unknown to the table (picklable, for the load generator's process)."""

    topic: str
    population: int

    def __call__(self, i: int, rng: random.Random) -> tuple[str, bytes, bytes]:
        click = {"id": f"click-{i}", "user": user_id(rng.randrange(self.population)), "clicks": 1}
        return self.topic, f"click-{i}".encode(), codec("click").encode(click)


def latency_workload(servers: str, users: int, max_records_per_batch: int) -> LatencyWorkload:
    """The lookup latency runs: a table of ``users`` regions read first, then clicks offered."""
    population = int(users * (1 + UNKNOWN_SHARE))

    def prepare(checkpoint: Path, trigger_ms: int, rate: int) -> Offer:
        conf = {"bootstrap.servers": servers}
        suffix = uuid.uuid4().hex[:8]
        table, clicks = f"lat-user-regions-{suffix}", f"lat-clicks-{suffix}"
        loaded, _ = produce(conf, table, clicks, argparse.Namespace(users=users, clicks=0, seed=7))
        file, pipe = configure(
            servers, table, clicks, checkpoint, max_records_per_batch, trigger_ms=trigger_ms
        )
        raw = RawSpec(
            conf,
            {table: "table", clicks: "stream"},
            {table: "user_region", clicks: "click"},
            "enriched_click",
            "",
            RawLookup,
            {},
        )
        return Offer(file, pipe, loaded, (clicks,), OfferedClicks(clicks, population), raw)

    return LatencyWorkload(
        "lookup", "clicks", "enriched clicks", f"all {users:,} user regions already read", prepare
    )


# -- the section -----------------------------------------------------------------------------


def _produced(
    conf: dict[str, str], users: int, args: argparse.Namespace, console: Console
) -> tuple[str, str, dict[str, int], int]:
    """``users`` regions then ``args.clicks`` clicks on fresh topics; (table, clicks, ends,
    clicks by unknown users)."""
    suffix = uuid.uuid4().hex[:8]
    table, clicks = f"user-regions-{suffix}", f"clicks-{suffix}"
    sizes = argparse.Namespace(users=users, clicks=args.clicks, seed=args.seed)
    began = time.monotonic()
    with console.status(f"producing {users:,} regions and {args.clicks:,} clicks"):
        ends, unknown = produce(conf, table, clicks, sizes)
    console.print(f"produced {users + args.clicks:,} records in {time.monotonic() - began:.1f} s")
    return table, clicks, ends, unknown


def _enrichd(
    args: argparse.Namespace,
    servers: str,
    table: str,
    clicks: str,
    ends: dict[str, int],
    console: Console,
    label: str,
) -> Repeated:
    """enrichd's lookup over the produced topics, ``args.runs`` times."""

    def once() -> EnrichdResult:
        return run_enrichd(servers, table, clicks, ends, args.max_batch, args.totals)

    return repeat(once, args.runs, console, label)


def _sweep_point(
    args: argparse.Namespace, broker: EmbeddedBroker, users: int, console: Console
) -> tuple[SweepPoint, list[str], bool]:
    """One more key count on fresh topics: the 2-process ceiling once, enrichd
    ``args.runs`` times; (the point, its checks, whether they passed)."""
    from daemon.kafka.admin import create_topics

    conf = {"bootstrap.servers": broker.bootstrap_servers}
    console.rule(f"lookup at {users:,} users")
    table, clicks, ends, unknown = _produced(conf, users, args, console)
    output = f"raw2-{uuid.uuid4().hex[:8]}"
    create_topics(conf, {output: INPUT_PARTITIONS})
    with console.status("raw ceiling, 2 processes"):
        two = run_ceiling(conf, table, clicks, ends, output, 2)
    console.print(f"raw ceiling, 2 processes: {rate(two.rate)} records/s")
    servers = broker.bootstrap_servers
    runs = _enrichd(args, servers, table, clicks, ends, console, f"enrichd lookup, {users:,} users")
    checks, ok = point_checks(
        conf, users, output, runs, args.clicks, "enriched clicks", users + args.clicks
    )
    defaulted = [count_defaulted(conf, each.output_topic) for each in runs.runs]
    checks.append(
        f"at {users:,} keys: enrichd enriched {', '.join(f'{n:,}' for n in defaulted)} clicks "
        f"with the default region (expected {unknown:,})"
    )
    ok = ok and set(defaulted) == {unknown}
    return SweepPoint(users, two.rate, runs), checks, ok


def run(args: argparse.Namespace, broker: EmbeddedBroker) -> Section:
    """Run the lookup benchmark on ``broker``: the first ``--users`` in full, the others as
    points of the key-count sweep."""
    console = Console()
    master = spark_master(EXAMPLE)
    measured = commit.measured()
    machine_line = machine(master, measured)
    conf = {"bootstrap.servers": broker.bootstrap_servers}
    users = args.users[0]
    records = users + args.clicks
    table, clicks, ends, unknown = _produced(conf, users, args, console)
    outputs = contender_outputs(conf)
    loads = []
    with console.status("raw ceiling, 1 process"):
        one = run_ceiling(conf, table, clicks, ends, outputs["one"], 1)
    console.print(f"raw ceiling, 1 process: {rate(one.rate)} records/s")
    loads.append(("raw 1 process", os.getloadavg()[0]))
    with console.status("raw ceiling, 2 processes"):
        two = run_ceiling(conf, table, clicks, ends, outputs["two"], 2)
    console.print(f"raw ceiling, 2 processes: {rate(two.rate)} records/s")
    loads.append(("raw 2 processes", os.getloadavg()[0]))
    cores = local_cores(master)
    with console.status(f"Quix Streams lookup ({cores} child processes)"):
        quix, defaulted = run_quix_lookup(
            args.quix_python,
            broker.bootstrap_servers,
            table,
            clicks,
            outputs["quix"],
            DEFAULT,
            args.clicks,
            records,
            timeout_s=1800.0,
            processes=cores,
        )
    console.print(quix_status(quix), highlight=False)
    loads.append(("Quix Streams", os.getloadavg()[0]))
    servers = broker.bootstrap_servers
    runs = _enrichd(args, servers, table, clicks, ends, console, "enrichd lookup")
    spark = runs.typical
    loads.append(("enrichd", os.getloadavg()[0]))
    versioned: EnrichdResult | None = None
    if args.versioned:
        with console.status("enrichd lookup, versioned + revisions (Spark)"):
            versioned = run_enrichd(servers, table, clicks, ends, args.max_batch, versioned=True)
        console.print(enrichd_status(versioned))
        loads.append(("enrichd versioned", os.getloadavg()[0]))
    with console.status("raw ceiling, 2 processes, again"):
        again = run_ceiling(conf, table, clicks, ends, outputs["again"], 2)
    console.print(f"raw ceiling, 2 processes, again: {rate(again.rate)} records/s")
    latency = latency_workload(servers, users, args.max_batch)
    latencies = run_latencies(args, broker, latency, console, loads)
    with console.status("checking outputs"):
        counted = count_outputs(conf, outputs, None, quix.ran)
        ran, runs_ok = run_checks(conf, runs, args.clicks, "enriched clicks", records)
        defaulted_enrichd = [count_defaulted(conf, each.output_topic) for each in runs.runs]
        if versioned is not None:
            counted["enrichd versioned + revisions"] = count_records(conf, versioned.output_topic)
            dead_versioned = count_records(conf, versioned.dead_letter_topic)
            defaulted_versioned = count_defaulted(conf, versioned.output_topic, REVISED_SCHEMA)
        totals_written = (
            # run_enrichd names the totals topic after the enriched one
            count_records(conf, spark.output_topic.replace("bench-enriched-", "bench-totals-"))
            if args.totals
            else None
        )
    busy = load_line(loads)
    checks = [*count_checks(counted, "enriched clicks", args.clicks), *ran]
    checks.append(
        f"enrichd enriched {', '.join(f'{n:,}' for n in defaulted_enrichd)} clicks with the "
        f"default region (expected {unknown:,}, the clicks whose user has no region)"
    )
    # Quix is at-least-once: a count above the clicks would be duplicates, below a loss.
    ok = all(count == args.clicks for count in counted.values()) and runs_ok
    ok = ok and set(defaulted_enrichd) == {unknown}
    if versioned is not None:
        # Every region is in before every click: one answer per click, no revision.
        checks.append(f"enrichd versioned dead letters: {dead_versioned:,}")
        checks.append(
            f"enrichd versioned enriched {defaulted_versioned:,} clicks with the default "
            f"region (expected {unknown:,})"
        )
        ok = ok and dead_versioned == 0 and defaulted_versioned == unknown
    if totals_written is not None:
        # Every enriched click adds at least 1 to its region's sum: one new total each.
        checks.append(f"enrichd totals written: {totals_written:,} (expected {args.clicks:,})")
        ok = ok and totals_written == args.clicks
    checks += latency_checks(latencies, latency)
    ok = ok and latencies_ok(latencies, latency)
    contenders = _contenders(one, two, quix, runs)
    if versioned is not None:
        checks += progress_check(versioned.batches, records)
        contenders += enrichd_contenders("enrichd lookup, versioned + revisions", versioned)
    if spark.stage_batches:
        contenders.append(_totals_row(spark.stage_batches[0]))
    contenders.append(
        Contender(
            "raw ceiling, 2 processes, again",
            again.rate,
            again.seconds,
            "right after enrichd: the machine's drift",
        )
    )
    points = [SweepPoint(users, two.rate, runs)]
    for more in args.users[1:]:
        point, point_checks, point_ok = _sweep_point(args, broker, more, console)
        points.append(point)
        checks += point_checks
        ok = ok and point_ok
    sweep = sweep_lines(points)
    for line in sweep:
        console.print(line, highlight=False)
    table_rows = throughput_table(contenders, two.rate, quix.rate if quix.ran else None)
    date = run_date()
    lines = [
        *run_header(_command(args), f"{machine_line}. {busy}", date),
        f"Workload: {users:,} user regions (one per user, {len(REGIONS)} regions) then "
        f"{args.clicks:,} clicks ({records:,} input records, plain Avro, 30-50 B each) on an "
        f"embedded Tansu broker, {INPUT_PARTITIONS} partitions per topic; clicks are keyed by "
        f"click id and name their user in a field (a foreign key); {unknown:,} clicks "
        f"({unknown / args.clicks:.1%}) are by users the table does not know and get the "
        "default region UNKNOWN (left mode). Every contender emits one enriched click per "
        "click.",
        "",
        *markdown_table(table_rows, left=(0, 5)),
        "",
        *_notes(args, one, two, quix, defaulted, unknown, runs),
        drift_line(runs.sustained, two.rate, again.rate),
        "",
        *sweep,
        *batches_lines(
            "Micro-batches that read records (the median run)",
            args.max_batch,
            batch_table(spark.batches),
        ),
        *_versioned_notes(args, runs, versioned, two.rate),
        *latency_section(
            latencies, latency, args.max_batch, runs.sustained, tuple(args.fit_records)
        ),
        checks_line(checks),
    ]
    figures = headline.measured(
        "lookup", runs.sustained, two.rate, cores, quix, latencies, points, date, measured
    )
    return Section("lookup", TITLE, lines, table_rows, plot_of(contenders), ok, figures)


def _versioned_notes(
    args: argparse.Namespace, runs: Repeated, versioned: EnrichdResult | None, ceiling: float
) -> list[str]:
    """What the versioned run (one) did and cost, against today's lookup (the median of its
    runs) in the same run."""
    if versioned is None:
        return []
    steady = versioned.steady()
    rows = sum(b.rows for b in steady) / len(steady)
    add = versioned.mean_ms("addBatch")
    return [
        "### enrichd lookup, versioned + revisions",
        "",
        "- *enrichd lookup, versioned + revisions*: the same pipeline with `versioned = true, "
        "revisions = true` (default `history_retention` of 1 h, no grace) and an output "
        "schema with `revision`, on the same topics, from a fresh checkpoint, run once. Each "
        "user's region history is kept, records apply in arrival order, and every click is "
        f"kept for revision (all {args.clicks:,} here: the timestamps, a millisecond apart, "
        f"span {(args.users[0] + args.clicks) / 60_000:.0f} minutes). No row "
        "is late here, so it writes one answer per click, like today's lookup.",
        f"- Versioned + revisions sustained {rate(versioned.sustained_rate)} records/s: "
        f"{versioned.sustained_rate / runs.sustained:.2f}x today's lookup (median) in this run "
        f"and {versioned.sustained_rate / ceiling:.2f} of the two-process ceiling. Steady "
        f"batches ({len(steady)}, {rows:,.0f} records each on average): addBatch "
        f"{add:,.0f} ms = {add * 1000 / rows if rows else 0:.1f} us per record.",
        *(
            line.replace("- Memory (enrichd run", "- Memory (versioned run").replace(
                "- State:", "- State (versioned run):"
            )
            for line in resources_lines(versioned, args.users[0])
        ),
        "",
        *batches_lines(
            "Micro-batches of the versioned run that read records",
            args.max_batch,
            batch_table(versioned.batches),
        ),
    ]


def _contenders(
    one: RawResult, two: RawResult, quix: QuixResult, runs: Repeated
) -> list[Contender]:
    return [
        Contender("raw ceiling, 1 process", one.rate, one.seconds, "table first, then clicks"),
        Contender("raw ceiling, 2 processes", two.rate, two.seconds, "the issue's reference"),
        Contender(
            "Quix Streams lookup (stateful apply)",
            quix.rate if quix.ran else None,
            quix.seconds if quix.ran else None,
            quix_note(quix) if quix.ran else f"not run: {quix.reason}",
        ),
        *repeated_contenders("enrichd lookup", runs),
    ]


def _totals_row(batches: list[Batch]) -> Contender:
    """The totals stage's row: enriched clicks read per second by the second query."""
    if not batches:
        return Contender("enrichd totals stage, sustained", None, None, "read nothing")
    rows = sum(b.rows for b in batches[1:]) or batches[0].rows
    seconds = (
        batches[-1].ended - batches[0].ended
        if len(batches) > 1
        else batches[0].durations_ms.get("triggerExecution", 0) / 1000
    )
    return Contender(
        "enrichd totals stage, sustained",
        rows / seconds if seconds else None,
        seconds,
        f"second query, {len(batches)} batch(es); its input is the enriched clicks",
    )


def _notes(
    args: argparse.Namespace,
    one: RawResult,
    two: RawResult,
    quix: QuixResult,
    defaulted: int,
    unknown: int,
    runs: Repeated,
) -> list[str]:
    spark = runs.typical
    steady = spark.steady()
    rows = sum(b.rows for b in steady) / len(steady)
    trigger = spark.mean_ms("triggerExecution")
    add = spark.mean_ms("addBatch")
    per_record_us = add * 1000 / rows if rows else 0.0
    first = spark.batches[0]
    lines = [
        "- *raw ceiling*: confluent-kafka `assign()` + fastavro + a dict + a batching "
        "producer (at-least-once). A process reads the table to its end first, then its "
        "clicks; timed from the first record consumed to the last output delivered. With two "
        "processes each reads the whole table and one click partition (the table counts once "
        "in the input rate).",
        "- *enrichd*: `examples/clicks-per-region.toml` unchanged but for topics, checkpoint "
        "and batch cap, and "
        + (
            "with `[pipeline.options.aggregate]`: the running totals per region run as a second "
            "query over the enriched topic, beside the first as `daemon run` runs both, on "
            "their own row (records/s of enriched clicks; its ratios compare unlike work). "
            if spark.stage_batches
            else "without `[pipeline.options.aggregate]` (the running totals run as a second "
            "query over the enriched topic; not measured here, see `--totals`). "
        )
        + "The engine shuffles "
        "clicks and regions by user, and each micro-batch applies a user's records in "
        "event-time order (here the Kafka timestamps, every region before every click).",
        SERVICE_LINE,
        sustained_line(args.runs),
        "- *Quix Streams*: Quix 3.x's `join_lookup` enriches from a `BaseLookup`, and its "
        "lookups are SQLite or PostgreSQL queries per record or the Quix Configuration "
        "Service's configuration events, not a table kept from a Kafka topic; so the peer is "
        "written as Quix users write this join: clicks re-keyed by user with `group_by` "
        "(through a `repartition__` topic), `concat`-ed with the regions topic, and one "
        "`apply(stateful=True, expand=True)` that stores each user's latest region in Quix's "
        "RocksDB state and emits each click with it, with Quix's defaults (at-least-once, "
        "changelog topics, 5 s commits).",
        QUIX_SCALING,
    ]
    if quix.ran:
        lines.append(
            f"- Quix enriched {defaulted:,} clicks with the default region, against {unknown:,} "
            "clicks whose user has no region: Quix reads the regions and the re-keyed clicks "
            "side by side, not in timestamp order, so "
            + (
                "a click can overtake its user's region (it did here)."
                if defaulted != unknown
                else "a click could overtake its user's region (none did here)."
            )
        )
    lines += [
        ceiling_verdict(runs.sustained, two.rate, one=one.rate),
        peer_verdict(
            runs.sustained,
            quix.rate if quix.ran else None,
            f"Quix Streams' stateful lookup in {quix.processes} process(es)",
            quix.reason,
        ),
        f"- Steady batches of the median run ({len(steady)}, {rows:,.0f} records each on "
        "average): "
        f"{trigger:,.0f} ms per batch, of which addBatch (read, decode, shuffle by user, "
        f"lookup with RocksDB state, encode, transactional produce) {add:,.0f} ms = "
        f"{per_record_us:.1f} us per record, against {1e6 / one.rate:.1f} us per record for "
        f"the whole 1-process raw loop ({per_record_us * one.rate / 1e6:.1f}x); "
        f"{trigger - add:,.0f} ms per batch outside addBatch. First batch: {first.rows:,} "
        f"records in {first.durations_ms.get('triggerExecution', 0):,} ms.",
        *resources_lines(spark, args.users[0]),
    ]
    return lines
