"""A capped micro-batch admits the same records as a k-way merge by each partition's next record.

:func:`daemon.source.admission.admit_earliest` sorts once by each partition's running maximum
timestamp; the merge it replaces, kept here as the reference, takes one record at a time from
the partition whose next record is smallest. Timestamps within a partition go back and forth,
ties are common, and end-of-input markers are sprinkled in, so every rule of the merge is
exercised.
"""

from __future__ import annotations

import heapq

from hypothesis import given, settings
from hypothesis import strategies as st

from daemon.source.admission import Heads, admit_earliest


def merged(heads: dict[str, Heads], ranks: dict[str, int], budget: int) -> dict[str, int]:
    """The reference: a k-way merge by (timestamp, rank, partition, offset), markers riding free.

    A record's rank is its input's, an end-of-input marker's is after every input's; ties go
    to the partition of the earlier input, then of the lower number.
    """
    marker_rank = max(ranks.values()) + 1

    def head(name: str, index: int) -> tuple[int, int, int, int, int, str, int]:
        part = heads[name]
        rank = marker_rank if part.markers[index] else ranks[name]
        number = int(name.rpartition("/")[2])
        when = part.timestamps[index]
        return (when, rank, ranks[name], number, part.offsets[index], name, index)

    frontier = [head(name, 0) for name, part in heads.items() if part.offsets]
    heapq.heapify(frontier)
    ends: dict[str, int] = {}
    admitted = 0
    while frontier:
        *_, offset, name, index = frontier[0]
        marker = heads[name].markers[index]
        if admitted >= budget and not marker:
            break
        heapq.heappop(frontier)
        ends[name] = offset + 1
        admitted += not marker
        if index + 1 < len(heads[name].offsets):
            heapq.heappush(frontier, head(name, index + 1))
    return ends


@st.composite
def partitions(draw: st.DrawFn) -> tuple[dict[str, Heads], dict[str, int]]:
    heads, ranks = {}, {}
    # Numbers past 9, so that partition 10 sorts after partition 2, not before it as text.
    numbers = draw(st.lists(st.integers(0, 12), min_size=1, max_size=4, unique=True))
    for number in numbers:
        name = f"{draw(st.sampled_from(['clicks', 'users']))}/{number}"
        size = draw(st.integers(0, 30))
        first = draw(st.integers(0, 5))
        times = draw(st.lists(st.integers(0, 12), min_size=size, max_size=size))
        markers = draw(
            st.lists(
                st.booleans().map(lambda b: b and draw(st.booleans())), min_size=size, max_size=size
            )
        )
        heads[name] = Heads(first, first + size, times, list(range(first, first + size)), markers)
        ranks[name] = 0 if name.startswith("users") else 1
    return heads, ranks


@settings(max_examples=400, deadline=None)
@given(partitions(), st.integers(1, 60))
def test_the_sort_admits_what_the_merge_admits(
    parts: tuple[dict[str, Heads], dict[str, int]], budget: int
) -> None:
    heads, ranks = parts
    assert admit_earliest(heads, ranks, budget) == merged(heads, ranks, budget)


def test_a_record_behind_a_later_one_waits_for_it() -> None:
    """Partition a's record at time 1 sits behind one at 9: b's record at 5 goes first."""
    heads = {
        "t/0": Heads(0, 2, [9, 1], [0, 1], [False, False]),
        "t/1": Heads(0, 1, [5], [0], [False]),
    }
    ranks = {"t/0": 0, "t/1": 0}
    assert admit_earliest(heads, ranks, 1) == {"t/1": 1}
    assert admit_earliest(heads, ranks, 2) == {"t/0": 1, "t/1": 1}
    assert admit_earliest(heads, ranks, 3) == {"t/0": 2, "t/1": 1}


def test_markers_after_the_last_admitted_record_ride_along() -> None:
    heads = {"t/0": Heads(0, 4, [1, 2, 2, 3], [0, 1, 2, 3], [False, False, True, False])}
    assert admit_earliest(heads, {"t/0": 0}, 2) == {"t/0": 3}


def test_an_end_of_input_comes_after_every_input_at_its_timestamp() -> None:
    """The issue's replay: left N@1000 M@1001 and the end of input @1003; right P@1002 Z@1003.

    The marker is on the first input's topic and ties with Z: Z is admitted first, so Z
    reaches its key before the key's end of input, with every cap.
    """
    heads = {
        "left/1": Heads(0, 3, [1000, 1001, 1003], [0, 1, 2], [False, False, True]),
        "right/1": Heads(0, 2, [1002, 1003], [0, 1], [False, False]),
    }
    ranks = {"left/1": 0, "right/1": 1}
    assert admit_earliest(heads, ranks, 3) == {"left/1": 2, "right/1": 1}
    assert admit_earliest(heads, ranks, 4) == {"left/1": 3, "right/1": 2}


def test_partitions_tie_by_number_not_by_name() -> None:
    heads = {
        "t/10": Heads(0, 1, [5], [0], [False]),
        "t/2": Heads(0, 1, [5], [0], [False]),
    }
    assert admit_earliest(heads, {"t/10": 0, "t/2": 0}, 1) == {"t/2": 1}
