"""Duration strings of the pipeline file: ``"500ms"``, ``"10s"``, ``"5m"``, ``"1h"``, ``"2d"``."""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import BeforeValidator

_UNITS_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
_PATTERN = re.compile(r"^\s*(\d+)\s*(ms|s|m|h|d)\s*$")


def parse_duration_ms(text: str) -> int:
    """Parse a duration string into milliseconds.

    Args:
        text: a whole number followed by one of the units ms, s, m, h, d.

    Returns:
        The duration in milliseconds.

    Raises:
        ValueError: when the text is not such a duration; the message lists the units.
    """
    match = _PATTERN.match(text) if isinstance(text, str) else None
    if match is None:
        raise ValueError(
            f"{text!r} is not a duration; write a whole number and a unit "
            f'(one of {", ".join(_UNITS_MS)}), e.g. "500ms" or "10s"'
        )
    return int(match.group(1)) * _UNITS_MS[match.group(2)]


def _to_ms(value: object) -> int:
    if isinstance(value, bool):
        raise ValueError('a duration is a string such as "10s", not a boolean')
    if isinstance(value, int):
        return value
    return parse_duration_ms(value)  # type: ignore[arg-type]


DurationMs = Annotated[int, BeforeValidator(_to_ms)]
"""A pydantic field type: a duration string in the file, milliseconds in Python."""
