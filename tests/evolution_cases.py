"""The inputs of the schema-evolution tests: an ``Event`` schema in two versions, per joiner.

Version 2 adds ``tier`` with a default and drops the optional ``note``, as a
backward-compatible registry allows. For each joiner that holds input records (``comap``'s
both sides, ``lookup``'s table rows, ``window``'s held records, ``asof``'s right history,
``table``'s both sides), what it is fed with version 1, then with version 2, and where its
outputs carry the held version-1 record. Used by tests/unit/operator/test_held_records.py
(every joiner, in plain Python) and tests/formats/test_schema_evolution.py (the real path).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

NAMESPACE = "enrichd.tests.evolution"
V1_FIELDS: list[dict[str, Any]] = [
    {"name": "id", "type": "long"},
    {"name": "k", "type": "long"},
    {"name": "v", "type": "string"},
    {"name": "note", "type": ["null", "string"], "default": None},
]
V2_FIELDS: list[dict[str, Any]] = [
    {"name": "id", "type": "long"},
    {"name": "k", "type": "long"},
    {"name": "v", "type": "string"},
    {"name": "tier", "type": "string", "default": "basic"},
]


def event_schema(fields: list[dict[str, Any]]) -> dict[str, Any]:
    return {"type": "record", "name": "Event", "namespace": NAMESPACE, "fields": fields}


def output_schema(fields: list[dict[str, Any]], sides: dict[str, bool], extra: list[Any]) -> Any:
    """An output record of one field per side (nullable or not) holding an ``Event``."""
    event: Any = event_schema(fields)
    out = []
    for name, nullable in sides.items():
        out.append({"name": name, "type": ["null", event] if nullable else event})
        event = f"{NAMESPACE}.Event"  # defined once, referred to after
    return {"type": "record", "name": "Out", "namespace": NAMESPACE, "fields": out + extra}


@dataclass(frozen=True)
class Case:
    """A joiner's pipeline: its roles, output sides, options, and what each phase writes."""

    joiner: str
    roles: tuple[str, str]
    sides: dict[str, bool]
    extra: list[Any]
    options: dict[str, Any]
    before: list[tuple[str, int, int, int]]
    """Phase 1, version 1 records: (role, id, key, Kafka timestamp)."""
    after: list[tuple[str, int, int, int]]
    """Phase 2, version 2 records."""
    held: Callable[[dict[str, Any]], dict[str, Any] | None]
    """From an output of phase 2, the held (version 1) record it carries, if any."""


CASES = {
    "comap": Case(
        "comap",
        ("one", "many"),
        {"one": False, "many": False},
        [{"name": "id", "type": "long"}],
        {"many_id": "id"},
        [("one", 1, 1, 1000), ("many", 10, 1, 1001)],
        [("one", 2, 1, 2000)],  # a one-side update fans out to the held many-side record
        lambda out: out["many"] if out["many"]["id"] == 10 else None,
    ),
    "lookup": Case(
        "lookup",
        ("stream", "table"),
        {"stream": False, "table": False},
        [],
        {},
        [("table", 1, 1, 1000)],
        [("stream", 20, 1, 2000)],  # joins the held table row
        lambda out: out["table"],
    ),
    "window": Case(
        "window",
        ("left", "right"),
        {"left": True, "right": True},
        [],
        {"window": "1h", "idle_timeout": "1h"},
        [("left", 1, 1, 1000)],
        [("right", 2, 1, 2000)],  # pairs with the held left record
        lambda out: out["left"],
    ),
    "asof": Case(
        "asof",
        ("left", "right"),
        {"left": False, "right": True},
        [{"name": "revision", "type": "int"}],
        {"rejoin_interval": "1h"},
        [("right", 1, 1, 1000)],
        [("left", 2, 1, 2000)],  # answered with the held right record
        lambda out: out["right"],
    ),
    "table": Case(
        "table",
        ("left", "right"),
        {"left": True, "right": True},
        [],
        {},
        [("left", 1, 1, 1000)],
        [("right", 2, 1, 2000)],  # joins the held left row
        lambda out: out["left"],
    ),
}


def event_value(role: str, ident: int, key: int, version: str) -> dict[str, Any]:
    """An ``Event`` of ``version`` ("v1" or "v2")."""
    value: dict[str, Any] = {"id": ident, "k": key, "v": f"{role} {ident}"}
    value.update({"note": "old"} if version == "v1" else {"tier": "gold"})
    return value
