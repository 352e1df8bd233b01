"""Switches between a path enrichd took before and the cheaper one that replaced it.

Issue 63 cuts the fixed cost of a micro-batch one change at a time, each measured before and
after in one sitting on one machine. Where the path a change replaced is cheap to keep, it
stays behind a switch, read from the environment when a query starts, so that the benchmark
(``python -m bench NAME --counts-sink data-source``, :mod:`bench.tuning`) or an operator can
run either. The first value of each is enrichd's default.

Example:
    >>> COUNTS_SINK.variable, COUNTS_SINK.default
    ('ENRICHD_COUNTS_SINK', 'foreach-batch')
"""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class Switch:
    """An environment variable choosing between ``values``; the first is the default."""

    variable: str
    values: tuple[str, ...]
    what: str
    """What it switches, for the benchmark's help."""

    @property
    def default(self) -> str:
        """The value without the variable."""
        return self.values[0]

    def value(self) -> str:
        """The value the environment chooses now.

        Raises:
            ValueError: the variable names none of ``values``.
        """
        chosen = os.environ.get(self.variable, "").strip().lower() or self.default
        if chosen not in self.values:
            raise ValueError(
                f"{self.variable}={chosen!r}: expected one of {', '.join(self.values)}"
            )
        return chosen


COUNTS_SINK = Switch(
    "ENRICHD_COUNTS_SINK",
    ("foreach-batch", "data-source"),
    "how a query hands its counts rows on: foreachBatch on the driver, or the Python "
    "data-source sink as before (daemon.sink.spark_sink)",
)
SOURCE_READER = Switch(
    "ENRICHD_SOURCE_READER",
    ("executors", "driver"),
    "who reads a micro-batch: Python tasks on the executors, or the driver's planning "
    "process (daemon.source.spark_source.DriverStreamReader)",
)
SWITCHES = (COUNTS_SINK, SOURCE_READER)
"""Every switch, for the benchmark."""
