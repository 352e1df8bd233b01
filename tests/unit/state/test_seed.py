"""A seed's due times: each bucket's timer is its earliest due key, as its first batch sets it.

``tests/state/test_state_commands.py`` runs ``daemon rescale`` through Spark and reads the map
it writes; here the per-bucket rule, on rows shaped as the seed's Parquet reads back.
"""

from __future__ import annotations

import pickle
from typing import Any

import pytest

from daemon.errors import EnrichdError
from daemon.operator.state_format import encode_portable
from daemon.state.seed import _bucket_timer


def _entry(due: int | None) -> dict[str, Any]:
    return {"key": "k", "entry": encode_portable((0, 0, 0, 0, b""), due, {"held": [1, 2]})}


def test_a_buckets_timer_is_its_earliest_due_key() -> None:
    row = {"bucket": 5, "keys": [_entry(9_000), _entry(None), _entry(4_000)]}
    assert _bucket_timer(row) == (5, 4_000)


def test_a_bucket_with_no_due_key_gets_no_timer() -> None:
    assert _bucket_timer({"bucket": 2, "keys": [_entry(None)]}) == (2, None)


def test_a_moved_state_of_an_unknown_format_is_refused() -> None:
    entry = {"key": "k", "entry": pickle.dumps((99, 0, 0, 0, 0, 5, b""))}
    with pytest.raises(EnrichdError, match="state format 99"):
        _bucket_timer({"bucket": 1, "keys": [entry]})
