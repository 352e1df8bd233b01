"""The operators of a chain, called in turn in this process, as Spark chains them in a query.

Each micro-batch's packs go through the stages' operators and the numbering one; what each
hands on is grouped by bucket for the next, as Spark's shuffle does (one state bucket here,
so one call per operator and batch, on the in-memory state handle of processor_calls). The
last operator's output must equal the plain replay of the chain
(tests/unit/joiners/chain_replay.py) for any cut into micro-batches; its dead letters hold
the stream record a refused partial carries.
"""

from __future__ import annotations

from typing import Any

import pytest

from daemon.errors import SchemaRegistryUnavailableError
from daemon.joiners.aggregate import RETRACTIONS
from daemon.joiners.lookup import LookupOptions
from daemon.joiners.lookup_chain import ChainTable
from daemon.model.wire import OUTPUT
from daemon.testing import by_key
from tests.unit.joiners.chain_replay import ChainStream, run_chain
from tests.unit.operator.chain_calls import (
    FIELDS,
    LOOKUP_KEYS,
    ROLES,
    TIMES,
    chain_operators,
    codec_of,
    decoded_outputs,
    example_inputs,
    run_batches,
)


@pytest.mark.parametrize("max_batch", [None, 1, 2, 5])
def test_the_operators_in_turn_write_what_the_plain_chain_writes(max_batch: int | None) -> None:
    inputs = example_inputs()
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

    operators = chain_operators({"versioned": True, "revisions": True})
    written = run_batches(operators, inputs, max_batch)

    assert by_key(decoded_outputs(written)) == by_key(plain.outputs)
    assert decoded_outputs(written, "out.dlq") == []
    # Every stage's counts reach the writing operator, named as the plain replay names them.
    assert operators[-1].merged_metrics() == plain.metrics


def test_a_partial_refused_late_at_a_later_stage_dead_letters_the_stream_record() -> None:
    inputs = example_inputs()
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

    written = run_batches(
        chain_operators({"versioned": True, "revisions": True, "history_retention": "1s"}),
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
    assert codec_of("shop_order").decode(letter[at("value")])["id"] == "o-3"
    assert by_key(decoded_outputs(written)) == by_key(plain.outputs)


def test_a_registry_outage_at_a_stage_fails_the_call_instead_of_dead_lettering() -> None:
    """A table row a stage cannot decode because the registry is down is a good record: the
    batch fails and is retried, as in a one-table pipeline, and nothing is dead-lettered."""
    operators = chain_operators({"versioned": True, "revisions": True})
    region_stage = operators[1]

    def unavailable(value: bytes) -> Any:
        raise SchemaRegistryUnavailableError("schema registry http://registry answered 503")

    decoders = list(region_stage._decoders)
    decoders[ROLES.index("regions")] = unavailable
    region_stage._decoders = tuple(decoders)
    with pytest.raises(SchemaRegistryUnavailableError):
        run_batches(operators, example_inputs(), None)


def test_an_inner_stage_without_a_row_withdraws_through_the_operators() -> None:
    # Bob has no customer row: the customers stage withdraws his order (and tells the
    # numbering what it keeps), which the operators hand on as the plain replay does.
    inputs = example_inputs()
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
        written = run_batches(
            chain_operators({"versioned": True, "revisions": True}), inputs, max_batch
        )
        assert decoded_outputs(written, "out.dlq") == []
        assert by_key(decoded_outputs(written)) == by_key(plain.outputs)
        assert "o-2" not in by_key(decoded_outputs(written))


@pytest.mark.parametrize("max_batch", [None, 1])
def test_with_running_totals_the_writing_operator_retracts_what_each_revision_replaces(
    max_batch: int | None,
) -> None:
    # The example's revisions: o-3 by north's new manager, then by Ada's move south, and o-1
    # by the lamp's new price. Each replaced answer goes to the retractions first.
    inputs = example_inputs()
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

    operators = chain_operators(
        {"versioned": True, "revisions": True},
        aggregate={"group_by": "region.name", "op": "sum", "field": "order.quantity"},
    )
    written = run_batches(operators, inputs, max_batch)

    assert by_key(decoded_outputs(written)) == by_key(o for o in plain.outputs if o.output is None)
    assert by_key(decoded_outputs(written, "out.retractions")) == by_key(retracted)
    assert sorted(
        (v["order"]["id"], v["region"]["manager"], v["revision"])
        for v in (r["value"] for r in decoded_outputs(written, "out.retractions"))
    ) == [("o-1", "Mia", 0), ("o-3", "Mia", 0), ("o-3", "Noor", 1)]
