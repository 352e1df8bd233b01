"""The due-time map: merging a batch's reported timers, the file, and the clock's decision."""

from __future__ import annotations

import stat
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from daemon.checkpoint import due_times
from daemon.checkpoint.due_times import NO_BATCH, DueTimes, clock_moves, merged
from daemon.checkpoint.layout import COMMIT_LOG, due_times_file, log_folder


def test_a_batchs_reports_set_move_and_clear_bucket_timers() -> None:
    base = DueTimes(4, {1: 1_000, 2: 2_000, 3: 3_000})
    after = merged(base, 5, {1: 1_500, 2: None, 7: 700})
    assert after == DueTimes(5, {1: 1_500, 3: 3_000, 7: 700})
    assert after is not None and after.earliest == 700


def test_a_batch_run_again_merges_to_the_same_map() -> None:
    base = DueTimes(4, {1: 1_000})
    once = merged(base, 5, {1: None, 2: 2_000})
    assert once is not None
    assert merged(once, 5, {1: None, 2: 2_000}) == once


def test_a_gap_or_no_base_leaves_the_map_unknown() -> None:
    assert merged(None, 0, {1: 5}) is None
    assert merged(DueTimes(2, {}), 5, {1: 5}) is None  # batches 3 and 4 reported nothing here
    assert merged(DueTimes(NO_BATCH), 0, {1: 5}) == DueTimes(0, {1: 5})


@given(
    st.dictionaries(st.integers(0, 31), st.integers(0, 10_000)),
    st.lists(st.dictionaries(st.integers(0, 31), st.none() | st.integers(0, 10_000))),
)
def test_merging_batch_after_batch_keeps_each_buckets_latest_timer(
    start: dict[int, int], batches: list[dict[int, int | None]]
) -> None:
    due: DueTimes | None = DueTimes(NO_BATCH, start)
    expected: dict[int, int | None] = dict(start)
    for batch, reported in enumerate(batches):
        due = merged(due, batch, reported)
        expected.update(reported)
    assert due is not None
    assert due.timers == {b: ms for b, ms in expected.items() if ms is not None}


def test_the_clock_moves_only_when_a_timer_is_due() -> None:
    due = DueTimes(7, {1: 5_000, 2: 9_000})
    assert not clock_moves(due, 7, 4_999)
    assert clock_moves(due, 7, 5_000)
    assert not clock_moves(DueTimes(7), 7, 10**12)  # nothing due, ever


def test_the_clock_ticks_when_the_map_is_not_known_or_behind_the_commit_log() -> None:
    assert clock_moves(None, None, 0)
    assert clock_moves(None, 3, 0)
    assert clock_moves(DueTimes(6, {}), 7, 0)  # batch 7's commit could not write it
    assert not clock_moves(DueTimes(NO_BATCH, {}), None, 0)  # a new checkpoint


def test_the_file_round_trips_private_and_whole(tmp_path: Path) -> None:
    due = DueTimes(12, {3: 1_700_000_000_123, 0: 5})
    due_times.write(tmp_path, due)
    assert due_times.read(tmp_path) == due
    path = due_times_file(tmp_path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert [p.name for p in tmp_path.iterdir()] == [path.name]  # no partial file left


def test_a_missing_or_torn_file_reads_as_unknown(tmp_path: Path) -> None:
    assert due_times.read(tmp_path) is None
    due_times_file(tmp_path).write_text('{"batch": 3, "tim', encoding="utf-8")
    assert due_times.read(tmp_path) is None


def test_a_new_checkpoint_starts_known_and_empty_but_an_old_one_does_not(tmp_path: Path) -> None:
    new, old = tmp_path / "new", tmp_path / "old"
    new.mkdir()
    log_folder(old, COMMIT_LOG).mkdir(parents=True)
    (log_folder(old, COMMIT_LOG) / "4").write_text("v1", encoding="utf-8")
    due_times.start_known(new)
    due_times.start_known(old)
    assert due_times.read(new) == DueTimes(NO_BATCH)
    assert due_times.read(old) is None
    assert due_times.last_committed(old) == 4
    assert due_times.last_committed(new) is None


def test_starting_again_keeps_the_map_a_run_wrote(tmp_path: Path) -> None:
    due_times.write(tmp_path, DueTimes(NO_BATCH, {1: 10}))
    due_times.start_known(tmp_path)
    assert due_times.read(tmp_path) == DueTimes(NO_BATCH, {1: 10})
