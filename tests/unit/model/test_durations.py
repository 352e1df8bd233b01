"""Duration strings of the pipeline file."""

from __future__ import annotations

import pytest
from pydantic import BaseModel, ValidationError

from daemon.model.durations import DurationMs, parse_duration_ms


@pytest.mark.parametrize(
    ("text", "ms"),
    [
        ("500ms", 500),
        ("10s", 10_000),
        ("5m", 300_000),
        ("1h", 3_600_000),
        ("2d", 172_800_000),
        ("0s", 0),
        (" 7 s ", 7_000),
    ],
)
def test_parse_duration_ms_accepts_every_unit(text: str, ms: int) -> None:
    assert parse_duration_ms(text) == ms


@pytest.mark.parametrize("text", ["5 minutes", "10", "1.5s", "-1s", "s", "", "10S", "1w"])
def test_parse_duration_ms_rejects_other_text_listing_units(text: str) -> None:
    with pytest.raises(ValueError, match=r"one of ms, s, m, h, d"):
        parse_duration_ms(text)


class _Model(BaseModel):
    ttl: DurationMs


def test_duration_field_takes_strings_and_milliseconds() -> None:
    assert _Model(ttl="10s").ttl == 10_000  # type: ignore[arg-type]
    assert _Model(ttl=250).ttl == 250


def test_duration_field_rejects_booleans_and_bad_strings() -> None:
    with pytest.raises(ValidationError, match="not a boolean"):
        _Model(ttl=True)
    with pytest.raises(ValidationError, match="is not a duration"):
        _Model(ttl="5 minutes")  # type: ignore[arg-type]
