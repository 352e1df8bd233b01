"""A `select` on the window joiner, through the real broker and Spark.

The outer window join writes a flat record chosen by its pipeline's `select`: the join key
renamed, each side's name and the right side's time flattened out of their records (a
default where a side is missing), and a constant. Right record ``a`` arrives after left
record ``A`` though it happened earlier, and still joins it; right record ``z`` arrives past
its window's grace and is dead-lettered, so it reaches no output through the select.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from daemon.broker import EmbeddedBroker
from daemon.testing import by_key
from tests.joins.select_pipelines import replay_selected, schema, selecting

PIPELINE = selecting(
    "flat-pairs",
    "window",
    {
        "left": {"schema": schema("left_event"), "key": "k", "time": "at"},
        "right": {"schema": schema("right_event"), "key": "k", "time": "at"},
    },
    {
        "pair": "kafka_key",
        "left_name": {"path": "left.v", "default": "-"},
        "right_name": {"path": "right.v", "default": "-"},
        "right_at": "right.at",
        "source": {"value": "window"},
    },
    # An hour's idle timeout: no processing-time wake-up within a replay, only its end.
    {"window": "10ms", "grace": "5ms", "mode": "outer", "idle_timeout": "1h"},
)
FLAT = {
    "pair": "string",
    "left_name": "string",
    "right_name": "string",
    "right_at": ["null", "long"],
    "source": "string",
}


def event(k: int, v: str, at: int, arrival: int) -> dict[str, Any]:
    """A record of join key ``k`` named ``v`` at event time ``at``, arriving at ``arrival``."""
    return {"key": k, "value": {"k": k, "v": v, "at": at}, "timestamp": arrival}


def test_window_pairs_and_null_results_carry_the_fields_its_select_chooses(
    broker: EmbeddedBroker, spark: Any, tmp_path: Path
) -> None:
    records = {
        "left": [event(1, "A", 100, 1), event(1, "C", 150, 3), event(2, "B", 200, 5)],
        # a: 5 ms before A, arriving after it. z: 80 + 10 + 5 < 150, key 1's stream time.
        "right": [event(1, "a", 95, 2), event(1, "z", 80, 4)],
    }
    result = replay_selected(tmp_path, broker, PIPELINE, FLAT, records)

    assert [(d["key"], d["headers"]["enrichd.error.class"]) for d in result.dead_letters] == [
        ("1", "LateRecord")
    ]
    alone = {"right_name": "-", "right_at": None, "source": "window"}
    assert by_key(result.outputs) == {
        "1": [
            {"pair": "1", "left_name": "A", "right_name": "a", "right_at": 95, "source": "window"},
            {"pair": "1", "left_name": "C", **alone},  # at the end of input
        ],
        "2": [{"pair": "2", "left_name": "B", **alone}],
    }
