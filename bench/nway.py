"""``python -m bench nway``: orders enriched from three tables against one (issue 65).

The shop of :mod:`bench.shop`: customers, regions and products produced first (preloaded),
then orders. Contenders, on the same topics:

- the raw ceiling (:mod:`bench.shop_ceiling`) in two processes, with one table and with
  three;
- enrichd with one table (orders -> customers by ``customer_id``: the one-table lookup) and
  with three (-> the customer's region by its ``region_id``, and -> products by
  ``product_id``: the chain of ``examples/orders-three-tables.toml``), unversioned,
  alternately, ``--runs`` times each, over the same order stream.

Reported: each one's records/s (the median sustained rate: after the first micro-batch,
which holds the tables, only orders), their ratio (issue 65's target: three tables at least
:data:`TARGET` of one), each against its own ceiling, and what each stage of the chain cost.

With ``--continuous``, then the same two pipelines with ``mode = "continuous"`` (one lease: a
lookup of several tables runs in one; long batches of ``--long-batch-ms``, longer than a
drain, so that none ends during one) drain the same backlog, the tables' rows then the
orders, already produced: one table, then three, ``--runs`` rounds, each drain in a fresh
process of its own (:func:`bench.drain.in_process`), timed from the service's start (not the
Spark session's) to the pipeline's consumer group reaching the ends of the topics it reads
(:func:`bench.drain.continuous`). Reported: each drain's records/s (the tables' rows it reads
and the orders), the three-table against the one-table median, beside micro-batch mode's
ratios of the same run, and a check per drain that it wrote one enriched order per order
and no dead letter. Off by default: the smoke (:mod:`bench.smoke`) leaves it out.
"""

from __future__ import annotations

import argparse
import os
import statistics
import uuid
from functools import partial
from typing import TYPE_CHECKING

from rich.console import Console

from bench import commit
from bench.ceiling import RawResult
from bench.drain import Drained, continuous, in_process
from bench.enrichd import EnrichdResult, batch_table
from bench.operators import mean_operators
from bench.report import Section
from bench.resources import MIB
from bench.runs import (
    Repeated,
    add_runs_argument,
    output_checks,
    repeated_contenders,
    run_checks,
    spark_master,
    sustained_line,
)
from bench.shop import (
    EXAMPLE,
    FIELDS,
    REGIONS,
    TABLES,
    Shop,
    ShopTopics,
    configure,
    produce,
    run_enrichd,
)
from bench.shop_ceiling import run_ceiling
from bench.wording import (
    SERVICE_LINE,
    Contender,
    batches_lines,
    checks_line,
    count_checks,
    enrichd_status,
    load_line,
    machine,
    markdown_table,
    needs,
    plot_of,
    rate,
    run_header,
    short_of,
)
from bench.workloads import INPUT_PARTITIONS, count_records
from daemon.model.config import DEFAULT_MAX_RECORDS_PER_BATCH

if TYPE_CHECKING:
    from daemon.broker import EmbeddedBroker

