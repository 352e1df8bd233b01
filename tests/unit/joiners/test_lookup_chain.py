"""``lookup`` of several tables, in plain Python: an order, its customer, her region, its product.

Orders carry when they were placed (``at``); table rows when they take effect (``since``);
the Kafka timestamp is when a record arrived, so a test can deliver any table's row after the
orders it concerns. The hypothesis tests check the chain (:mod:`daemon.joiners.lookup_chain`,
replayed by :func:`tests.unit.joiners.chain_replay.run_chain`) against a batch as-of join of
the three tables written here, and against today's one-table ``lookup`` where the chain has
one table.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from daemon.errors import ConfigError
from daemon.joiners.aggregate import RETRACTIONS, Aggregate, AggregateOptions
from daemon.joiners.lookup import Lookup, LookupOptions
from daemon.joiners.lookup_chain import END_RANK, ChainTable, LookupChain, meta, plan_chain
from daemon.plugin.joiner import (
    END_OF_TIME,
    JOINED,
    RETRACTED,
    Chain,
    Emit,
    InputRecord,
    JoinerContext,
)
from daemon.testing import by_key, run_joiner
from tests.unit.joiners.chain_replay import ChainRun, ChainStream, run_chain

STREAM = ChainStream("orders", "order", "at")
ROW_KEYS = {"customers": "id", "regions": "id", "products": "id"}
TIMES = {"customers": "since", "regions": "since", "products": "since"}
ABSENT = "absent"
"""An order's answer in inner mode when nothing (or a tombstone) is its latest output."""


def order(oid: str, customer: str, product: str, at: int, arrival: int) -> dict[str, Any]:
    value = {"id": oid, "customer_id": customer, "product_id": product, "at": at}
    return {"key": oid, "value": value, "timestamp": arrival}


def row(key: str, since: int, arrival: int, **fields: Any) -> dict[str, Any]:
    """A table row valid from ``since``; no fields: a tombstone (its time is ``arrival``)."""
    value = {"id": key, "since": since, **fields} if fields else None
    return {"key": key, "value": value, "timestamp": arrival}


def tables(**options: Any) -> list[ChainTable]:
    """orders -> customers -> regions (the customer's region), orders -> products.

    Regions come first in the list, to show that the chain orders tables by what their keys
    read, not as written.
    """
    shared = LookupOptions(**options)
    return [
        ChainTable("regions", "region", "customer.region_id", shared),
        ChainTable("customers", "customer", "order.customer_id", shared),
        ChainTable("products", "product", "order.product_id", shared),
    ]


def chain(inputs: Mapping[str, Sequence[dict[str, Any]]], **kw: Any) -> ChainRun:
    options = kw.pop("options", {"versioned": True, "revisions": True})
    return run_chain(STREAM, tables(**options), inputs, row_keys=ROW_KEYS, times=TIMES, **kw)


def outputs(run: ChainRun) -> list[tuple[bytes | str | None, Any]]:
    return [(out.key, out.value) for out in run.outputs if out.output is None]


def latest(run: ChainRun) -> dict[str, Any]:
    """Each order's latest answer, without its revision number; ABSENT for a tombstone."""
    return {key: unnumbered(values[-1]) or ABSENT for key, values in answers(run).items()}


def answers(run: ChainRun) -> dict[str, list[Any]]:
    """The main output's values per order, in order."""
    return by_key(out for out in run.outputs if out.output is None)


def unnumbered(value: dict[str, Any] | None) -> dict[str, Any] | None:
    """An answer without its revision number."""
    return None if value is None else {k: v for k, v in value.items() if k != "revision"}


# -- the plan -------------------------------------------------------------------------------


def test_tables_are_staged_after_the_tables_their_keys_read() -> None:
    planned = plan_chain("order", tables())
    # Each round takes the first table, as written, whose key reads only known fields.
    assert [table.role for table in planned] == ["customers", "regions", "products"]


