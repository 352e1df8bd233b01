"""Reading which micro-batches a checkpoint's logs hold, as Spark leaves them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from daemon.checkpoint.batch_logs import batches, last_committed, last_planned, planned_batch
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
