"""The operator's fast way of making an input record makes the same record as the dataclass."""

from __future__ import annotations

import dataclasses
import pickle  # noqa: S403 - the test pickles its own record

import pytest

from daemon.engine.processor import _input_record
from daemon.joiners.base import InputRecord


def test_a_record_made_through_its_slots_is_the_dataclasss_record() -> None:
    values = ("many", "k1", {"id": 1, "text": "hi"}, 5, "tweets", 1, 42, b"k1", 7)

    made = _input_record(*values)

    assert type(made) is InputRecord
    assert made == InputRecord(*values)
    assert dataclasses.astuple(made) == dataclasses.astuple(InputRecord(*values))
    assert pickle.loads(pickle.dumps(made)) == made  # noqa: S301
    with pytest.raises(dataclasses.FrozenInstanceError):
        made.key = "k2"  # type: ignore[misc]