def test_a_key_that_reads_no_known_field_or_a_cycle_is_refused() -> None:
    plain = LookupOptions()
    with pytest.raises(ConfigError, match="neither the stream's field 'order' nor a table's"):
        plan_chain("order", [ChainTable("regions", "region", "custmer.region_id", plain)])
    with pytest.raises(ConfigError, match="in a cycle"):
        plan_chain(
            "order",
            [
                ChainTable("a", "a", "b.id", plain),
                ChainTable("b", "b", "a.id", plain),
            ],
        )
    with pytest.raises(ConfigError, match="`aggregate` is the whole lookup's"):
        plan_chain(
            "order",
            [ChainTable("a", "a", "order.id", LookupOptions(aggregate={"group_by": "a.x"}))],
        )


# -- examples -------------------------------------------------------------------------------


INPUTS = {
    "orders": [order("o1", "c1", "p1", 20, 5)],
    "customers": [row("c1", 10, 1, region_id="r1"), row("c1", 15, 8, region_id="r2")],
    "regions": [row("r1", 0, 2, name="north"), row("r2", 0, 9, name="south")],
    "products": [row("p1", 0, 3, name="pen")],
}


def test_an_order_gets_its_customer_her_region_and_its_product() -> None:
    run = chain(
        {**INPUTS, "customers": INPUTS["customers"][:1]},
        options={},  # the latest value, no revisions
    )
    assert outputs(run) == [
        (
            b"o1",
            {
                "order": INPUTS["orders"][0]["value"],
                "customer": INPUTS["customers"][0]["value"],
                "region": INPUTS["regions"][0]["value"],
                "product": INPUTS["products"][0]["value"],
            },
        )
    ]


def test_a_late_customer_row_moves_the_order_to_her_new_region_once_it_is_known() -> None:
    # The customer moved to r2 from 15 (before the order at 20), which arrives at 8, after
    # the order's answer; r2 itself arrives at 9. Inner mode: withdrawn until r2 is known.
    run = chain(INPUTS, retractions=True)
    written = [
        (out.output, out.value and (out.value["region"]["name"], out.value["revision"]))
        for out in run.outputs
    ]
    assert written == [
        (None, ("north", 0)),
        (RETRACTIONS, ("north", 0)),
        (None, None),  # withdrawn: r2 is unknown when the customer row arrives
        (None, ("south", 2)),
    ]
    assert run.metrics["revisions"] == 2
    assert run.metrics["customers.revisions"] == 1
    assert run.numbered == 0  # the end of input: nothing can revise the order any more


def test_a_late_row_of_a_region_the_order_has_left_revises_nothing() -> None:
    # r1's late row (valid from 0, arriving at 12) changes the answer the order had before
    # its customer moved to r2: that answer is replaced, so the row's revision of it is stale.
    inputs = {
        **INPUTS,
        "regions": [*INPUTS["regions"], row("r1", 0, 12, name="north-west")],
    }
    run = chain(inputs)
    assert [value and value["region"]["name"] for _, value in outputs(run)] == [
        "north",
        None,
        "south",
    ]
    assert run.metrics["stale"] == 1
    # Two revisions at the regions' stage: r2's row answering the order that waited there,
    # and r1's late row, whose revision the numbering drops.
    assert run.metrics["regions.revisions"] == 2


