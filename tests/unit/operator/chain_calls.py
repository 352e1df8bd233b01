"""A chain's operators called in turn in this process, as Spark chains them in a query.

What the chain operator tests share: the operators of the three-table example
(examples/orders-three-tables.toml) on in-memory state handles (processor_calls), its
recorded inputs, packs of one state bucket as the source makes them, and what the writing
operator writes, decoded.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pyarrow as pa

from daemon.formats.avro.codec import AvroCodec, load_schema_file
from daemon.joiners.aggregate import RETRACTIONS
from daemon.joiners.lookup_tables import LookupOfTables
from daemon.model.keys import join_key
from daemon.model.record_route import bucket_labels
from daemon.model.wire import CONTROL_INPUT, INPUT, OUTPUT, pack
from daemon.operator.chain_processor import ChainProcessor
from daemon.operator.chain_step import ChainStep
from daemon.operator.spec import OperatorPlan
from daemon.plugin.configured import configure
from daemon.sink.spec import OutputSpec
from tests.unit.operator.processor_calls import Clock, Handle

ROOT = Path(__file__).resolve().parents[3]
ROLES = ("stream", "customers", "regions", "products")
SCHEMAS = {
    "stream": "shop_order",
    "customers": "shop_customer",
    "regions": "shop_region",
    "products": "shop_product",
}
FIELDS = {"stream": "order", "customers": "customer", "regions": "region", "products": "product"}
KEYS = {"stream": "customer_id", "customers": "id", "regions": "id", "products": "id"}
TIMES = {"stream": "at", "customers": "since", "regions": "since", "products": "since"}
LABEL = bucket_labels(1)[0]
"""The one state bucket's label, as the source writes it."""
END = "end"
"""The role :func:`source_pack` takes for an end-of-input marker."""
LOOKUP_KEYS = {
    "customers": "order.customer_id",
    "regions": "customer.region_id",
    "products": "order.product_id",
}


def codec_of(name: str) -> AvroCodec:
    return AvroCodec(load_schema_file(ROOT / "schemas" / f"{name}.avsc"))


def chain_operators(
    options: dict[str, Any],
    aggregate: dict[str, Any] | None = None,
    each: dict[str, dict[str, Any]] | None = None,
    output: AvroCodec | None = None,
) -> list[ChainProcessor]:
    """The chain's operators, in query order, each on its own state handle.

    ``options``: each table's; ``aggregate``: the lookup's running totals, whose retractions
    the writing operator writes to ``out.retractions``; ``each``: more options of a table,
    by its input; ``output``: the output record's codec (the example's by default).
    """
    each = each or {}
    tables = [
        {"input": role, "lookup_key": LOOKUP_KEYS[role], **options, **each.get(role, {})}
        for role in ROLES[1:]
    ]
    whole: dict[str, Any] = {"tables": tables}
    outputs = None
    if aggregate is not None:
        whole["aggregate"] = aggregate
        outputs = {RETRACTIONS: ("out.retractions", codec_of("order_three_tables"))}
    joiner = configure(LookupOfTables, whole, pipeline="p", fields=FIELDS, output_fields=())
    chain = joiner.chain()
    assert chain is not None
    joiners = [stage.joiner for stage in chain.stages] + [chain.last] * (chain.last is not None)
    operators = []
    for index, stage_joiner in enumerate(joiners):
        plan = OperatorPlan(
            joiner=stage_joiner,
            codecs={role: codec_of(SCHEMAS[role]) for role in ROLES},
            output_codec=output or codec_of("order_three_tables"),
            output_topic="out",
            dead_letter_topic="out.dlq",
            plugin="enrichd",
            inputs=tuple((role, f"{role}-topic") for role in ROLES),
            outputs=outputs,
        )
        table = ROLES.index(chain.stages[index].table) if index < len(chain.stages) else None
        step = ChainStep(chain, index, 1, 0, table)
        processor = ChainProcessor(plan, OutputSpec("p", {}, "exactly_once", "out"), step)
        processor.init(Handle())  # type: ignore[arg-type]
        operators.append(processor)
    return operators


