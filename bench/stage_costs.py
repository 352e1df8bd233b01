"""``python -m bench.stage_costs``: what each operator of the nway workload costs per order.

The operators of :mod:`bench.nway`'s two lookups called in this process, without Spark or a
broker, as the query calls them: the tables' rows in a first micro-batch, then the orders in
one more, packed by state bucket as the source packs them, each operator's packs handed to
the next grouped by bucket as Spark's shuffle hands them on, over :data:`TASKS` tasks (a
processor each). Buckets stay decoded in the process (:class:`HeldBuckets`), as the worker
cache keeps them between micro-batches. Printed: the CPU time of each operator per order in
the orders' batch, and with ``--profile`` where it went (cProfile, slower).

Why: a profile of the Spark workers in a bench run put nearly all of the three-table run's
Python time inside the chain's operators (PySpark's conversions were under 1%), so what a
stage costs here is what it costs there, measured in seconds rather than a bench run's
minutes. Compare only figures of one run: the machine's speed varies from day to day.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import random
import tempfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pyarrow as pa

from bench.shop import FIELDS, Shop, customer_id, output_schema, product_id, rows
from bench.workloads import codec
from daemon.continuous.held_buckets import HeldBuckets
from daemon.continuous.operators import LeaseOperators
from daemon.formats.avro.codec import AvroCodec, load_schema_file
from daemon.joiners.lookup_tables import LookupOfTables
from daemon.model.keys import join_key
from daemon.model.record_route import bucket_labels, buckets_of
from daemon.model.wire import INPUT, pack
from daemon.operator.chain_processor import ChainProcessor
from daemon.operator.chain_step import ChainStep
from daemon.operator.processor import JoinerProcessor
from daemon.operator.spec import OperatorPlan
from daemon.plugin.configured import configure
from daemon.sink.spec import OutputSpec
from daemon.spark.worker_gc import freeze_loaded

BUCKETS = 32
"""The pipelines' ``state_buckets`` (enrichd's default)."""
TASKS = 2
"""Tasks of each operator: the bench's shuffle partitions."""
SCHEMAS = {"stream": "shop_order", "table": "shop_customer"} | {
    table: f"shop_{field}" for table, field in FIELDS.items()
}
ROW_KEYS = {"stream": "customer_id"}
"""Each input's key field (the tables': ``id``)."""
ROW_TIMES = {"stream": "at"}
"""Each input's time field (the tables': ``since``)."""
LOOKUP_KEYS = {
    "customers": "order.customer_id",
    "regions": "customer.region_id",
    "products": "order.product_id",
}
"""The chain's lookup keys, as ``examples/orders-three-tables.toml`` has them."""
NOW = 1_700_000_000_000

Line = tuple[str, int, dict[str, Any], int]
"""One input record: its input, offset, value and Kafka timestamp."""


def main(argv: list[str] | None = None) -> None:
    """Time the one-table lookup's operator and each of the chain's, and print them."""
    parser = argparse.ArgumentParser(prog="python -m bench.stage_costs", description=__doc__)
    parser.add_argument("--orders", type=int, default=100_000, help="orders in the batch")
    parser.add_argument("--profile", action="store_true", help="print each operator's profile")
    args = parser.parse_args(argv)
    freeze_loaded()  # the garbage collection of a Spark worker enrichd runs in
    tables, orders = _shop(args.orders)
    one = _lookup(("stream", "table"), 1, {})
    one_table = [("table", offset, value, at) for _, offset, value, at in tables["customers"]]
    for name, seconds in _run([one], ("stream", "table"), one_table, orders, args.profile):
        print(f"one table, {name}: {seconds / len(orders) * 1e6:.1f} us per order")
    roles = ("stream", *LOOKUP_KEYS)
    chain = [{"input": table, "lookup_key": path} for table, path in LOOKUP_KEYS.items()]
    stages = _stages(roles, {"tables": chain})
    every_row = [line for table in LOOKUP_KEYS for line in tables[table]]
    total = 0.0
    for name, seconds in _run(stages, roles, every_row, orders, args.profile):
        total += seconds
        print(f"three tables, {name}: {seconds / len(orders) * 1e6:.1f} us per order")
    print(f"three tables, all stages: {total / len(orders) * 1e6:.1f} us per order")
    lease = _in_lease([ops[0] for ops in [one]], ("stream", "table"), one_table, orders)
    print(f"one table in a lease: {lease / len(orders) * 1e6:.1f} us per order")
    lease = _in_lease([ops[0] for ops in stages], roles, every_row, orders)
    print(f"three tables in a lease: {lease / len(orders) * 1e6:.1f} us per order")


