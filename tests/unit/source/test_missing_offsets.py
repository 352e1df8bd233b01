"""Offsets the broker no longer has: which partitions lack them, where each policy goes on, what
it skips, and what the operator reads."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from daemon.errors import MissingOffsetsError, failure_reason, stops_the_pipeline
from daemon.model.reports import MissingOffset, MissingOffsetsResumed, decode
from daemon.model.wire import CLOCK
from daemon.source.missing_offsets import failure, find_missing, report, resume

REMOVED = MissingOffset("clicks", 2, needed=40, earliest=100, end=150)
"""Records 0-99 removed (retention, DeleteRecords); the pipeline needed offset 40."""
RECREATED = MissingOffset("clicks", 0, needed=500, earliest=0, end=30)
"""The topic deleted and created again with 30 records; the pipeline needed offset 500."""
NEW_ID = MissingOffset("clicks", 0, needed=20, earliest=0, end=30, cause="recreated")
"""The topic deleted and created again with 30 records, told by its id: offset 20 is the
old topic's."""
GONE = MissingOffset("clicks", 3, needed=9, earliest=-1, end=-1, cause="gone")
"""The topic created again with fewer partitions: partition 3 is gone."""


def test_a_start_below_the_earliest_or_past_the_end_is_missing_and_others_are_not() -> None:
    start = {"clicks/0": 500, "clicks/1": 7, "clicks/2": 40, "users/0": 3, CLOCK: 12}
    earliest = {"clicks/0": 0, "clicks/1": 0, "clicks/2": 100, "users/0": 3}
    ends = {"clicks/0": 30, "clicks/1": 7, "clicks/2": 150, "users/0": 3}
    assert find_missing(start, earliest, ends) == [RECREATED, REMOVED]


def test_an_end_that_may_under_report_is_no_proof_of_a_start_past_it() -> None:
    """Some brokers' ListOffsets under-reports the log end: only a Fetch's end is trusted."""
    start, earliest, ends = {"clicks/0": 500}, {"clicks/0": 0}, {"clicks/0": 30}
    assert find_missing(start, earliest, ends, trusted_ends=[]) == []
    assert find_missing(start, earliest, ends, trusted_ends=["clicks/0"]) == [RECREATED]


@pytest.mark.parametrize(
    ("missing", "policy", "at", "skipped"),
    [
        (REMOVED, "earliest", 100, 60),  # 40-99 are gone
        (REMOVED, "latest", 150, 110),  # 40-149: the gone ones and the ones passed over
        (RECREATED, "earliest", 0, 0),  # the new topic read whole
        (RECREATED, "latest", 30, 30),  # the new topic's 30 records passed over
        (NEW_ID, "earliest", 0, 0),  # the new topic read whole, though it has offset 20
        (NEW_ID, "latest", 30, 30),
        (GONE, "earliest", -1, 0),  # read no more; what it held is not known
        (GONE, "latest", -1, 0),
    ],
)
def test_each_policy_goes_on_from_its_offset_and_counts_what_it_skips(
    missing: MissingOffset, policy: str, at: int, skipped: int
) -> None:
    resumed = resume(missing, policy)
    assert (resumed.at, resumed.skipped) == (at, skipped)


def test_fail_is_one_line_naming_the_partition_the_offset_needed_and_the_earliest() -> None:
    error = failure("clicks-per-region", REMOVED)
    assert isinstance(error, MissingOffsetsError)
    assert str(error) == (
        "pipeline 'clicks-per-region': input topic 'clicks' partition 2 no longer has offset "
        "40: the earliest it has is 100 (retention or DeleteRecords removed the records "
        'before it); set on_missing_offsets = "earliest" or "latest" to read on from there, '
        "or move its start with `daemon reset`"
    )
    assert "created again" in str(failure("p", RECREATED))


def test_the_failure_stops_the_pipeline_where_spark_wraps_it_in_a_traceback() -> None:
    message = str(failure("p", REMOVED))
    spark_text = (
        "[PYTHON_EXCEPTION] Traceback (most recent call last):\n  File ...\n"
        f"daemon.errors.MissingOffsetsError: {message}\n\tat org.apache..."
    )
    assert stops_the_pipeline(spark_text)
    assert failure_reason(spark_text) == message
    assert not stops_the_pipeline("RuntimeError: something else")


def test_the_warning_says_the_facts_and_where_it_reads_on() -> None:
    assert resume(REMOVED, "earliest").warning("p") == (
        "pipeline 'p': input topic 'clicks' partition 2 no longer has offset 40: the earliest "
        "it has is 100 (retention or DeleteRecords removed the records before it); "
        "on_missing_offsets = 'earliest': reading on from offset 100, 60 offsets skipped"
    )


def test_a_report_reaches_the_daemon_whole(tmp_path: Path) -> None:
    address = str(tmp_path / "metrics.sock")
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as daemon_end:
        daemon_end.bind(address)
        daemon_end.settimeout(5)
        sent = [resume(item, "latest") for item in (REMOVED, RECREATED, NEW_ID, GONE)]
        assert report(address, "p", sent)
        message = decode(daemon_end.recv(65_536))
    assert isinstance(message, MissingOffsetsResumed)
    assert message.pipeline == "p"
    assert list(message.resumed) == sent


def test_a_report_without_a_daemon_is_only_logged(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level("WARNING", logger="enrichd.source"):
        assert not report(None, "p", [resume(REMOVED, "earliest")])
    assert [r.getMessage() for r in caplog.records] == [resume(REMOVED, "earliest").warning("p")]


def test_a_topic_told_created_again_by_its_id_or_a_partition_gone_says_so() -> None:
    assert resume(NEW_ID, "earliest").warning("p") == (
        "pipeline 'p': input topic 'clicks' partition 0 no longer has offset 20: the topic was "
        "deleted and created again (its topic id changed), and the new one's earliest offset "
        "is 0 and its log ends at 30; on_missing_offsets = 'earliest': reading on from offset "
        "0, 0 offsets skipped"
    )
    assert str(failure("p", GONE)) == (
        "pipeline 'p': input topic 'clicks' partition 3 no longer exists (offset 9 was to be "
        "read next): the topic was deleted and created again with fewer partitions; set "
        'on_missing_offsets = "earliest" or "latest" to read on without it, or move its start '
        "with `daemon reset`"
    )
    gone = resume(GONE, "earliest").warning("p")
    assert gone.endswith("on_missing_offsets = 'earliest': reading on without it")