def test_the_numbering_forgets_an_order_once_every_stage_has_dropped_it() -> None:
    # A retention of 8 ms: each order moves the stream time of its customer, region and
    # product 20 ms on, so every stage drops the order before it (nothing can revise that
    # one any more), and the numbering forgets it, long before the end of input.
    inputs = {
        "orders": [order(f"o{n}", "c1", "p1", 10 + 20 * n, 5 + n) for n in range(4)],
        "customers": [row("c1", 0, 1, region_id="r1")],
        "regions": [row("r1", 0, 2, name="north")],
        "products": [row("p1", 0, 3, name="pen")],
    }
    options = {"versioned": True, "revisions": True, "history_retention": 8}
    run = chain(inputs, options=options, max_batch=1, end=False)
    assert run.numbered_after == [0, 0, 0, 1, 1, 1, 1]  # never more than the latest order
    # Forgetting changes no output: each order once, as with a retention that keeps all.
    kept_all = chain(inputs, options={"versioned": True, "revisions": True}, max_batch=1)
    assert outputs(run) == outputs(kept_all)
    assert [value["revision"] for _, value in outputs(run)] == [0, 0, 0, 0]
    assert kept_all.numbered_after[-2] == 4  # kept for revisions until the end of input
    assert kept_all.numbered == 0


def test_a_numbering_entry_lives_while_any_stage_holds_or_keeps_its_order() -> None:
    # The products stage holds the order for its grace while the others keep it answered.
    # The numbering counts them all and forgets it only when the last lets go.
    products = LookupOptions(versioned=True, revisions=True, grace=30)
    inputs = {
        "orders": [order("o1", "c1", "p1", 20, 5), order("o2", "c1", "p1", 60, 6)],
        "customers": [row("c1", 0, 1, region_id="r1")],
        "regions": [row("r1", 0, 2, name="north")],
        "products": [row("p1", 0, 3, name="pen")],
    }
    revising = LookupOptions(versioned=True, revisions=True, history_retention=8)
    run = run_chain(
        STREAM,
        [
            ChainTable("customers", "customer", "order.customer_id", revising),
            ChainTable("regions", "region", "customer.region_id", revising),
            ChainTable("products", "product", "order.product_id", products),
        ],
        inputs,
        row_keys=ROW_KEYS,
        times=TIMES,
        max_batch=1,
        end=False,
    )
    # o1 is held at products (grace 30) until o2 moves p1's stream time to 60; o2 then
    # lets o1 out, and is held itself. The customers and regions stages drop o1 when o2
    # reaches them (older than 60 - 8), but products still keeps o1 (retention 1 h).
    assert outputs(run) == [(b"o1", unnumbered_answer(inputs, "o1"))]
    assert run.numbered_after == [0, 0, 0, 1, 2]


def unnumbered_answer(inputs: Mapping[str, Sequence[dict[str, Any]]], oid: str) -> Any:
    """The order's as-of answer, numbered 0."""
    answer = model(inputs, "inner")[oid]
    return {**answer, "revision": 0}


def test_a_row_that_changes_a_deeper_table_revises_each_order_it_changes_once() -> None:
    inputs = {
        "orders": [order("o1", "c1", "p1", 20, 5), order("o2", "c2", "p1", 21, 6)],
        "customers": [row("c1", 0, 1, region_id="r1"), row("c2", 0, 1, region_id="r1")],
        "regions": [row("r1", 0, 2, name="north"), row("r1", 18, 9, name="south")],
        "products": [row("p1", 0, 3, name="pen")],
    }
    run = chain(inputs)
    regions = {
        key: [(value["region"]["name"], value["revision"]) for value in values]
        for key, values in answers(run).items()
    }
    assert regions == {"o1": [("north", 0), ("south", 1)], "o2": [("north", 0), ("south", 1)]}
    assert run.metrics["revisions"] == 2


def test_left_mode_passes_an_order_on_without_a_row_and_its_region_without_a_key() -> None:
    run = chain(
        {"orders": [order("o1", "c9", "p1", 20, 5)], "products": [row("p1", 0, 1, name="pen")]},
        options={"mode": "left"},
    )
    [(_, value)] = outputs(run)
    assert value["customer"] is None and value["region"] is None
    assert value["product"]["name"] == "pen"


