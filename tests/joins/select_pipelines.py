"""Pipelines with a `select`, replayed through the real broker and Spark, for the select tests
of each joiner (tests/joins/test_select_*.py).

A select test states what is particular to its joiner: the inputs, the options, the select
and the flat record it should write. What they share is here: the pipeline table around
those, the flat output schema written to a file, and the replay
(:func:`tests.kafka_helpers.replay_files`) with its fresh topics and checkpoint.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from daemon.broker import EmbeddedBroker
from daemon.replay import ReplayResult
from tests.kafka_helpers import SCHEMAS, replay_files


def schema(name: str) -> str:
    """The path of the repository's schema ``NAME.avsc``, as a pipeline file gives it."""
    return str(SCHEMAS / f"{name}.avsc")


def selecting(
    name: str,
    joiner: str,
    inputs: dict[str, dict[str, Any]],
    select: dict[str, Any],
    options: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The pipeline table ``name``: ``joiner`` over ``inputs`` (each role's table without its
    topic, named ``NAME-ROLE``), writing the flat record ``select`` shapes to ``NAME``."""
    return {
        "name": name,
        "joiner": joiner,
        "dead_letter_topic": f"{name}.dlq",
        "inputs": {role: {"topic": f"{name}-{role}", **spec} for role, spec in inputs.items()},
        "output": {"topic": name, "schema": "{flat}"},
        "options": options or {},
        "select": select,
    }


def replay_selected(
    folder: Path,
    broker: EmbeddedBroker,
    pipeline: dict[str, Any],
    fields: dict[str, Any],
    records: dict[str, list[dict[str, Any]]],
) -> ReplayResult:
    """Replay ``pipeline`` over each role's ``records``, its output schema the flat record of
    ``fields`` (each name and its Avro type), its checkpoint in ``folder``."""
    flat = {
        "type": "record",
        "name": "Flat",
        "fields": [{"name": field, "type": kind} for field, kind in fields.items()],
    }
    pipeline = {**pipeline, "checkpoint": str(folder / "checkpoint")}
    return replay_files(folder, broker, pipeline, {"flat": flat}, records)
