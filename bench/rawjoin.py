"""A joiner restated in plain dicts, for the raw loops that enrichd is measured against.

A raw loop (the throughput ceilings of :mod:`bench.raw` and :mod:`bench.twostream`, the
latency yardstick of :mod:`bench.yardstick`) reads records with confluent-kafka, decodes them
with fastavro and hands each to a :class:`RawJoin`: the joiner's rules on plain dicts, which
hands back each output through ``emit``, so that the loop emits what enrichd emits. A
:class:`RawSpec` says what a loop reads and writes and which join it runs; it is picklable,
so a loop can run in a spawned process.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import fastavro

from bench.workloads import SCHEMAS

Emit = Callable[[str, dict[str, Any]], None]
"""How a raw join hands over one output: its key and its value (a dict for the output schema)."""


def schema(name: str) -> Any:
    """``schemas/<name>.avsc`` parsed for fastavro."""
    return fastavro.schema.load_schema(str(SCHEMAS / f"{name}.avsc"))


class RawJoin:
    """A join for a raw loop: records in arrival order in, outputs out through ``emit``."""

    late = 0
    """Records the join refused as late (enrichd's dead letters)."""

    def __init__(self, options: dict[str, Any], emit: Emit) -> None:
        self.options = options
        self.emit = emit

    def apply(self, role: str, value: dict[str, Any]) -> None:
        """Apply one decoded record of ``role`` (the pipeline's name for its input)."""
        raise NotImplementedError

    def state_entries(self) -> int:
        """How many records the join holds at the end (its state size, in records)."""
        return 0


@dataclass(frozen=True)
class RawSpec:
    """What a raw loop reads and writes, and which join it runs (picklable, for spawn)."""

    conf: dict[str, str]
    roles: dict[str, str]
    """Input topic -> role; ``"left"`` ranks before any other role on equal timestamps."""
    schemas: dict[str, str]
    """Input topic -> schema name."""
    output_schema: str
    output: str
    join: type[RawJoin]
    options: dict[str, Any]

    def rank(self, topic: str) -> int:
        """Where a record of ``topic`` goes among records of equal timestamp: left first."""
        return 0 if self.roles[topic] == "left" else 1
