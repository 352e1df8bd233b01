"""The reports the stages send the daemon: each kind named on the wire and read back whole."""

from __future__ import annotations

import json

import pytest

from daemon.model.reports import (
    KINDS,
    BatchCounts,
    MissingOffset,
    MissingOffsetsResumed,
    Resumed,
    decode,
    encode,
)

COUNTS = BatchCounts(
    "views",
    7,
    records={"views": 40, "views.dlq": 2},
    dead_letters={"UndecodableRecord": 2},
    joiner={"unmatched": 1},
    latency={"views": ([0, 12, 28], 31.5)},
    event_time={"many": 1_764_000_000_000},
    state_cache={"hit": 30, "miss": 2},
)
RESUMED = MissingOffsetsResumed(
    "views",
    (
        Resumed(MissingOffset("clicks", 2, 40, 100, 150), "earliest", 100, 60),
        Resumed(MissingOffset("clicks", 0, 500, 0, 30), "latest", 30, 30),
    ),
)


@pytest.mark.parametrize("report", [COUNTS, RESUMED], ids=lambda report: report.kind)
def test_each_report_names_its_kind_and_comes_back_whole(report: object) -> None:
    data = encode(report)  # type: ignore[arg-type]
    assert json.loads(data)["kind"] == report.kind  # type: ignore[attr-defined]
    assert decode(data) == report


def test_every_kind_is_known_by_its_name() -> None:
    assert KINDS == {"batch-counts": BatchCounts, "missing-offsets-resumed": MissingOffsetsResumed}


def test_a_part_of_the_counts_left_out_counts_nothing() -> None:
    data = json.dumps({"kind": "batch-counts", "pipeline": "views", "batch": 3}).encode()
    assert decode(data) == BatchCounts("views", 3)


@pytest.mark.parametrize(
    "data",
    [
        b'{"pipeline": "views", "missing_offsets": []}',  # no kind
        b'{"kind": "progress", "pipeline": "views"}',  # a kind not known
        b"[1, 2]",
    ],
)
def test_a_datagram_of_no_known_kind_is_refused(data: bytes) -> None:
    with pytest.raises(ValueError, match="not a report of a known kind"):
        decode(data)


def test_the_batch_lines_name_a_micro_batch_or_a_continuous_tasks_long_batch() -> None:
    micro = BatchCounts("views", 6, replayed=2, failed_calls=1)
    # A continuous task's report says where its lease has read to.
    long = BatchCounts("views", 2, replayed=1, failed_calls=3, positions={"tweets/0": 40})

    assert micro.replay_line() == (
        "pipeline views: micro-batch 6: 2 replayed task(s) found their batch committed "
        "(by its marker) and wrote nothing again"
    )
    assert long.replay_line() == (
        "pipeline views: long batch 2: 1 replayed task(s) found their batch committed "
        "(by its marker) and wrote nothing again"
    )
    assert (long.failure_line() or "").startswith("pipeline views: long batch 2: 3 joiner call")
    assert (micro.failure_line() or "").startswith("pipeline views: micro-batch 6: 1 joiner call")
