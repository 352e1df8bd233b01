"""A `select` on the asof joiner, through the real broker and Spark.

The recommendations join writes a flat record chosen by its pipeline's `select`: the advice
and when it was made (flattened out of the recommendation), the mood (flattened, with a
default when no mood was known), the revision renamed and a constant. Ann's grumpy mood
arrives after the recommendation it concerns, so her answer is corrected by a revision, and
the correction goes through the same select as the first answer.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from daemon.broker import EmbeddedBroker
from daemon.testing import by_key
from tests.joins.select_pipelines import replay_selected, schema, selecting

MINUTE = 60_000
T0 = 1_699_999_200_000  # a whole hour in epoch milliseconds
PIPELINE = selecting(
    "flat-advice",
    "asof",
    {
        "left": {
            "schema": schema("recommendation"),
            "key": "consultant",
            "time": "event_time",
            "field": "recommendation",
        },
        "right": {
            "schema": schema("mood"),
            "key": "name",
            "time": "event_time",
            "field": "mood",
        },
    },
    {
        "advice": "recommendation.recommendation",
        "made_at": "recommendation.event_time",
        "mood": {"path": "mood.mood", "default": "unknown"},
        "version": "revision",
        "source": {"value": "asof"},
    },
)
FLAT = {
    "advice": "string",
    "made_at": "long",
    "mood": "string",
    "version": "long",
    "source": "string",
}


def recommendation(who: str, minutes: int, arrival: int, advice: str) -> dict[str, Any]:
    """A recommendation made ``minutes`` after T0, reaching Kafka at ``arrival``."""
    made = T0 + minutes * MINUTE
    value = {"consultant": who, "event_time": made, "ingestion_time": arrival}
    return {"key": who, "value": {**value, "recommendation": advice}, "timestamp": arrival}


def mood(who: str, minutes: int, arrival: int, what: str) -> dict[str, Any]:
    """A mood beginning ``minutes`` after T0, reaching Kafka at ``arrival``."""
    began = T0 + minutes * MINUTE
    value = {"name": who, "event_time": began, "ingestion_time": arrival, "mood": what}
    return {"key": who, "value": value, "timestamp": arrival}


def test_an_asof_answer_and_its_revision_carry_the_fields_its_select_chooses(
    broker: EmbeddedBroker, spark: Any, tmp_path: Path
) -> None:
    a = T0 + 10_000
    records = {
        "left": [recommendation("ann", 5, a + 2, "sell"), recommendation("bob", 1, a + 4, "buy")],
        # Ann's grumpy mood began at 0:03 but arrives after her 0:05 recommendation.
        "right": [mood("ann", 0, a + 1, "calm"), mood("ann", 3, a + 3, "grumpy")],
    }
    result = replay_selected(tmp_path, broker, PIPELINE, FLAT, records)

    assert result.dead_letters == []
    ann = {"advice": "sell", "made_at": T0 + 5 * MINUTE, "source": "asof"}
    assert by_key(result.outputs) == {
        f"ann@{T0 + 5 * MINUTE}": [
            {**ann, "mood": "calm", "version": 0},
            {**ann, "mood": "grumpy", "version": 1},  # corrected once the late mood is known
        ],
        f"bob@{T0 + MINUTE}": [  # no mood of Bob's is ever known: the default
            {
                "advice": "buy",
                "made_at": T0 + MINUTE,
                "mood": "unknown",
                "version": 0,
                "source": "asof",
            }
        ],
    }
