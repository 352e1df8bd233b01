"""The lookup rules the yardstick applies (``bench/lookup.py``'s :class:`RawLookup`): each click
with its user's latest region, or the example's default (left mode)."""

from __future__ import annotations

from typing import Any

from bench.lookup import DEFAULT, RawLookup


def test_a_click_gets_its_users_latest_region_or_the_default() -> None:
    emitted: list[tuple[str, dict[str, Any]]] = []
    join = RawLookup({}, lambda key, value: emitted.append((key, value)))
    join.apply("table", {"user": "u1", "region": "north"})
    join.apply("table", {"user": "u1", "region": "south"})
    known = {"id": "click-1", "user": "u1", "clicks": 1}
    unknown = {"id": "click-2", "user": "u9", "clicks": 2}

    join.apply("stream", known)
    join.apply("stream", unknown)

    assert emitted == [
        ("click-1", {"click": known, "region": {"user": "u1", "region": "south"}}),
        ("click-2", {"click": unknown, "region": DEFAULT}),
    ]
    assert join.state_entries() == 1
