"""Where a continuous checkpoint's leases stopped: one place to read on from, or a refusal."""

from __future__ import annotations

from pathlib import Path

import pytest

from daemon.continuous.lease_processor import Stopped
from daemon.state.leases import LeasesDisagreeError, LeaseState


class _Stopped(LeaseState):
    """The leases' ends as given, without Spark."""

    def __init__(self, ends: dict[int, dict[str, int]]) -> None:
        super().__init__(None, Path("/state/views"), 7, pipeline="views")  # type: ignore[arg-type]
        self._ends = ends

    def stopped(self) -> dict[int, Stopped]:
        return {lease: Stopped(ends, {}) for lease, ends in self._ends.items()}


def test_leases_that_stopped_alike_read_on_from_there() -> None:
    state = _Stopped({3: {"tweets/0": 12, "users/0": 5}, 9: {"tweets/0": 12, "users/0": 5}})
    assert state.ends() == state.least_ends() == {"tweets/0": 12, "users/0": 5}


def test_leases_that_stopped_apart_are_refused_naming_the_partition() -> None:
    state = _Stopped({3: {"tweets/0": 12, "users/0": 5}, 9: {"tweets/0": 15, "users/0": 5}})
    assert state.least_ends() == {"tweets/0": 12, "users/0": 5}
    with pytest.raises(LeasesDisagreeError) as refused:
        state.ends()
    assert str(refused.value).startswith(
        "pipeline 'views': its leases stopped at different offsets of tweets/0 (12 and 15, "
        "lease 9) in long batch 7 of /state/views"
    )