TITLE = "## nway: orders + customers, regions, products -> orders with three tables"
TARGET = 0.8
"""Issue 65: enrichd with three tables sustains at least this much of its one-table rate."""
SHAPES = {1: "one table", 3: "three tables"}
"""The two lookups, by their number of tables, in the order each round runs them."""
STAGE_COLUMNS = (
    "lookup",
    "stage",
    "shuffle partitions",
    "updates ms",
    "updates us per order",
    "commit ms",
    "state MiB",
)
COLUMNS = ("run", "records/s", "seconds", "vs its 2-process ceiling", "vs one table", "note")
LONG_BATCH_MS = 600_000
"""A continuous drain's long batch (``--long-batch-ms``): longer than a drain at the default
sizes, so that no long batch ends during one."""
DRAIN_COLUMNS = ("drain", "records", "seconds", "records/s", "vs one table", "early")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The workload's sizes: the ``lookup`` workload's (100,000 table keys, then 3,000,000
    stream records: seven micro-batches at the default cap, six after the first)."""
    parser.add_argument("--customers", type=int, default=100_000, help="customers table rows")
    parser.add_argument("--products", type=int, default=10_000, help="products table rows")
    parser.add_argument("--orders", type=int, default=3_000_000, help="stream records (orders)")
    parser.add_argument(
        "--max-batch",
        type=int,
        default=DEFAULT_MAX_RECORDS_PER_BATCH,
        help="enrichd max_records_per_batch (the pipeline default)",
    )
    parser.add_argument("--seed", type=int, default=7, help="seed for orders and regions")
    add_runs_argument(parser)
    parser.add_argument(
        "--continuous",
        action="store_true",
        help='then drain the same backlog with both pipelines in mode = "continuous" (one '
        "lease), --runs rounds, each drain in a fresh process",
    )
    parser.add_argument(
        "--long-batch-ms",
        type=int,
        default=LONG_BATCH_MS,
        help="the continuous drains' long batch (ms): longer than a drain",
    )


def _command(args: argparse.Namespace) -> str:
    return (
        f".venv/bin/python -m bench nway --customers {args.customers} --products "
        f"{args.products} --orders {args.orders} --max-batch {args.max_batch} --runs {args.runs}"
        + (f" --continuous --long-batch-ms {args.long_batch_ms}" if args.continuous else "")
    )


def run(args: argparse.Namespace, broker: EmbeddedBroker) -> Section:
    """Produce the shop, run both ceilings, then enrichd with one table and with three in
    turn, ``--runs`` rounds; the section."""
    from daemon.kafka.admin import create_topics

    console = Console()
    machine_line = machine(spark_master(EXAMPLE), commit.measured())
    conf = {"bootstrap.servers": broker.bootstrap_servers}
    shop = Shop(args.customers, args.products, args.orders, args.seed)
    topics = ShopTopics.fresh()
    with console.status(f"producing {shop.table_rows:,} table rows and {shop.orders:,} orders"):
        ends = produce(conf, topics, shop)
    outputs = {tables: f"raw2-shop-{tables}-{uuid.uuid4().hex[:8]}" for tables in SHAPES}
    create_topics(conf, dict.fromkeys(outputs.values(), INPUT_PARTITIONS))
    loads: list[tuple[str, float]] = []
    ceilings: dict[int, RawResult] = {}
    for tables, shape in SHAPES.items():
        with console.status(f"raw ceiling, {shape}, 2 processes"):
            ceilings[tables] = run_ceiling(conf, topics, ends, tables, outputs[tables], 2)
        console.print(f"raw ceiling, {shape}: {rate(ceilings[tables].rate)} records/s")
        loads.append((f"raw {shape}", os.getloadavg()[0]))
    runs: dict[int, list[EnrichdResult]] = {tables: [] for tables in SHAPES}
    servers = broker.bootstrap_servers
    for round_ in range(1, args.runs + 1):
        for tables, shape in SHAPES.items():
            with console.status(f"enrichd, {shape} (Spark), run {round_} of {args.runs}"):
                result = run_enrichd(servers, topics, ends, tables, args.max_batch)
            runs[tables].append(result)
            console.print(f"enrichd, {shape}, run {round_}: {enrichd_status(result)}")
            loads.append((f"enrichd {shape} {round_}", os.getloadavg()[0]))
    drains = _drains(args, servers, topics, ends, console, loads) if args.continuous else {}
    repeated = {tables: Repeated(results) for tables, results in runs.items()}
    with console.status("checking outputs"):
        checks, ok = _checks(conf, shop, topics, ends, outputs, repeated)
        for tables, done in drains.items():
            label = f"enrichd {SHAPES[tables]}, continuous"
            lines, fine = output_checks(conf, done, shop.orders, "enriched orders", label)
            checks += lines
            ok = ok and fine
    one, three = repeated[1], repeated[3]
    ratio = three.sustained / one.sustained
    console.print(f"three tables against one: {ratio:.2f}", highlight=False)
    if drains:
        drained = drain_ratio(drains)
        console.print(f"three tables against one, continuous: {drained:.2f}", highlight=False)
    contenders = _contenders(ceilings, repeated)
    table = _table(contenders, ceilings, one, three)
    lines = [
        *run_header(_command(args), f"{machine_line}. {load_line(loads)}"),
        f"Workload: {shop.customers:,} customers (each in one of {REGIONS} regions), "
        f"{REGIONS} regions and {shop.products:,} products, every row produced before every "
        f"order, then {shop.orders:,} orders keyed by order id, each by a customer and for a "
        f"product drawn at random from the tables' keys (plain Avro), on an embedded Tansu "
        f"broker, {INPUT_PARTITIONS} partitions per topic. Every order finds a row in every "
        "table; every contender emits one enriched order per order.",
        "",
        *markdown_table(table, left=(0, 5)),
        "",
        *_notes(args, ceilings, one, three),
        _verdict(one.sustained, three.sustained),
        *_pairs(runs),
        *_stages(one, three, ceilings),
        "",
        *batches_lines(
            "Micro-batches of the median one-table run that read records",
            args.max_batch,
            batch_table(one.typical.batches),
        ),
        *batches_lines(
            "Micro-batches of the median three-table run that read records",
            args.max_batch,
            batch_table(three.typical.batches),
        ),
        *drain_lines(drains, args.long_batch_ms, (ratio, three.end_to_end / one.end_to_end)),
        checks_line(checks),
    ]
    return Section("nway", TITLE, lines, table, plot_of(contenders), ok)


def _drains(
    args: argparse.Namespace,
    servers: str,
    topics: ShopTopics,
    ends: dict[str, int],
    console: Console,
    loads: list[tuple[str, float]],
) -> dict[int, list[Drained]]:
    """The backlog drained by each pipeline in continuous mode, one table then three,
    ``args.runs`` rounds, each drain in a fresh process; the drains by number of tables."""
    from daemon.continuous.lease_source import LongBatches

    batches = LongBatches(leases=1, long_batch_ms=args.long_batch_ms)
    drains: dict[int, list[Drained]] = {tables: [] for tables in SHAPES}
    for round_ in range(1, args.runs + 1):
        for tables, shape in SHAPES.items():
            read = topics.read(ends, tables)  # its group commits only the topics it reads
            # The default cap, whatever --max-batch: a sub-batch's cap, every commit interval.
            cap = DEFAULT_MAX_RECORDS_PER_BATCH
            pipeline = partial(configure, servers, topics, tables, max_records_per_batch=cap)
            job = partial(continuous, pipeline, read, sum(read.values()), batches)
            with console.status(f"enrichd, {shape}, continuous, run {round_} of {args.runs}"):
                drained = in_process(job, f"continuous drain, {shape}")
            drains[tables].append(drained)
            console.print(
                f"enrichd, {shape}, continuous, run {round_}: {rate(drained.rate)} records/s "
                f"({drained.records:,} in {drained.seconds:.1f} s)",
                highlight=False,
            )
            loads.append((f"continuous {shape} {round_}", os.getloadavg()[0]))
    return drains


def drain_ratio(drains: dict[int, list[Drained]]) -> float:
    """Three tables against one in continuous mode: the median drains' records/s."""
    medians = {t: statistics.median(d.rate for d in done) for t, done in drains.items()}
    return medians[3] / medians[1]


