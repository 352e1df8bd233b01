"""The operators of a chain, called in turn in this process, as Spark chains them in a query.

Each micro-batch's packs go through the stages' operators and the numbering one; what each
hands on is grouped by bucket for the next, as Spark's shuffle does (one state bucket here,
so one call per operator and batch, on the in-memory state handle of processor_calls). The
last operator's output must equal the plain replay of the chain
(tests/unit/joiners/chain_replay.py) for any cut into micro-batches; its dead letters hold
the stream record a refused partial carries.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pyarrow as pa
import pytest

from daemon.errors import SchemaRegistryUnavailableError
from daemon.formats.avro.codec import AvroCodec, load_schema_file
from daemon.joiners.aggregate import RETRACTIONS
from daemon.joiners.lookup import LookupOptions
from daemon.joiners.lookup_chain import ChainTable
from daemon.joiners.lookup_tables import LookupOfTables
from daemon.model.keys import join_key
from daemon.model.record_route import bucket_labels
from daemon.model.wire import INPUT, OUTPUT, pack
from daemon.operator.chain_processor import ChainProcessor, ChainStep
from daemon.operator.spec import OperatorPlan
from daemon.plugin.configured import configure
from daemon.sink.spec import OutputSpec
from daemon.testing import by_key
from tests.unit.joiners.chain_replay import ChainStream, run_chain
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
LOOKUP_KEYS = {
    "customers": "order.customer_id",
    "regions": "customer.region_id",
    "products": "order.product_id",
}


def _codec(name: str) -> AvroCodec:
    return AvroCodec(load_schema_file(ROOT / "schemas" / f"{name}.avsc"))


def _operators(
    options: dict[str, Any], aggregate: dict[str, Any] | None = None
) -> list[ChainProcessor]:
    """The chain's operators, in query order, each on its own state handle.

    ``options``: each table's; ``aggregate``: the lookup's running totals, whose retractions
    the writing operator writes to ``out.retractions``.
    """
    tables = [{"input": role, "lookup_key": LOOKUP_KEYS[role], **options} for role in ROLES[1:]]
    whole: dict[str, Any] = {"tables": tables}
    outputs = None
    if aggregate is not None:
        whole["aggregate"] = aggregate
        outputs = {RETRACTIONS: ("out.retractions", _codec("order_three_tables"))}
    joiner = configure(LookupOfTables, whole, pipeline="p", fields=FIELDS, output_fields=())
    chain = joiner.chain()
    assert chain is not None
    joiners = [stage.joiner for stage in chain.stages] + [chain.last] * (chain.last is not None)
    operators = []
    for index, stage_joiner in enumerate(joiners):
        plan = OperatorPlan(
            joiner=stage_joiner,
            codecs={role: _codec(SCHEMAS[role]) for role in ROLES},
            output_codec=_codec("order_three_tables"),
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


def _source_pack(lines: list[tuple[str, int, dict[str, Any]]]) -> Any:
    """One micro-batch's records (role, offset, line) as the source packs them (one bucket)."""
    rows = []
    for role, offset, line in lines:
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
                "value": _codec(SCHEMAS[role]).encode(value),
                "error": None,
                "headers": None,
            }
        )
    batch = pa.RecordBatch.from_pylist(rows, schema=INPUT.arrow)
    blob = pack(batch, [LABEL] * len(rows)).column("records")[0].as_py()
    return SimpleNamespace(records=blob, read_range=f"all/0:0-{len(rows)}")


