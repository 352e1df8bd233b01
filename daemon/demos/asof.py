"""``daemon demo asof``: recommendations with the mood of the moment, corrected when late."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from rich.table import Table

from daemon.demos import latest_by_key, replay_sample

NINE = 1_795_165_200_000
"""2026-11-20 09:00 UTC in epoch milliseconds: the sample morning."""
MINUTE = 60_000


def at(minutes: float) -> int:
    """The sample morning's clock: minutes after 09:00 as epoch milliseconds."""
    return NINE + int(minutes * MINUTE)


# (consultant, made at, reached Kafka at, what): times in minutes after 09:00.
MOODS = [
    ("Ada", 0, 0.1, "calm"),
    ("Grace", 0, 0.2, "cheerful"),
    # Ada's phone was offline: her 09:20 mood reaches Kafka only at 09:41.
    ("Ada", 20, 41, "grumpy"),
]
RECOMMENDATIONS = [
    ("Ada", 10, 10.1, "buy index funds"),
    ("Grace", 15, 15.1, "hold"),
    ("Ada", 30, 30.1, "sell everything"),  # answered "calm": the grumpy mood is not in yet
    ("Ada", 45, 45.1, "rebalance"),  # stream time passes a re-join: 09:30 is corrected
]


def sample() -> dict[str, tuple[str, list[dict[str, Any]]]]:
    """The sample inputs as replay lines, with their files' names, by role.

    A record's Kafka timestamp is its ingestion time.
    """
    inputs: dict[str, tuple[str, list[dict[str, Any]]]] = {}
    for role, name, rows, name_field, what_field in (
        ("left", "recommendations.jsonl", RECOMMENDATIONS, "consultant", "recommendation"),
        ("right", "moods.jsonl", MOODS, "name", "mood"),
    ):
        lines = []
        for who, made, ingested, what in rows:
            value = {
                name_field: who,
                "event_time": at(made),
                "ingestion_time": at(ingested),
                what_field: what,
            }
            lines.append({"key": who, "value": value, "timestamp": at(ingested)})
        inputs[role] = (name, lines)
    return inputs


def clock(epoch_ms: int) -> str:
    """HH:MM:SS of an epoch-millisecond time, in UTC."""
    return datetime.fromtimestamp(epoch_ms / 1000, tz=UTC).strftime("%H:%M:%S")


def show(console: Any) -> None:
    """Replay the sample through the ``asof`` example and print every revision."""
    path, result = replay_sample(console, "recommendations.toml", sample(), "the asof pipeline")

    def made_at(record: dict[str, Any]) -> tuple[int, int]:
        view = record["value"]
        return view["recommendation"]["event_time"], view["revision"]

    emitted = Table(title=f"Every revision emitted to recommendation-views ({path.name})")
    for column in ("recommendation", "consultant", "made at", "mood then", "revision", "when"):
        emitted.add_column(column)
    for record in sorted(result.outputs, key=made_at):
        view = record["value"]
        recommendation, mood = view["recommendation"], view["mood"]
        cause = record["headers"].get("enrichd.source.topic", "").split(".replay-")[0]
        emitted.add_row(
            recommendation["recommendation"],
            recommendation["consultant"],
            clock(recommendation["event_time"]),
            mood["mood"] if mood else "(none known)",
            str(view["revision"]),
            "at once" if view["revision"] == 0 else f"re-join ({cause or 'end of input'})",
        )
    console.print(emitted)
    final = Table(title="Current best answer per recommendation (what a compacted topic holds)")
    for column in ("key", "recommendation", "mood then", "revision"):
        final.add_column(column)
    for key, view in sorted(latest_by_key(result.outputs).items()):
        view = view or {}
        final.add_row(
            key,
            (view.get("recommendation") or {}).get("recommendation", "-"),
            (view.get("mood") or {}).get("mood", "(none known)"),
            str(view.get("revision", "-")),
        )
    console.print(final)
    console.print(
        f"{result.input_records} input records, {len(result.outputs)} records in the revision log, "
        f"{len(result.dead_letters)} dead letters. Ada's 09:20 mood reached Kafka at 09:41: "
        "her 09:30 recommendation was first answered 'calm', then corrected to 'grumpy' when "
        "the 09:45 recommendation moved her stream time past the next re-join."
    )