def drain_lines(
    drains: dict[int, list[Drained]], long_batch_ms: int, batch_ratios: tuple[float, float]
) -> list[str]:
    """The continuous drains' table and lines (none: not run); ``batch_ratios`` are
    micro-batch mode's three-against-one ratios of the same run, sustained and end to end."""
    if not drains:
        return []
    one = statistics.median(d.rate for d in drains[1])
    table: list[tuple[str, ...]] = [DRAIN_COLUMNS]
    for tables, done in drains.items():
        for number, d in enumerate(done, 1):
            table.append(
                (
                    f"{SHAPES[tables]}, continuous {number}",
                    f"{d.records:,}",
                    f"{d.seconds:.1f}",
                    rate(d.rate),
                    f"{d.rate / one:.2f}",
                    f"{d.ended_early}",
                )
            )
    ratio = drain_ratio(drains)
    sustained, end_to_end = batch_ratios
    longest = max(d.seconds for done in drains.values() for d in done)
    rounds = len(drains[1])
    lines = [
        'Continuous mode (`--continuous`): the same two pipelines with `mode = "continuous"` '
        f"(one lease, long batches of {long_batch_ms:,} ms, `max_records_per_batch` the "
        f"default, {DEFAULT_MAX_RECORDS_PER_BATCH:,}, whatever `--max-batch`: it caps each "
        "sub-batch, every `commit_interval`), each draining the same backlog, "
        f"the tables' rows then the orders, already produced: one table, then three, {rounds} "
        "round(s), each drain in a fresh process of its own (`bench/drain.py`), timed from "
        "the service's start (not the Spark session's) to the pipeline's consumer group "
        "reaching the ends of the topics it reads. *records* counts the rows of the tables "
        "a pipeline reads as well as the orders; *vs one table* is against the one-table "
        "drains' median; *early*: long batches that ended early, their held state past its "
        "budget.",
        "",
        *markdown_table(table),
        "",
        f"- Three tables against one in continuous mode (median records/s of "
        f"{rounds} drain(s) each): {short_of(ratio, TARGET)} "
        f"({rate(statistics.median(d.rate for d in drains[3]))} against {rate(one)} "
        f"records/s); target (issue 65) >= {TARGET}: continuous mode "
        f"{'meets' if ratio >= TARGET else 'misses'} it. Micro-batch mode in this run: "
        f"{sustained:.2f} sustained (the target's), {end_to_end:.2f} end to end (timed from "
        "the service's start, as the drains are).",
    ]
    if longest * 1000 >= long_batch_ms:
        lines.append(
            f"- The longest drain took {longest:,.1f} s, not shorter than a long batch: a "
            "long batch may have ended during it (raise `--long-batch-ms`)."
        )
    return [*lines, ""]


