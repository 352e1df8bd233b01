"""A lease's operators of a chain: partials read on where they can, the same outputs either way.

:class:`LeaseOperators` runs a lookup of three plain tables' operators in one worker, so a
partial whose key at the next operator only reads a state the sub-batch does not change is
answered there at once (``ChainProcessor.read_on``), or at every stage and written
(``ChainProcessor._straight``). What the writing operator writes must
be what the operators write when every partial waits for the next one's call, as a
micro-batch query runs them (``run_batches``), for any cut of the arrivals into sub-batches,
with table rows arriving among the orders (some in the very sub-batch of orders that read
them).
"""

from __future__ import annotations

import json
import random
from types import SimpleNamespace
from typing import Any

import pytest

from daemon.continuous.held_buckets import HeldBuckets
from daemon.continuous.operators import LeaseOperators
from daemon.formats.avro.codec import AvroCodec, parse_schema_text
from daemon.operator import chain_processor
from daemon.operator.chain_processor import ChainProcessor
from daemon.testing import by_key
from tests.unit.operator.chain_calls import (
    LABEL,
    ROLES,
    ROOT,
    chain_operators,
    decoded_outputs,
    run_batches,
    source_pack,
)

NOW = 1_700_000_000_000


def plain_output() -> AvroCodec:
    """The example's output record without its revision, each table's part optional."""
    example = json.loads((ROOT / "schemas" / "order_three_tables.avsc").read_text())
    fields = [
        field if field["name"] == "order" else {**field, "type": ["null", field["type"]]}
        for field in example["fields"]
        if field["name"] != "revision"
    ]
    return AvroCodec(
        parse_schema_text(json.dumps({**example, "name": "PlainOrder", "fields": fields}))
    )


def shop(seed: int) -> dict[str, list[dict[str, Any]]]:
    """Orders of a few customers and products, among rows of every table that change them.

    Each table's first rows come first; later rows (a customer moving region, a region's
    new manager, a product's new price) arrive among the orders.
    """
    rng = random.Random(seed)  # noqa: S311 - test data, not secrets
    regions, customers, products = ["north", "south", "east"], ["ada", "bob", "cy"], ["p1", "p2"]
    inputs: dict[str, list[dict[str, Any]]] = {role: [] for role in ROLES}

    def row(role: str, at: int, value: dict[str, Any]) -> None:
        inputs[role].append({"key": value["id"], "value": value, "timestamp": at})

    at = 0
    for region in regions[:2]:  # east has no row until one arrives among the orders
        row("regions", at := at + 1, {"id": region, "name": region, "manager": "m", "since": 0})
    for name in customers:
        region = rng.choice(regions)
        row("customers", at := at + 1, {"id": name, "name": name, "region_id": region, "since": 0})
    for product in products:
        row("products", at := at + 1, {"id": product, "title": product, "price": 1, "since": 0})
    for n in range(60):
        at += 1
        if rng.random() < 0.2:
            role = rng.choice(ROLES[1:])
            if role == "regions":
                value = {"id": rng.choice(regions), "name": "r", "manager": f"m{n}", "since": at}
            elif role == "customers":
                region = rng.choice(regions)
                value = {"id": rng.choice(customers), "name": "c", "region_id": region, "since": at}
            else:
                value = {"id": rng.choice(products), "title": "p", "price": n, "since": at}
            row(role, at, value)
            continue
        order = {
            "id": f"o{n}",
            "customer_id": rng.choice([*customers, "nobody"]),
            "product_id": rng.choice(products),
            "quantity": 1 + n % 3,
            "at": at,
        }
        row("stream", at, order)
    return inputs


def lease_run(
    operators: list[ChainProcessor], inputs: dict[str, list[dict[str, Any]]], size: int
) -> list[tuple[Any, ...]]:
    """The arrivals in sub-batches of ``size`` through a lease's operators; what they write."""
    lease = LeaseOperators(operators, [HeldBuckets() for _ in operators])
    written: list[tuple[Any, ...]] = []
    lease.write_to(SimpleNamespace(covered=set(), send_row=written.append))  # type: ignore[arg-type]
    arrival = sorted(
        (line["timestamp"], ROLES.index(role), offset, role, line)
        for role, lines in inputs.items()
        for offset, line in enumerate(lines)
    )
    for start in range(0, len(arrival), size):
        lines = [(r, o, line) for _, _, o, r, line in arrival[start : start + size]]
        lease.sub_batch({LABEL: [source_pack(lines)]}, NOW)
    return written


def noting(monkeypatch: pytest.MonkeyPatch, method: str) -> list[bool]:
    """Whether each call of ``ChainProcessor.<method>`` from now on found something."""
    original = getattr(ChainProcessor, method)
    found: list[bool] = []

    def noted(self: ChainProcessor, *args: Any) -> Any:
        result = original(self, *args)
        found.append(result is not None)
        return result

    monkeypatch.setattr(ChainProcessor, method, noted)
    return found


@pytest.mark.parametrize("mode", ["left", "inner"])
@pytest.mark.parametrize("seed", range(2))
def test_partials_read_on_in_a_lease_write_what_the_operators_calls_write(
    mode: str, seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    inputs = shop(seed)
    answered = noting(monkeypatch, "_answer_for")
    by_fields = noting(monkeypatch, "_straight_bytes")
    output = plain_output()
    read: dict[int, list[bool]] = {}
    for size in (1, 4, 9, 1000):
        calls = chain_operators({"mode": mode}, output=output)
        expected = run_batches(calls, inputs, size)
        assert not answered  # a micro-batch query's operators read nothing on
        lease = chain_operators({"mode": mode}, output=output)
        written = lease_run(lease, inputs, size)
        read[size], answered[:] = list(answered), []

        outputs = decoded_outputs(written, codec=output)
        assert by_key(outputs) == by_key(decoded_outputs(expected, codec=output))
        assert len(outputs) == len(inputs["stream"]) if mode == "left" else outputs
        assert decoded_outputs(written, "out.dlq") == decoded_outputs(expected, "out.dlq") == []
        # Each stage counts what it answered, as its calls would (customers.matched, ...).
        assert lease[-1].merged_metrics() == calls[-1].merged_metrics()
    assert all(True in read[size] for size in (1, 4, 9))  # partials were read on ...
    assert False in read[4] + read[9]  # ... and left to the calls where the rows change keys
    assert True not in read[1000]  # every table's keys change in the one sub-batch
    assert by_fields and all(by_fields)  # straight outputs are written by fields, rows kept


def test_past_its_bound_a_lease_forgets_the_older_answers_and_writes_the_same(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each operator keeps at most ``SETTLED_KEYS`` keys' answers as a sub-batch begins."""
    monkeypatch.setattr(chain_processor, "SETTLED_KEYS", 2)
    settle = ChainProcessor.settle
    held: list[int] = []  # answers held as each sub-batch begins, before and after settling
    kept: list[int] = []

    def counted(self: ChainProcessor, moving: set[str] | None) -> None:
        held.append(len(self._settled))
        settle(self, moving)
        kept.append(len(self._settled))

    monkeypatch.setattr(ChainProcessor, "settle", counted)
    inputs, output = shop(0), plain_output()
    for size in (1, 4):
        expected = run_batches(chain_operators({"mode": "left"}, output=output), inputs, size)
        written = lease_run(chain_operators({"mode": "left"}, output=output), inputs, size)
        assert by_key(decoded_outputs(written, codec=output)) == by_key(
            decoded_outputs(expected, codec=output)
        )
    assert max(held) > 2  # more were answered in a sub-batch ...
    assert 0 < max(kept) <= 2  # ... than are kept for the next one, but some are