def _shop(count: int) -> tuple[dict[str, list[Line]], list[Line]]:
    """The bench's tables (by name) and ``count`` orders after them, as :mod:`bench.shop`."""
    shop = Shop(customers=100_000, products=10_000, orders=count)
    rng = random.Random(shop.seed)
    tables: dict[str, list[Line]] = {}
    at = 0
    for name, table in rows(shop, rng).items():
        for offset, value in enumerate(table):
            at += 1
            tables.setdefault(name, []).append((name, offset, value, at))
    orders: list[Line] = []
    for i in range(count):
        at += 1
        order = {
            "id": f"order-{i}",
            "customer_id": customer_id(rng.randrange(shop.customers)),
            "product_id": product_id(rng.randrange(shop.products)),
            "quantity": 1 + i % 5,
            "at": at,
        }
        orders.append(("stream", i, order, at))
    return tables, orders


def _plan(joiner: Any, roles: tuple[str, ...], tables: int) -> OperatorPlan:
    """An operator's plan over the shop's schemas, writing the bench's output record."""
    with tempfile.TemporaryDirectory() as folder:
        schema = Path(folder) / "output.avsc"
        schema.write_text(json.dumps(output_schema(tables)), encoding="utf-8")
        output = AvroCodec(load_schema_file(schema))
    return OperatorPlan(
        joiner=joiner,
        codecs={role: codec(SCHEMAS[role]) for role in roles},
        output_codec=output,
        output_topic="out",
        dead_letter_topic="out.dlq",
        plugin="enrichd",
        inputs=tuple((role, f"{role}-topic") for role in roles),
    )


def _lookup(roles: tuple[str, ...], tables: int, options: dict[str, Any]) -> list[Any]:
    """The one-table lookup's operator, a processor per task."""
    fields = {"stream": "order", "table": FIELDS["customers"]}
    joiner = configure(LookupOfTables, options, pipeline="p", fields=fields)
    return [_ready(JoinerProcessor(_plan(joiner, roles, tables), _output())) for _ in range(TASKS)]


def _stages(roles: tuple[str, ...], options: dict[str, Any]) -> list[list[Any]]:
    """The chain's operators in query order, a processor per task each."""
    fields = {"stream": "order", **FIELDS}
    chain = configure(LookupOfTables, options, pipeline="p", fields=fields).chain()
    if chain is None or chain.last is not None:
        raise ValueError("the bench's chain has neither versions nor revisions: no numbering")
    stages = []
    for index, stage in enumerate(chain.stages):
        step = ChainStep(chain, index, BUCKETS, 0, roles.index(stage.table))
        plan = _plan(stage.joiner, roles, len(chain.stages))
        stages.append([_ready(ChainProcessor(plan, _output(), step)) for _ in range(TASKS)])
    return stages


def _output() -> OutputSpec:
    return OutputSpec("p", {}, "exactly_once", "out")


def _ready(processor: JoinerProcessor) -> JoinerProcessor:
    """The processor, its buckets held in this process."""
    processor.ready(HeldBuckets())
    return processor