def _checks(
    conf: dict[str, str],
    shop: Shop,
    topics: ShopTopics,
    ends: dict[str, int],
    outputs: dict[int, str],
    repeated: dict[int, Repeated],
) -> tuple[list[str], bool]:
    """What every contender wrote (one enriched order per order), enrichd's dead letters and
    steady batches; and whether all of it is as expected."""
    counted = {f"raw {SHAPES[t]}": count_records(conf, topic) for t, topic in outputs.items()}
    checks = count_checks(counted, "enriched orders", shop.orders)
    ok = all(count == shop.orders for count in counted.values())
    for tables, runs in repeated.items():
        records = sum(topics.read(ends, tables).values())
        label = f"enrichd {SHAPES[tables]}"
        lines, fine = run_checks(conf, runs, shop.orders, "enriched orders", records, label)
        checks += lines
        ok = ok and fine
    return checks, ok


def _contenders(ceilings: dict[int, RawResult], repeated: dict[int, Repeated]) -> list[Contender]:
    notes = {1: "customers first, then orders", 3: "customers, regions, products first"}
    rows = [
        Contender(f"raw ceiling, {SHAPES[t]}, 2 processes", c.rate, c.seconds, notes[t])
        for t, c in ceilings.items()
    ]
    for tables, runs in repeated.items():
        rows += repeated_contenders(f"enrichd, {SHAPES[tables]}", runs)
    return rows


def _table(
    contenders: list[Contender], ceilings: dict[int, RawResult], one: Repeated, three: Repeated
) -> list[tuple[str, ...]]:
    """The throughput table: each row against the ceiling with as many tables, and against
    the same contender with one table."""
    rows: list[tuple[str, ...]] = [COLUMNS]
    for c in contenders:
        tables = 3 if SHAPES[3] in c.name else 1
        if c.name.startswith("raw"):
            base = ceilings[1].rate
        else:
            base = one.end_to_end if "end to end" in c.name else one.sustained
        rows.append(
            (
                c.name,
                rate(c.rate),
                "-" if c.seconds is None else f"{c.seconds:.2f}",
                "-" if c.rate is None else f"{c.rate / ceilings[tables].rate:.2f}",
                "-" if c.rate is None else f"{c.rate / base:.2f}",
                c.note,
            )
        )
    return rows


def _notes(
    args: argparse.Namespace, ceilings: dict[int, RawResult], one: Repeated, three: Repeated
) -> list[str]:
    return [
        "- *raw ceiling*: confluent-kafka `assign()` + fastavro + a dict per table + a "
        "batching producer (at-least-once), in two processes: each reads its tables to their "
        "ends first, then one order partition, and writes the same output record as enrichd "
        "with as many tables. *vs its 2-process ceiling* compares a row with the ceiling of "
        "as many tables; *vs one table* with the same contender's one-table row.",
        "- *enrichd*: `examples/orders-three-tables.toml` but for topics, checkpoint, batch "
        "cap and output schema (the example's without `revision`), with neither `versioned` "
        "nor `revisions` (the plain lookup, as the `lookup` workload's). *One table* is the "
        "one-table lookup (`[pipeline.inputs.table]` = customers): one stateful operator, "
        "grouped by customer. *Three tables* is the chain of `[[pipeline.options.tables]]`: "
        "three stateful operators in one query, grouped by customer, then region, then "
        "product, each behind a shuffle by its key. The two run alternately, one table "
        f"first, {args.runs} time(s) each, over the same topics.",
        SERVICE_LINE,
        sustained_line(args.runs),
    ]


