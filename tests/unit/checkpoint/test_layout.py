"""The checkpoint's names against a checkpoint Spark and enrichd really wrote."""

from __future__ import annotations

from pathlib import Path

from daemon.checkpoint import layout
from tests.fixtures.checkpoint_format_1 import FIXTURE


def test_spark_s_names_are_those_of_a_checkpoint_spark_wrote() -> None:
    # tests/fixtures/checkpoint-format-1 was made by a real query (its module says how).
    assert layout.metadata_file(FIXTURE).is_file()
    assert (layout.log_folder(FIXTURE, layout.OFFSET_LOG) / "0").is_file()
    assert (layout.log_folder(FIXTURE, layout.COMMIT_LOG) / "0").is_file()
    assert layout.state_folder(FIXTURE).is_dir()
    assert layout.shape_file(FIXTURE).is_file()


def test_enrichd_s_own_entries_are_told_apart_from_spark_s() -> None:
    own = {
        layout.LOCK,
        layout.SHAPE,
        layout.DUE_TIMES,
        layout.SEED,
        layout.SEED_STAGING,
    }
    spark = {layout.METADATA, layout.OFFSET_LOG, layout.COMMIT_LOG, layout.STATE}
    assert all(name.startswith("enrichd") for name in own)
    assert not any(name.startswith("enrichd") for name in spark | {layout.DOWNSTREAM})


def test_a_second_stage_and_a_backup_have_their_own_folders(tmp_path: Path) -> None:
    checkpoint = tmp_path / "views"
    assert layout.downstream(checkpoint, "totals") == checkpoint / "downstream" / "totals"
    backup = layout.backup_folder(checkpoint, "reset", "20250101T000000Z")
    assert backup == tmp_path / "views.before-reset-20250101T000000Z"