def test_a_table_with_a_composite_key_is_looked_up_by_several_paths() -> None:
    # Customers are keyed by tenant and id; an order names both, its customer's row the same
    # id under another tenant is not hers.
    customers = ChainTable(
        "customers", "customer", ("order.tenant", "order.customer_id"), LookupOptions()
    )
    orders = [order("o1", "c1", "p1", 20, 5), order("o2", "c1", "p1", 20, 6)]
    orders[0]["value"]["tenant"], orders[1]["value"]["tenant"] = "acme", "initech"
    run = run_chain(
        STREAM,
        [customers],
        {
            "orders": orders,
            "customers": [
                row("c1", 0, 1, tenant="acme", name="Ada"),
                row("c1", 0, 2, tenant="initech", name="Bob"),
            ],
        },
        row_keys={"customers": ["tenant", "id"]},
    )
    assert [(key, value["customer"]["name"]) for key, value in outputs(run)] == [
        (b"o1", "Ada"),
        (b"o2", "Bob"),
    ]


# -- against a plain model ------------------------------------------------------------------


def as_of(rows: Sequence[dict[str, Any]], key: str, at: int) -> dict[str, Any] | None:
    """The row of ``key`` valid at ``at``: the latest at or before it, of ties the last in.

    ``rows`` is one table's input in arrival order; a tombstone's time is its arrival.
    """
    best: tuple[int, int] | None = None
    found: dict[str, Any] | None = None
    for index, line in enumerate(rows):
        if line["key"] != key:
            continue
        since = line["timestamp"] if line["value"] is None else line["value"]["since"]
        if since <= at and (best is None or (since, index) >= best):
            best, found = (since, index), line["value"]
    return found


def model(inputs: Mapping[str, Sequence[dict[str, Any]]], mode: str) -> dict[str, Any]:
    """The batch as-of join of the three tables, per order id (inner: ABSENT when any lacks)."""
    arrived = {
        role: sorted(lines, key=lambda line: line["timestamp"])  # stable: file order on ties
        for role, lines in inputs.items()
    }
    answers: dict[str, Any] = {}
    for line in inputs["orders"]:
        value = line["value"]
        at = value["at"]
        customer = as_of(arrived["customers"], value["customer_id"], at)
        region = None if customer is None else as_of(arrived["regions"], customer["region_id"], at)
        product = as_of(arrived["products"], value["product_id"], at)
        if mode == "inner" and None in (customer, region, product):
            answers[line["key"]] = ABSENT
            continue
        answers[line["key"]] = {
            "order": value,
            "customer": customer,
            "region": region,
            "product": product,
        }
    return answers


def table_rows(keys: Sequence[str], **fields: Any) -> st.SearchStrategy[list[dict[str, Any]]]:
    """Rows (and tombstones) of a few keys, valid from any time, arriving at any time."""
    one = st.builds(
        lambda key, since, arrival, value: row(key, since, arrival, **value),
        st.sampled_from(keys),
        st.integers(0, 25),  # mostly valid at an order's time (10 to 40)
        st.integers(1, 60),
        # About one row in eight a tombstone: a tombstone's time is its arrival, so it
        # often ends every version an order could find.
        st.integers(0, 7).flatmap(lambda n: st.fixed_dictionaries(fields if n else {})),
    )
    return st.lists(one, min_size=2, max_size=6)


ORDERS = st.lists(
    st.tuples(
        st.sampled_from(["c1", "c2"]),
        st.sampled_from(["p1", "p2"]),
        st.integers(10, 40),
        st.integers(1, 60),
    ),
    min_size=1,
    max_size=6,
).map(lambda specs: [order(f"o{i}", c, p, at, t) for i, (c, p, at, t) in enumerate(specs)])

INPUT_SETS = st.fixed_dictionaries(
    {
        "orders": ORDERS,
        "customers": table_rows(["c1", "c2"], region_id=st.sampled_from(["r1", "r2"])),
        "regions": table_rows(["r1", "r2"], name=st.sampled_from(["north", "south"])),
        "products": table_rows(["p1", "p2"], name=st.sampled_from(["pen", "ink"])),
    }
)