def _verdict(one: float, three: float) -> str:
    """Issue 65's target, met or missed, and by how much."""
    ratio = three / one
    line = (
        f"- Target (issue 65): enrichd with three tables sustains >= {TARGET} of its rate with "
        f"one table on the same stream. This run {'meets' if ratio >= TARGET else 'misses'} "
        f"it: {short_of(ratio, TARGET)} ({rate(three)} against {rate(one)} records/s)"
    )
    if ratio >= TARGET:
        return line + "."
    return line + f"; reaching it needs {needs(TARGET / ratio)} the measured three-table rate."


def _pairs(runs: dict[int, list[EnrichdResult]]) -> list[str]:
    """Each round's ratio, three tables to the one table run just before it."""
    if len(runs[1]) < 2:
        return []
    ratios = [b.sustained_rate / a.sustained_rate for a, b in zip(runs[1], runs[3], strict=True)]
    return [
        "- Round by round (three tables against the one-table run just before): "
        + ", ".join(f"{r:.2f}" for r in ratios)
        + f"; median {statistics.median(ratios):.2f}."
    ]


def _stages(one: Repeated, three: Repeated, ceilings: dict[int, RawResult]) -> list[str]:
    """What the two stages more cost, from the median runs' steady batches: per order in
    addBatch, each stateful operator's own time, and what of it sets the ratio."""
    per_order: dict[int, float] = {}
    stages: dict[int, list[float]] = {}
    rows: list[tuple[str, ...]] = [STAGE_COLUMNS]
    for tables, runs in ((1, one), (3, three)):
        steady = runs.typical.steady()
        orders = sum(b.rows for b in steady) / len(steady)
        per_order[tables] = runs.typical.mean_ms("addBatch") * 1000 / orders
        operators = mean_operators([b.operators for b in steady])
        stages[tables] = [op.updates_ms * 1000 / orders for op in operators]
        for table, op, us in zip(TABLES, operators, stages[tables], strict=False):
            rows.append(
                (
                    SHAPES[tables],
                    f"{table} (by {FIELDS[table]})",
                    f"{op.partitions}",
                    f"{op.updates_ms:,}",
                    f"{us:,.1f}",
                    f"{op.commit_ms:,}",
                    f"{op.state_bytes / MIB:,.1f}",
                )
            )
    extra = (per_order[3] - per_order[1]) / 2
    lines = [
        f"- Per order, in the median runs' steady batches: addBatch (read, decode, "
        f"shuffles, lookups, encode, transactional produce) {per_order[1]:,.1f} us with one "
        f"table, {per_order[3]:,.1f} us with three: each of the two stages more costs "
        f"{extra:,.1f} us per order, {extra / per_order[1]:.2f} of the whole one-table "
        "lookup. Each stage's stateful operator, behind a shuffle by its key (mean per "
        "steady batch of the median run; *updates* is `allUpdatesTimeMs`, the time its tasks "
        "spent on the batch's rows, summed over its tasks, which run on the 2 cores side by "
        "side; *commit* is `commitTimeMs`; state is its RocksDB files after the last batch):",
        "",
        *markdown_table(rows, left=(0, 1)),
    ]
    if len(stages[1]) == 1 and len(stages[3]) == len(TABLES) and stages[1][0]:
        alone, chain = stages[1][0], stages[3]
        lines += [
            "",
            f"- What sets the ratio: each stage of the chain is an operator of its own, behind "
            f"a shuffle of its own, and each costs {min(chain) / alone:.2f}x to "
            f"{max(chain) / alone:.2f}x the one-table operator ({alone:,.1f} us per order): "
            f"{sum(chain):,.1f} us in all, {sum(chain) / alone:.2f}x, where the raw loop's "
            f"two more lookups leave it {ceilings[3].rate / ceilings[1].rate:.2f} of its "
            "one-table rate. A stage's cost is a lookup's whole per-record path (the "
            "shuffle, the call, the state of the key's bucket, the record so far handed on "
            "to the next operator), not the lookup alone.",
        ]
    return lines
