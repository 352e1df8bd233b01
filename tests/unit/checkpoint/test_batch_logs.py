"""Reading which micro-batches a checkpoint's logs hold, as Spark leaves them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from daemon.checkpoint.batch_logs import (
    batches,
    drop_unfinished_first_entry,
    last_committed,
    last_planned,
    planned_batch,
)
from daemon.checkpoint.layout import COMMIT_LOG, OFFSET_LOG, log_folder
from daemon.model.wire import CLOCK


def spark_log(checkpoint: Path, log: str, *names: str) -> None:
    folder = log_folder(checkpoint, log)
    folder.mkdir(parents=True, exist_ok=True)
    for name in names:
        (folder / name).write_text("v1\n", encoding="utf-8")


def test_a_new_checkpoint_has_no_batches(tmp_path: Path) -> None:
    assert batches(tmp_path, OFFSET_LOG) == []
    assert (last_planned(tmp_path), last_committed(tmp_path)) == (None, None)


def test_batches_are_the_digit_named_entries_in_numeric_order(tmp_path: Path) -> None:
    # Spark writes a hidden checksum beside each entry, and leaves temporary files while
    # it writes; neither is a batch. 10 sorts after 9 as a number, not as text.
    spark_log(tmp_path, OFFSET_LOG, "9", "10", ".10.crc", "8", ".8.tmp")
    spark_log(tmp_path, COMMIT_LOG, "8", "9", ".9.crc")
    assert batches(tmp_path, OFFSET_LOG) == [8, 9, 10]
    assert (last_planned(tmp_path), last_committed(tmp_path)) == (10, 9)


def test_a_planned_batch_reads_spark_s_metadata_and_each_source_s_offset(tmp_path: Path) -> None:
    log_folder(tmp_path, OFFSET_LOG).mkdir()
    metadata = {"batchWatermarkMs": 0, "conf": {"spark.sql.shuffle.partitions": "4"}}
    source = {"users/0": 3, "users/1": 5, CLOCK: 1_000}
    (log_folder(tmp_path, OFFSET_LOG) / "7").write_text(
        f"v1\n{json.dumps(metadata)}\n{json.dumps(source)}\n-", encoding="utf-8"
    )
    entry = planned_batch(tmp_path, 7)
    assert entry.conf == {"spark.sql.shuffle.partitions": "4"}
    assert entry.sources == [source, None]  # a source without an offset yet is written "-"
    assert entry.ends == {"users/0": 3, "users/1": 5}  # the partitions' alone
    with pytest.raises(OSError):
        planned_batch(tmp_path, 8)


TEMPORARY = ".0.5f1c2d9e-0b7a-4c55-9a43-3c1e2f1d8b10.tmp"
"""The name Spark's rename-based write gives offsets/0 while it writes it."""


def test_a_first_entry_cut_short_by_a_kill_is_removed_so_that_spark_starts(
    tmp_path: Path,
) -> None:
    # Killed between the write and the rename of offsets/0: Spark would refuse the folder.
    spark_log(tmp_path, OFFSET_LOG, TEMPORARY, f".{TEMPORARY}.crc")
    spark_log(tmp_path, COMMIT_LOG)
    assert drop_unfinished_first_entry(tmp_path) == sorted(
        [f"{OFFSET_LOG}/{TEMPORARY}", f"{OFFSET_LOG}/.{TEMPORARY}.crc"]
    )
    assert list(log_folder(tmp_path, OFFSET_LOG).iterdir()) == []
    assert drop_unfinished_first_entry(tmp_path) == []  # nothing left, nothing to do


def test_a_log_with_an_entry_keeps_every_file(tmp_path: Path) -> None:
    # Spark passes over a later entry's temporary file itself; what a started query holds
    # is never touched, nor a file Spark did not leave (it refuses the folder, rightly).
    spark_log(tmp_path, OFFSET_LOG, "0", ".0.crc", ".1.abc.tmp")
    assert drop_unfinished_first_entry(tmp_path) == []
    assert len(list(log_folder(tmp_path, OFFSET_LOG).iterdir())) == 3
    stranger = tmp_path / "other"
    spark_log(stranger, OFFSET_LOG, "notes.txt")
    assert drop_unfinished_first_entry(stranger) == []
    assert (log_folder(stranger, OFFSET_LOG) / "notes.txt").exists()
