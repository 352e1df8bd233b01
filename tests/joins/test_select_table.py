"""A `select` on the table joiner, through the real broker and Spark.

The outer table join writes a flat record chosen by its pipeline's `select`: the join key
renamed, each side's name flattened out of its record (a default where a side is missing)
and a constant. Key 1's result is revised by every update of either side, through the same
select, and retracted by a tombstone once neither side is left: a tombstone, not a record
of defaults.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from daemon.broker import EmbeddedBroker
from daemon.testing import by_key
from tests.joins.select_pipelines import replay_selected, schema, selecting

PIPELINE = selecting(
    "flat-rows",
    "table",
    {
        "left": {"schema": schema("left_event"), "key": "k"},
        "right": {"schema": schema("right_event"), "key": "k"},
    },
    {
        "row": "kafka_key",
        "left_name": {"path": "left.v", "default": "-"},
        "right_name": {"path": "right.v", "default": "-"},
        "source": {"value": "table"},
    },
    {"mode": "outer"},
)
FLAT = {"row": "string", "left_name": "string", "right_name": "string", "source": "string"}


def row(k: int, v: str | None, timestamp: int) -> dict[str, Any]:
    """An update of join key ``k``'s row to ``v`` at ``timestamp``; None: its tombstone."""
    value = None if v is None else {"k": k, "v": v}
    return {"key": k, "value": value, "timestamp": timestamp}


def joined(k: int, left: str, right: str) -> dict[str, Any]:
    """The flat record of key ``k``'s result, ``-`` for a missing side."""
    return {"row": str(k), "left_name": left, "right_name": right, "source": "table"}


def test_table_results_and_their_revisions_carry_the_fields_its_select_chooses(
    broker: EmbeddedBroker, spark: Any, tmp_path: Path
) -> None:
    records = {
        "left": [row(1, "X", 1), row(1, None, 5)],
        "right": [row(1, "x", 2), row(1, "y", 3), row(1, None, 4), row(2, "w", 6)],
    }
    result = replay_selected(tmp_path, broker, PIPELINE, FLAT, records)

    assert result.dead_letters == []
    assert by_key(result.outputs) == {
        "1": [
            joined(1, "X", "-"),
            joined(1, "X", "x"),
            joined(1, "X", "y"),  # the right row's update revises the result
            joined(1, "X", "-"),  # its tombstone leaves the left row alone
            None,  # the left row's tombstone retracts the result
        ],
        "2": [joined(2, "-", "w")],
    }