def _run(
    operators: list[Any], roles: tuple[str, ...], rows_: list[Line], orders: list[Line], shown: bool
) -> Iterable[tuple[str, float]]:
    """Each operator's CPU seconds on the orders' batch, after the tables' batch."""
    packs = _packed(rows_, roles)
    for tasks in operators:
        packs = _call(tasks, packs, lambda run: run())
    packs = _packed(orders, roles)
    for index, tasks in enumerate(operators):
        profile = cProfile.Profile() if shown else None
        started = time.process_time()
        packs = _call(tasks, packs, profile.runcall if profile else lambda run: run())
        yield (f"operator {index}", time.process_time() - started)
        if profile is not None:
            pstats.Stats(profile).sort_stats("tottime").print_stats(20)


def _in_lease(
    operators: list[Any], roles: tuple[str, ...], rows_: list[Line], orders: list[Line]
) -> float:
    """The CPU seconds of the orders' sub-batch through a lease's operators, as continuous
    mode runs them (:class:`LeaseOperators`: a partial read on where it can), after the
    tables' sub-batch. What the writing operator writes goes nowhere."""
    lease = LeaseOperators(operators, [HeldBuckets() for _ in operators])
    lease.write_to(SimpleNamespace(covered=set(), send_row=_dropped))  # type: ignore[arg-type]
    lease.sub_batch(_packed(rows_, roles), NOW)
    packs = _packed(orders, roles)
    started = time.process_time()
    lease.sub_batch(packs, NOW)
    return time.process_time() - started


def _call(
    tasks: list[Any], packs: dict[int, list[Any]], runner: Callable[[Callable[[], Any]], Any]
) -> dict[int, list[Any]]:
    """One call per bucket, on its task's processor; what they hand on, by bucket.

    What a writing operator writes goes nowhere: its rows are made, not produced.
    """
    labels = bucket_labels(BUCKETS)
    handed: dict[int, list[Any]] = {}

    def calls() -> None:
        for bucket, its_packs in packs.items():
            processor = tasks[labels.index(bucket) % TASKS]
            if isinstance(processor, ChainProcessor) and not processor.step.writes:
                for row in processor.handleInputRows((bucket,), iter(its_packs), _Clock()):
                    handed.setdefault(row.bucket, []).append(row)
            else:
                processor._input_rows((bucket,), iter(its_packs), _Clock(), _dropped)

    runner(calls)
    return handed


def _packed(lines: list[Line], roles: tuple[str, ...]) -> dict[int, list[Any]]:
    """Records packed by bucket as the source packs them, a pack per input and bucket."""
    by_input: dict[str, list[Line]] = {}
    for line in lines:
        by_input.setdefault(line[0], []).append(line)
    packs: dict[int, list[Any]] = {}
    for role, its_lines in by_input.items():
        encode = codec(SCHEMAS[role]).encode
        keys = [join_key([value[ROW_KEYS.get(role, "id")]]) for _, _, value, _ in its_lines]
        batch = pa.RecordBatch.from_pylist(
            [
                {
                    "input": roles.index(role),
                    "key": key,
                    "event_time": value[ROW_TIMES.get(role, "since")],
                    "partition": 0,
                    "offset": offset,
                    "timestamp": at,
                    "kafka_key": str(value["id"]).encode(),
                    "value": encode(value),
                    "error": None,
                    "headers": None,
                }
                for key, (_, offset, value, at) in zip(keys, its_lines, strict=True)
            ],
            schema=INPUT.arrow,
        )
        read = f"{role}/0:0-{len(its_lines)}"
        source = pack(batch, buckets_of(keys, BUCKETS), read)
        for bucket, records in zip(
            source.column("bucket").to_pylist(), source.column("records").to_pylist(), strict=True
        ):
            packs.setdefault(bucket, []).append(
                SimpleNamespace(bucket=bucket, records=records, read_range=read)
            )
    return packs


def _dropped(row: tuple[Any, ...]) -> None:
    """Where a writing operator's rows go: nowhere."""


class _Clock:
    """A call's timer values, as Spark hands them to a call."""

    def getCurrentProcessingTimeInMs(self) -> int:  # noqa: N802 - Spark's name
        return NOW


if __name__ == "__main__":
    main()