def revisions_are_numbered_and_each_changes_the_answer(run: ChainRun) -> None:
    for key, values in answers(run).items():
        numbers = [value["revision"] for value in values if value is not None]
        assert numbers == sorted(set(numbers)), (key, numbers)
        plain = [unnumbered(value) for value in values]
        assert all(a != b for a, b in zip(plain, plain[1:], strict=False)), (key, plain)


@settings(max_examples=150, deadline=None)
@given(
    inputs=INPUT_SETS,
    mode=st.sampled_from(["inner", "left"]),
    grace=st.sampled_from([0, 7]),
)
def test_the_latest_answer_is_the_as_of_join_of_every_table_for_any_micro_batching(
    inputs: dict[str, list[dict[str, Any]]], mode: str, grace: int
) -> None:
    options = {"versioned": True, "revisions": True, "mode": mode, "grace": grace}
    whole = chain(inputs, options=options)
    expected = model(inputs, mode)
    found = latest(whole)
    assert {key: found.get(key, ABSENT) for key in expected} == expected
    revisions_are_numbered_and_each_changes_the_answer(whole)
    assert not whole.dead_letters
    assert whole.numbered == 0  # the end of input for every key: nothing left to revise
    for max_batch in (1, 2, 3):
        cut = chain(inputs, options=options, max_batch=max_batch)
        assert per_output(cut.outputs) == per_output(whole.outputs)
        assert cut.numbered == 0


@settings(max_examples=100, deadline=None)
@given(inputs=INPUT_SETS, grace=st.sampled_from([0, 4]), max_batch=st.sampled_from([1, 2, 3]))
def test_records_later_than_the_retention_are_refused_alike_for_any_micro_batching(
    inputs: dict[str, list[dict[str, Any]]], grace: int, max_batch: int
) -> None:
    # A retention of 8 ms: a row (or an order, at any stage) more than 8 behind its key's
    # stream time is a dead letter, at the same stage, whatever the cuts.
    options = {"versioned": True, "revisions": True, "history_retention": 8, "grace": grace}
    whole = chain(inputs, options=options)
    cut = chain(inputs, options=options, max_batch=max_batch)
    assert per_output(cut.outputs) == per_output(whole.outputs)
    assert refused(cut) == refused(whole)
    # A partial refused at a later stage still tells the numbering what it carried.
    assert whole.numbered == cut.numbered == 0


def refused(run: ChainRun) -> list[tuple[str, str, Any]]:
    """Each dead letter's kind and record: a table row's input and offset, an order's id."""
    found = []
    for dead in run.dead_letters:
        record = dead.record
        which = meta(record)["id"] if record.role == "stream" else (record.topic, record.offset)
        found.append((dead.kind, record.role, which))
    return sorted(found, key=repr)


def revision_log(inputs: Mapping[str, Sequence[dict[str, Any]]], mode: str) -> dict[str, Any]:
    """What each record, in arrival order, changes: per order, every answer it had, numbered.

    After each input record, each order that has arrived is joined as of its time with the
    rows that have arrived; an answer that differs from the last one written is written with
    the next number (in inner mode a lost answer as a tombstone, None, which takes a number).
    """
    # Ties of timestamp: the stream first, then the tables as the pipeline lists them.
    roles = ["orders", *(table.role for table in tables())]
    arrival = sorted(
        (
            (line["timestamp"], rank, offset, role, line)
            for rank, role in enumerate(roles)
            for offset, line in enumerate(inputs[role])
        ),
        key=lambda item: item[:3],
    )
    written: dict[str, list[Any]] = {}
    last: dict[str, Any] = {}
    for end in range(1, len(arrival) + 1):
        arrived = {role: [item[4] for item in arrival[:end] if item[3] == role] for role in roles}
        for key, answer in model(arrived, mode).items():
            answer = None if answer == ABSENT else answer
            if answer != last.get(key):
                log = written.setdefault(key, [])
                log.append(answer and {**answer, "revision": len(log)})
                last[key] = answer
    return written


