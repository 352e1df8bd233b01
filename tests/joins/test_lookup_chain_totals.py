"""Running totals of a lookup of three tables through `daemon replay`, the real broker and Spark.

examples/orders-three-tables.toml with an ``aggregate``: units ordered per region name
(``region.name``), over random orders whose answers late rows of every table revise, some
moving an order to another region (a customer's late move). Each order must count once, in
the region of its latest answer: the final totals are the sums over the plain chain's last
answers (tests/joins/shop_chain.py), whatever the micro-batches. And the totals follow the
revisions: every answer and every retraction of a replaced answer moves its region's total
once, at its own timestamp; with one micro-batch per stage, in timestamp order, a retraction
after the answer it takes back.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from daemon.demos import latest_by_key
from daemon.joiners.aggregate import RETRACTIONS
from daemon.model.config import load_pipeline_file
from daemon.replay import ReplayResult, replay
from daemon.testing import by_key
from tests.joins.shop_chain import (
    TABLES,
    TIMES,
    Lines,
    example_with,
    shop_inputs,
    write_inputs,
)
from tests.unit.joiners.chain_replay import ChainRun, ChainStream, run_chain

Moves = dict[str, list[tuple[int, int]]]
"""Per region name, (timestamp, amount) of each move of its total, in apply order."""


@pytest.fixture(scope="module")
def lines() -> Lines:
    """The random shop history, each order of at least one unit: a sum that adds 0 emits no
    total (emit on change), which would leave a move of the expected ones unwritten."""
    found = shop_inputs(65)
    for order in found["stream"]:
        order["value"] = {**order["value"], "quantity": order["value"]["quantity"] + 1}
    return found


@pytest.fixture(scope="module")
def plain(lines: Lines) -> ChainRun:
    """The chain's plain replay, with the retractions its numbering writes for totals."""
    return run_chain(
        ChainStream("stream", "order", "at"),
        TABLES,
        lines,
        row_keys={table.role: "id" for table in TABLES},
        times=TIMES,
        retractions=True,
    )


def final_units(plain: ChainRun) -> dict[str, int]:
    """Units per region name over each order's last answer (none: withdrawn)."""
    last: dict[Any, dict[str, Any] | None] = {}
    for out in plain.outputs:
        if out.output is None:
            last[out.key] = out.value
    units: dict[str, int] = {}
    for answer in last.values():
        if answer is not None:
            name = answer["region"]["name"]
            units[name] = units.get(name, 0) + answer["order"]["quantity"]
    return units


def expected_moves(plain: ChainRun) -> Moves:
    """Each answer's units added to its region and each retraction's taken back, in the
    second stage's apply order: timestamp, a retraction before an answer of the same."""
    moves: list[tuple[int, int, str, int]] = []
    for out in plain.outputs:
        if out.value is None:
            continue  # a withdrawn answer adds nothing: its retraction takes it back
        assert out.source is not None
        retracted = out.output == RETRACTIONS
        units = out.value["order"]["quantity"]
        name = out.value["region"]["name"]
        moves.append(
            (out.source.timestamp, int(not retracted), name, -units if retracted else units)
        )
    by_region: Moves = {}
    for timestamp, _, name, units in sorted(moves, key=lambda m: m[:2]):
        by_region.setdefault(name, []).append((timestamp, units))
    return by_region


def totals_written(result: ReplayResult) -> Moves:
    """Per region name, (timestamp, total) of each total written, in output order."""
    seen: Moves = {}
    for record in result.extra["totals"]:
        assert record["value"]["region"] == record["key"]
        seen.setdefault(record["key"], []).append(
            (record["timestamp"], record["value"]["quantity"])
        )
    return seen


@pytest.mark.parametrize("max_batch", [None, 17])
def test_units_per_region_count_each_order_once_in_the_region_of_its_latest_answer(
    lines: Lines, plain: ChainRun, max_batch: int | None, broker: Any, spark: Any, tmp_path: Path
) -> None:
    moves = expected_moves(plain)
    retractions = [out for out in plain.outputs if out.output == RETRACTIONS]
    # The data moves orders between regions: a retraction whose region the answer replacing
    # it leaves, so totals go down as well as up and the test can fail.
    assert len(retractions) > 5
    assert any(units < 0 for region in moves.values() for _, units in region)

    result = replay(
        load_pipeline_file(example_with(tmp_path)),
        write_inputs(tmp_path, lines),
        bootstrap_servers=broker.bootstrap_servers,
        max_batch=max_batch,
    )

    assert result.dead_letters == []
    assert by_key(result.outputs) == by_key(o for o in plain.outputs if o.output is None)
    assert by_key(result.extra["retractions"]) == by_key(retractions)
    final = {
        name: value["quantity"] for name, value in latest_by_key(result.extra["totals"]).items()
    }
    assert final == final_units(plain)
    written = totals_written(result)
    # Every move of a total is written once, at the timestamp of the record that moved it.
    assert {name: sorted(t for t, _ in totals) for name, totals in written.items()} == {
        name: [t for t, _ in region] for name, region in moves.items()
    }
    if max_batch is not None:
        # Capped, a group's moves can apply in another order (docs/semantics.md, "Running
        # totals"): the first stage writes a micro-batch in key-group order.
        return
    # One micro-batch a stage: each region's totals in timestamp order, so after the moves
    # of each timestamp the total is their running sum (ties at one timestamp, one row
    # revising several orders, apply in any order among themselves).
    for name, region in moves.items():
        running, expected = 0, {}
        for timestamp, units in region:
            running += units
            expected[timestamp] = running
        assert dict(written[name]) == expected, name