def _run(
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
        packs = [_source_pack([(r, o, line) for _, _, o, r, line in arrival[start : start + size]])]
        for operator in operators[:-1]:
            packs = list(operator.handleInputRows((LABEL,), iter(packs), Clock()))
            assert {row.bucket for row in packs} == {LABEL}  # one state bucket
        operators[-1]._input_rows((LABEL,), iter(packs), Clock(), written.append)
    return written


def _inputs() -> dict[str, list[dict[str, Any]]]:
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


def _outputs(written: list[tuple[Any, ...]], topic: str = "out") -> list[dict[str, Any]]:
    codec = _codec("order_three_tables")
    out = OUTPUT.position
    return [
        {"key": row[out("key")].decode(), "value": codec.decode(row[out("value")])}
        for row in written
        if row[out("topic")] == topic
    ]


@pytest.mark.parametrize("max_batch", [None, 1, 2, 5])
def test_the_operators_in_turn_write_what_the_plain_chain_writes(max_batch: int | None) -> None:
    inputs = _inputs()
    options = LookupOptions(versioned=True, revisions=True)
    tables = [ChainTable(role, FIELDS[role], LOOKUP_KEYS[role], options) for role in ROLES[1:]]
    plain = run_chain(
        ChainStream("stream", "order", "at"),
        tables,
        inputs,
        row_keys={role: "id" for role in ROLES[1:]},
        times=TIMES,
    )
    assert len(plain.outputs) == 6  # three answers and a revision by a row of each table

    operators = _operators({"versioned": True, "revisions": True})
    written = _run(operators, inputs, max_batch)

    assert by_key(_outputs(written)) == by_key(plain.outputs)
    assert _outputs(written, "out.dlq") == []
    # Every stage's counts reach the writing operator, named as the plain replay names them.
    assert operators[-1].merged_metrics() == plain.metrics


def test_a_partial_refused_late_at_a_later_stage_dead_letters_the_stream_record() -> None:
    inputs = _inputs()
    # A region row far ahead of o-3 makes o-3 too old at the region stage, and north's own
    # late row too; Ada's later move to the south revises o-3 at the customer stage, and the
    # revision, keyed by south, is answered there.
    inputs["regions"].append(
        {
            "key": "north",
            "value": {"id": "north", "name": "North", "manager": "Kim", "since": 900_000},
            "timestamp": 2_500,
        }
    )
    options = LookupOptions(versioned=True, revisions=True, history_retention=1_000)
    tables = [ChainTable(role, FIELDS[role], LOOKUP_KEYS[role], options) for role in ROLES[1:]]
    plain = run_chain(
        ChainStream("stream", "order", "at"),
        tables,
        inputs,
        row_keys={role: "id" for role in ROLES[1:]},
        times=TIMES,
    )
    assert sorted((d.kind, d.record.role, d.record.event_time) for d in plain.dead_letters) == [
        ("LateRecord", "stream", 3000),
        ("LateRecord", "table", 1500),
    ]

    written = _run(
        _operators({"versioned": True, "revisions": True, "history_retention": "1s"}),
        inputs,
        None,
    )

    at = OUTPUT.position
    dead = sorted(
        (row[at("source_topic")], row[at("source_offset")], row[at("error_class")], row)
        for row in written
        if row[at("topic")] == "out.dlq"
    )
    assert [found[:3] for found in dead] == [
        ("regions-topic", 2, "LateRecord"),
        ("stream-topic", 2, "LateRecord"),
    ]
    letter = dead[1][3]
    assert _codec("shop_order").decode(letter[at("value")])["id"] == "o-3"
    assert by_key(_outputs(written)) == by_key(plain.outputs)


def test_a_registry_outage_at_a_stage_fails_the_call_instead_of_dead_lettering() -> None:
    """A table row a stage cannot decode because the registry is down is a good record: the
    batch fails and is retried, as in a one-table pipeline, and nothing is dead-lettered."""
    operators = _operators({"versioned": True, "revisions": True})
    region_stage = operators[1]

    def unavailable(value: bytes) -> Any:
        raise SchemaRegistryUnavailableError("schema registry http://registry answered 503")

    decoders = list(region_stage._decoders)
    decoders[ROLES.index("regions")] = unavailable
    region_stage._decoders = tuple(decoders)
    with pytest.raises(SchemaRegistryUnavailableError):
        _run(operators, _inputs(), None)


def test_an_inner_stage_without_a_row_withdraws_through_the_operators() -> None:
    # Bob has no customer row: the customers stage withdraws his order (and tells the
    # numbering what it keeps), which the operators hand on as the plain replay does.
    inputs = _inputs()
    inputs["customers"] = [line for line in inputs["customers"] if line["key"] != "bob"]
    options = LookupOptions(versioned=True, revisions=True)
    tables = [ChainTable(role, FIELDS[role], LOOKUP_KEYS[role], options) for role in ROLES[1:]]
    plain = run_chain(
        ChainStream("stream", "order", "at"),
        tables,
        inputs,
        row_keys={role: "id" for role in ROLES[1:]},
        times=TIMES,
    )
    assert plain.metrics["customers.unmatched"] == 1

    for max_batch in (None, 1):
        written = _run(_operators({"versioned": True, "revisions": True}), inputs, max_batch)
        assert _outputs(written, "out.dlq") == []
        assert by_key(_outputs(written)) == by_key(plain.outputs)
        assert "o-2" not in by_key(_outputs(written))


@pytest.mark.parametrize("max_batch", [None, 1])
def test_with_running_totals_the_writing_operator_retracts_what_each_revision_replaces(
    max_batch: int | None,
) -> None:
    # The example's revisions: o-3 by north's new manager, then by Ada's move south, and o-1
    # by the lamp's new price. Each replaced answer goes to the retractions first.
    inputs = _inputs()
    options = LookupOptions(versioned=True, revisions=True)
    tables = [ChainTable(role, FIELDS[role], LOOKUP_KEYS[role], options) for role in ROLES[1:]]
    plain = run_chain(
        ChainStream("stream", "order", "at"),
        tables,
        inputs,
        row_keys={role: "id" for role in ROLES[1:]},
        times=TIMES,
        retractions=True,
    )
    retracted = [out for out in plain.outputs if out.output == RETRACTIONS]
    assert len(retracted) == 3

    operators = _operators(
        {"versioned": True, "revisions": True},
        aggregate={"group_by": "region.name", "op": "sum", "field": "order.quantity"},
    )
    written = _run(operators, inputs, max_batch)

    assert by_key(_outputs(written)) == by_key(o for o in plain.outputs if o.output is None)
    assert by_key(_outputs(written, "out.retractions")) == by_key(retracted)
    assert sorted(
        (v["order"]["id"], v["region"]["manager"], v["revision"])
        for v in (r["value"] for r in _outputs(written, "out.retractions"))
    ) == [("o-1", "Mia", 0), ("o-3", "Mia", 0), ("o-3", "Noor", 1)]