@settings(max_examples=150, deadline=None)
@given(
    inputs=INPUT_SETS,
    mode=st.sampled_from(["inner", "left"]),
    max_batch=st.sampled_from([1, 2, None]),
)
def test_each_record_revises_exactly_the_answers_it_changes_once(
    inputs: dict[str, list[dict[str, Any]]], mode: str, max_batch: int | None
) -> None:
    run = chain(
        inputs, options={"versioned": True, "revisions": True, "mode": mode}, max_batch=max_batch
    )
    assert answers(run) == revision_log(inputs, mode)


@settings(max_examples=100, deadline=None)
@given(inputs=INPUT_SETS, max_batch=st.sampled_from([1, 2, None]))
def test_the_latest_value_joins_each_order_once_with_the_rows_in_before_it(
    inputs: dict[str, list[dict[str, Any]]], max_batch: int | None
) -> None:
    # Without versioned, a row is valid from its arrival: the model's as-of join over
    # arrival times, each order answered once, inner orders without a row not at all. Orders
    # arrive at even times, rows at odd ones, so that no order ties with a row (an order
    # applies before a row of its timestamp, and would not see it).
    by_arrival = {
        role: [arriving(line, 2 * line["timestamp"] + (role != "orders")) for line in lines]
        for role, lines in inputs.items()
    }
    run = chain(by_arrival, options={}, max_batch=max_batch)
    expected = {k: v for k, v in model(by_arrival, "inner").items() if v != ABSENT}
    assert dict(outputs_by_key(run)) == expected


def arriving(line: dict[str, Any], timestamp: int) -> dict[str, Any]:
    """The line arriving at ``timestamp``, its event time (``at`` or ``since``) the same."""
    value = line["value"]
    if value is not None:
        value = {**value, ("at" if "at" in value else "since"): timestamp}
    return {**line, "value": value, "timestamp": timestamp}


def outputs_by_key(run: ChainRun) -> list[tuple[str, Any]]:
    found = []
    for out in run.outputs:
        assert isinstance(out.key, bytes)
        found.append((out.key.decode(), out.value))
    assert len({key for key, _ in found}) == len(found), "an order was answered twice"
    return found


@settings(max_examples=100, deadline=None)
@given(inputs=INPUT_SETS, max_batch=st.sampled_from([1, 3, None]))
def test_running_totals_count_each_order_once_in_the_region_of_its_latest_answer(
    inputs: dict[str, list[dict[str, Any]]], max_batch: int | None
) -> None:
    run = chain(inputs, max_batch=max_batch, retractions=True)
    stage = Aggregate(
        AggregateOptions(group_by="region.name"), JoinerContext("chain", {"joined": "joined"})
    )
    totals: dict[str, int] = {}
    for out in run.outputs:  # the final totals do not depend on the order groups apply in
        if out.value is None:
            continue  # a withdrawn answer: its retraction takes it back
        role = RETRACTED if out.output == RETRACTIONS else JOINED
        group = out.value["region"]["name"]
        record = InputRecord(role, group, out.value, 0, "", 0, 0)
        state = {"total": totals[group]} if group in totals else {}
        for total in stage.process(group, state, [record], stage.context):
            assert isinstance(total, Emit) and total.value is not None
            totals[group] = total.value["count"]
    expected = Counter(
        answer["region"]["name"] for answer in model(inputs, "inner").values() if answer != ABSENT
    )
    assert {group: n for group, n in totals.items() if n} == dict(expected)


# -- one table: as today's lookup -----------------------------------------------------------