def source_pack(lines: Sequence[tuple[str, int, dict[str, Any]]]) -> Any:
    """One micro-batch's records (role, offset, line) as the source packs them (one bucket).

    Role ``end``: an end-of-input marker of the join key ``line["key"]``.
    """
    rows = []
    for role, offset, line in lines:
        if role == END:
            rows.append(_marker(line["key"], offset, line["timestamp"]))
            continue
        value = line["value"]
        rows.append(
            {
                "input": ROLES.index(role),
                "key": join_key([value[KEYS[role]]]),
                "event_time": value[TIMES[role]],
                "partition": 0,
                "offset": offset,
                "timestamp": line["timestamp"],
                "kafka_key": line["key"].encode(),
                "value": codec_of(SCHEMAS[role]).encode(value),
                "error": None,
                "headers": None,
            }
        )
    batch = pa.RecordBatch.from_pylist(rows, schema=INPUT.arrow)
    blob = pack(batch, [LABEL] * len(rows)).column("records")[0].as_py()
    return SimpleNamespace(records=blob, read_range=f"all/0:0-{len(rows)}")


def _marker(key: str, offset: int, timestamp: int) -> dict[str, Any]:
    """An end-of-input marker's row, as the source reads one."""
    return {
        "input": CONTROL_INPUT,
        "key": key,
        "event_time": timestamp,
        "partition": 0,
        "offset": offset,
        "timestamp": timestamp,
        "kafka_key": key.encode(),
        "value": None,
        "error": None,
        "headers": None,
    }


def run_timed(
    operators: list[ChainProcessor],
    batches: Sequence[tuple[int, Sequence[tuple[str, int, dict[str, Any]]]]],
) -> list[tuple[Any, ...]]:
    """Micro-batches at processing times through the operators in turn, firing their timers.

    Each of ``batches`` is its processing time and its records (role, offset, line; none: a
    micro-batch the planner's clock made). As in Spark, each operator takes the batch's rows
    first, then fires its timer if it is due by then, and the next operator takes both
    calls' rows. Returns what the last operator writes.
    """
    written: list[tuple[Any, ...]] = []
    for now, lines in batches:
        packs = [source_pack(lines)] if lines else []
        for operator in operators[:-1]:
            rows = (
                list(operator.handleInputRows((LABEL,), iter(packs), Clock(now))) if packs else []
            )
            if _due(operator, now):
                rows += operator.handleExpiredTimer((LABEL,), Clock(now), None)
            packs = rows
        last = operators[-1]
        if packs:
            last._input_rows((LABEL,), iter(packs), Clock(now), written.append)
        if _due(last, now):
            last._wake_up((LABEL,), Clock(now), written.append)
    return written


def _due(operator: ChainProcessor, now: int) -> bool:
    """Whether the operator's bucket has a timer due by ``now``; Spark then drops it."""
    handle = operator.handle
    active: list[int] = []
    for what, at in handle.timers:
        if what == "register":
            active.append(at)
        elif at in active:
            active.remove(at)
    due = [at for at in active if at <= now]
    handle.timers.extend(("delete", at) for at in due)
    return bool(due)


def run_batches(
    operators: list[ChainProcessor], inputs: dict[str, list[dict[str, Any]]], max_batch: int | None
) -> list[tuple[Any, ...]]:
    """Every micro-batch through the operators in turn; what the last one writes."""
    arrival = sorted(
        (line["timestamp"], ROLES.index(role), offset, role, line)
        for role, lines in inputs.items()
        for offset, line in enumerate(lines)
    )
    size = max_batch or len(arrival)
    written: list[tuple[Any, ...]] = []
    for start in range(0, len(arrival), size):
        packs = [source_pack([(r, o, line) for _, _, o, r, line in arrival[start : start + size]])]
        for operator in operators[:-1]:
            packs = list(operator.handleInputRows((LABEL,), iter(packs), Clock()))
            assert {row.bucket for row in packs} == {LABEL}  # one state bucket
        operators[-1]._input_rows((LABEL,), iter(packs), Clock(), written.append)
    return written


def example_inputs() -> dict[str, list[dict[str, Any]]]:
    """The example's recorded inputs: three orders revised by a late row of each table."""
    files = {"stream": "orders", "customers": "customers", "regions": "regions"}
    files["products"] = "products"
    return {
        role: [
            json.loads(line)
            for line in (ROOT / "examples" / "data" / f"shop-{name}.jsonl").read_text().splitlines()
        ]
        for role, name in files.items()
    }


def decoded_outputs(
    written: list[tuple[Any, ...]], topic: str = "out", codec: AvroCodec | None = None
) -> list[dict[str, Any]]:
    codec = codec or codec_of("order_three_tables")
    out = OUTPUT.position
    return [
        {"key": row[out("key")].decode(), "value": codec.decode(row[out("value")])}
        for row in written
        if row[out("topic")] == topic
    ]
