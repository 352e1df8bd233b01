"""The headers of records a joiner holds in a dict state, for ``headers_from = "inputs"``.

A joiner whose state is a dict (``table``'s two rows, ``comap``'s one side, a latest-value
``lookup``'s table row) keeps a held record's carried headers beside it, under the record's
slot name and :data:`SUFFIX`, and only when it has some. So a pipeline that does not opt in,
or whose records have no headers, keeps the state bytes it had, and a state written before
loads as records without headers.

Example:
    >>> state = {"table": {"region": "eu"}}
    >>> keep(state, "table", (("tenant", b"acme"),))
    >>> held(state, "table"), sorted(state)
    ((('tenant', b'acme'),), ['table', 'table.headers'])
    >>> keep(state, "table", None)
    >>> held(state, "table"), sorted(state)
    (None, ['table'])
"""

from __future__ import annotations

from typing import Any, Final

from daemon.plugin import Headers

SUFFIX: Final = ".headers"
"""Appended to a slot's name for its headers' entry (a dot: no role or field name has one)."""


def keep(state: dict[str, Any], slot: str, headers: Headers | None) -> None:
    """Hold ``headers`` as those of the record in ``slot`` (None or none: forget them)."""
    if headers:
        state[slot + SUFFIX] = headers
    else:
        state.pop(slot + SUFFIX, None)


def held(state: dict[str, Any], slot: str) -> Headers | None:
    """The headers held for the record in ``slot``, None when it has none."""
    found: Headers | None = state.get(slot + SUFFIX)
    return found