@settings(max_examples=100, deadline=None)
@given(
    inputs=INPUT_SETS,
    mode=st.sampled_from(["inner", "left"]),
    grace=st.sampled_from([0, 7]),
    max_batch=st.sampled_from([1, 3, None]),
)
def test_a_chain_of_one_table_writes_what_the_one_table_lookup_writes(
    inputs: dict[str, list[dict[str, Any]]], mode: str, grace: int, max_batch: int | None
) -> None:
    options = {"versioned": True, "revisions": True, "mode": mode, "grace": grace}
    table = ChainTable("customers", "customer", "order.customer_id", LookupOptions(**options))
    run = run_chain(
        STREAM,
        [table],
        {"orders": inputs["orders"], "customers": inputs["customers"]},
        row_keys=ROW_KEYS,
        times=TIMES,
        max_batch=max_batch,
        retractions=True,
    )
    today = run_joiner(
        Lookup,
        {"stream": inputs["orders"], "table": inputs["customers"]},
        keys={"stream": "customer_id", "table": "id"},
        times={"stream": "at", "table": "since"},
        fields={"stream": "order", "table": "customer"},
        options={**options, "aggregate": {"group_by": "customer.region_id"}},
        batch_size=max_batch,
    )
    assert per_output(run.outputs) == per_output(today.outputs)


def per_output(emits: Sequence[Emit]) -> dict[tuple[str | None, Any], list[Any]]:
    """Each output's (main, retractions) values per Kafka key, in order."""
    found: dict[tuple[str | None, Any], list[Any]] = {}
    for out in emits:
        if out.output in (None, RETRACTIONS):
            found.setdefault((out.output, out.key), []).append(out.value)
    return found


def test_a_partial_let_out_by_no_record_carries_its_stamp_through_later_stages() -> None:
    """Let out at a wake-up, an expiry or the end of input: never at the end of time."""
    left = LookupOptions(mode="left", versioned=True, grace=50)
    chain = LookupChain(
        "order",
        [
            ChainTable("customers", "customer", "order.customer_id", left),
            ChainTable("products", "product", "order.product_id", LookupOptions(mode="left")),
        ],
        {"stream": 0, "customers": 1, "products": 2},
        "p",
    )
    customers, products = (stage.joiner for stage in chain.stages)
    value = {"id": "o1", "customer_id": "c1", "product_id": "p1", "at": 100}
    held = customers.initial_state()
    order_record = InputRecord("stream", "c1", value, 100, "orders", 0, 3, b"o1", 7)
    assert [e for e in customers.process("c1", held, [chain.enter(order_record)], customers.context)
            if e.output is None] == []  # fmt: skip
    (let_out,) = (e for e in customers.advance("c1", held, END_OF_TIME, customers.context)
                  if e.output is None)  # fmt: skip

    # Unstamped (a wake-up): written at the time it is written, not at the end of time.
    assert let_out.source is None and chain.passed(let_out).timestamp == 0
    # Stamped with its end-of-input marker's time, it keeps it at the next stage.
    partial = replace(chain.passed(chain.let_out(let_out, 42)), key="p1")
    (answer,) = products.process("p1", products.initial_state(), [partial], products.context)
    assert isinstance(answer, Emit) and chain.passed(answer).timestamp == 42
    assert tuple(meta(chain.passed(answer))["rank"]) == END_RANK


def test_a_stream_records_output_base_is_what_the_chain_would_output_of_it_unanswered() -> None:
    """``LookupChain.output_base`` skips the record so far; ``Chain``'s default makes one."""
    plain = LookupOptions(mode="left")
    chain = LookupChain(
        "order",
        [ChainTable("customers", "customer", "order.customer_id", plain)],
        {"stream": 0, "customers": 1},
        "p",
    )
    value = {"id": "o1", "customer_id": "c1", "product_id": "p1", "at": 100}
    order_record = InputRecord("stream", "c1", value, 100, "orders", 0, 3, b"o1", 7)
    assert chain.output_base(order_record) == {"order": value}
    assert Chain.output_base(chain, order_record) == {"order": value}
