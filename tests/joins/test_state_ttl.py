"""``state_ttl`` of ``lookup``, ``table`` and ``asof`` through the real broker and Spark.

Each replay runs one record a micro-batch with a TTL of 1 ms (processing time), so every key
has expired by the time its next record arrives: a row written in one micro-batch is a
tombstone to the record of the next. The same inputs without a TTL join (each joiner's own
tests); tests/unit/joiners/ pin the rules in plain Python (renewal, held records let out,
a last re-join), and tests/joins/test_comap.py does the same for ``comap``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from daemon.testing import by_key, replay_joiner

SCHEMAS = Path(__file__).resolve().parents[2] / "schemas"
TTL = "1ms"


def test_an_expired_lookup_row_is_a_tombstone_to_the_next_click(broker: Any, spark: Any) -> None:
    """Left mode: the click finds no row (its default), and expiry was counted."""
    default = {"user": "", "region": "UNKNOWN"}
    result = replay_joiner(
        "lookup",
        {
            "table": [{"key": "ada", "value": {"user": "ada", "region": "eu"}, "timestamp": 1}],
            "stream": [
                {"key": "c1", "value": {"id": "c1", "user": "ada", "clicks": 1}, "timestamp": 2}
            ],
        },
        schemas={"stream": SCHEMAS / "click.avsc", "table": SCHEMAS / "user_region.avsc"},
        output_schema=SCHEMAS / "enriched_click.avsc",
        keys={"stream": "user", "table": "user"},
        fields={"stream": "click", "table": "region"},
        options={"mode": "left", "default": default, "state_ttl": TTL},
        max_batch=1,
        bootstrap_servers=broker.bootstrap_servers,
    )
    assert [value["region"] for value in by_key(result.outputs)["c1"]] == [default]
    assert result.dead_letters == []


def test_an_expired_table_key_joins_the_next_update_with_nothing(broker: Any, spark: Any) -> None:
    """Inner mode: the right row finds no left row, and no result is retracted."""
    result = replay_joiner(
        "table",
        {
            "left": [{"key": 1, "value": {"k": 1, "v": "A"}, "timestamp": 1}],
            "right": [{"key": 1, "value": {"k": 1, "v": "a"}, "timestamp": 2}],
        },
        schemas={"left": SCHEMAS / "left_event.avsc", "right": SCHEMAS / "right_event.avsc"},
        output_schema=SCHEMAS / "joined_pair.avsc",
        keys={"left": "k", "right": "k"},
        options={"state_ttl": TTL},
        max_batch=1,
        bootstrap_servers=broker.bootstrap_servers,
    )
    assert result.outputs == [] and result.dead_letters == []


def test_an_expired_asof_history_answers_the_next_event_with_nothing(
    broker: Any, spark: Any
) -> None:
    """The mood of the first micro-batch has expired when the recommendation comes."""
    mood = {"name": "ann", "event_time": 10, "ingestion_time": 1, "mood": "calm"}
    pick = {"consultant": "ann", "event_time": 20, "ingestion_time": 2, "recommendation": "tea"}
    result = replay_joiner(
        "asof",
        {
            "right": [{"key": "ann", "value": mood, "timestamp": 1}],
            "left": [{"key": "ann", "value": pick, "timestamp": 2}],
        },
        schemas={"left": SCHEMAS / "recommendation.avsc", "right": SCHEMAS / "mood.avsc"},
        output_schema=SCHEMAS / "recommendation_view.avsc",
        keys={"left": "consultant", "right": "name"},
        times={"left": "event_time", "right": "event_time"},
        fields={"left": "recommendation", "right": "mood"},
        options={"state_ttl": TTL},
        max_batch=1,
        bootstrap_servers=broker.bootstrap_servers,
    )
    answers = [(value["mood"], value["revision"]) for value in by_key(result.outputs)["ann@20"]]
    assert answers == [(None, 0)]
    assert result.dead_letters == []
