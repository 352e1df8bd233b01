"""A checkpoint remembers the pipeline shape that wrote it and refuses another."""

from __future__ import annotations

import json
import shutil
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest

from daemon.checkpoint.layout import COMMIT_LOG, OFFSET_LOG, log_folder, seed_folder, shape_file
from daemon.model.config import PipelineConfig
from daemon.operator.state_format import STATE_FORMAT
from daemon.pipeline import written_by
from daemon.pipeline.checkpoint_shape import (
    IncompatibleCheckpointError,
    NewerCheckpointError,
    NoCheckpointError,
    OtherSparkCheckpointError,
    check_checkpoint,
    pending_batch,
    ran_continuous,
    verify_checkpoint,
)


def pipeline(tmp_path: Path, **changes: object) -> PipelineConfig:
    base = {
        "name": "views",
        "joiner": "comap",
        "checkpoint": tmp_path / "checkpoint",
        "inputs": {
            "one": {"topic": "users", "schema": "user.avsc", "key": "id"},
            "many": {"topic": "tweets", "schema": "tweet.avsc", "key": "author_id"},
        },
        "output": {"topic": "views", "schema": "view.avsc"},
        "options": {"many_id": "id"},
    }
    return PipelineConfig.model_validate({**base, **changes})


def first_start(tmp_path: Path, **changes: object) -> None:
    """A start that records its shape and runs a micro-batch: Spark's offset log has entry 0."""
    check_checkpoint(pipeline(tmp_path, **changes))
    log_folder(tmp_path / "checkpoint", OFFSET_LOG).mkdir()
    (log_folder(tmp_path / "checkpoint", OFFSET_LOG) / "0").write_text("v1\n")


def test_the_first_start_records_the_shape_and_the_same_shape_resumes(tmp_path: Path) -> None:
    check_checkpoint(pipeline(tmp_path))
    assert shape_file(tmp_path / "checkpoint").exists()
    # Options and outputs may change between runs.
    check_checkpoint(pipeline(tmp_path, options={"many_id": "id", "max_many_per_key": 5}))


def test_another_joiner_topic_or_key_is_refused_saying_what_changed(tmp_path: Path) -> None:
    first_start(tmp_path)
    inputs = {
        "one": {"topic": "people", "schema": "user.avsc", "key": "id"},
        "many": {"topic": "tweets", "schema": "tweet.avsc", "key": "user_id"},
    }
    with pytest.raises(IncompatibleCheckpointError) as caught:
        check_checkpoint(pipeline(tmp_path, inputs=inputs))
    message = str(caught.value)
    assert "input 'many' key 'author_id' is now 'user_id'" in message
    assert "input 'one' topic 'users' is now 'people'" in message
    assert "start over" in message and "\n" not in message
    with pytest.raises(IncompatibleCheckpointError, match="joiner 'comap' is now 'asof'"):
        check_checkpoint(pipeline(tmp_path, joiner="asof"))


def test_the_shape_records_the_state_format_and_another_bucket_count_is_refused(
    tmp_path: Path,
) -> None:
    first_start(tmp_path)
    shape = json.loads(shape_file(tmp_path / "checkpoint").read_text())
    assert shape["state"] == {"format": STATE_FORMAT, "buckets": 32}
    check_checkpoint(pipeline(tmp_path, state_buckets=32))
    with pytest.raises(IncompatibleCheckpointError, match="state_buckets 32 is now 64"):
        check_checkpoint(pipeline(tmp_path, state_buckets=64))
    assert verify_checkpoint(pipeline(tmp_path, state_buckets=64), any_layout=True) == shape


def test_state_of_a_pre_release_layout_is_refused(tmp_path: Path) -> None:
    first_start(tmp_path)
    path = shape_file(tmp_path / "checkpoint")
    layout = "pickled keys in 32 buckets, stashes in a log per bucket"
    path.write_text(json.dumps({**json.loads(path.read_text()), "state": layout}))
    with pytest.raises(IncompatibleCheckpointError, match="of a pre-release enrichd"):
        check_checkpoint(pipeline(tmp_path))


def test_a_composite_key_and_its_key_format_are_recorded_and_checked(tmp_path: Path) -> None:
    composite = {
        "one": {
            "topic": "users",
            "schema": "user.avsc",
            "key": ["kafka_key.tenant", "kafka_key.id"],
            "key_format": "json",
        },
        "many": {"topic": "tweets", "schema": "tweet.avsc", "key": ["tenant", "author_id"]},
    }
    first_start(tmp_path, inputs=composite)
    shape = json.loads(shape_file(tmp_path / "checkpoint").read_text())
    assert shape["inputs"]["one"] == {
        "topic": "users",
        "key": ["kafka_key.tenant", "kafka_key.id"],
        "time": None,
        "key_format": "json",
    }
    assert "key_format" not in shape["inputs"]["many"]  # the default is not written
    check_checkpoint(pipeline(tmp_path, inputs=composite))
    as_avro = {**composite, "one": {**composite["one"], "key_format": "avro"}}
    with pytest.raises(IncompatibleCheckpointError, match="input 'one' key_format 'json' is now"):
        check_checkpoint(pipeline(tmp_path, inputs=as_avro))
    reordered = {**composite, "many": {**composite["many"], "key": ["author_id", "tenant"]}}
    with pytest.raises(IncompatibleCheckpointError, match="input 'many' key"):
        check_checkpoint(pipeline(tmp_path, inputs=reordered))
    debezium = {**composite, "many": {**composite["many"], "envelope": "debezium"}}
    with pytest.raises(IncompatibleCheckpointError, match="envelope None is now 'debezium'"):
        check_checkpoint(pipeline(tmp_path, inputs=debezium))


def recorded(tmp_path: Path, **changes: object) -> dict[str, Any]:
    """The checkpoint's shape file with ``changes`` written into it; what it held before."""
    path = shape_file(tmp_path / "checkpoint")
    was: dict[str, Any] = json.loads(path.read_text())
    path.write_text(json.dumps({**was, **changes}))
    return was


def test_state_of_a_newer_format_is_refused_with_one_line_naming_both(tmp_path: Path) -> None:
    first_start(tmp_path)
    newer = {"format": STATE_FORMAT + 1, "buckets": 32}
    recorded(tmp_path, state=newer, written_by={"enrichd": "9.1.0", "pyspark": "4.3.0"})
    this = written_by.running()["enrichd"]
    for check in (check_checkpoint, verify_checkpoint):
        with pytest.raises(NewerCheckpointError) as caught:
            check(pipeline(tmp_path))
        message = str(caught.value)
        assert "holds state in format 3 (made by enrichd 9.1.0)" in message, message
        assert f"this enrichd {this} reads (state formats 1 to 2)" in message
        assert "run enrichd 9.1.0 or newer" in message and "`daemon restore`" in message
        assert "\n" not in message


def test_a_checkpoint_of_format_1_is_taken_up_to_format_2_when_it_starts(tmp_path: Path) -> None:
    """Format 1 (no deltas) reads as format 2; the start records format 2 before the query can
    write a delta, so that an enrichd of format 1 refuses the checkpoint from then on."""
    first_start(tmp_path)
    recorded(tmp_path, state={"format": 1, "buckets": 32})
    assert verify_checkpoint(pipeline(tmp_path))["state"]["format"] == 1  # read only
    check_checkpoint(pipeline(tmp_path))
    shape = json.loads(shape_file(tmp_path / "checkpoint").read_text())
    assert shape["state"] == {"format": 2, "buckets": 32}
    assert shape["written_by"] == written_by.running()


def test_a_checkpoint_records_the_enrichd_and_pyspark_that_made_it(tmp_path: Path) -> None:
    first_start(tmp_path)
    versions = json.loads(shape_file(tmp_path / "checkpoint").read_text())["written_by"]
    assert versions == {
        "enrichd": metadata.version("enrichd"),
        "pyspark": metadata.version("pyspark"),
    }
    # One made before they were recorded is taken for this pyspark's, and gets them.
    was = recorded(tmp_path)
    del was["written_by"]
    shape_file(tmp_path / "checkpoint").write_text(json.dumps(was))
    check_checkpoint(pipeline(tmp_path))
    again = json.loads(shape_file(tmp_path / "checkpoint").read_text())
    assert again["written_by"] == versions


def test_another_pyspark_minor_version_is_refused_at_the_start_only(tmp_path: Path) -> None:
    first_start(tmp_path)
    running = metadata.version("pyspark")
    major, minor = running.split(".")[:2]
    patch_of_ours = f"{major}.{minor}.99"
    recorded(tmp_path, written_by={"enrichd": "0.1.0", "pyspark": patch_of_ours})
    check_checkpoint(pipeline(tmp_path))  # another patch release is the same minor version
    other = f"{major}.{int(minor) + 1}.0"
    recorded(tmp_path, written_by={"enrichd": "0.1.0", "pyspark": other})
    with pytest.raises(OtherSparkCheckpointError) as caught:
        check_checkpoint(pipeline(tmp_path))
    message = str(caught.value)
    assert f"made by pyspark {other}, and this is pyspark {running}" in message, message
    assert f"pip install 'pyspark>={major}.{int(minor) + 1},<{major}.{int(minor) + 2}'" in message
    assert "`daemon snapshot`" in message and "`daemon rescale`" in message
    assert "\n" not in message
    verify_checkpoint(pipeline(tmp_path))  # the state commands (and rescale) may read it


def test_verifying_writes_nothing(tmp_path: Path) -> None:
    with pytest.raises(NoCheckpointError, match="holds nothing yet"):
        verify_checkpoint(pipeline(tmp_path))
    assert not (tmp_path / "checkpoint").exists()


def test_a_shape_from_a_start_that_ran_no_batch_is_replaced(tmp_path: Path) -> None:
    """A start that recorded its shape and then failed before its first micro-batch (the
    broker went away, say) left no offsets and no state: the next start, of any shape, takes
    the checkpoint, and its own shape counts from then on."""
    check_checkpoint(pipeline(tmp_path, joiner="asof"))
    check_checkpoint(pipeline(tmp_path))
    assert '"joiner": "comap"' in shape_file(tmp_path / "checkpoint").read_text()


def test_a_seeded_checkpoint_keeps_its_shape_before_its_first_batch(tmp_path: Path) -> None:
    """``daemon reset`` and ``daemon rescale`` leave a seed and no offsets: its state is laid
    out for the shape recorded, so a start of another shape is refused, as after a batch."""
    from daemon.state.seed import write_seed

    check_checkpoint(pipeline(tmp_path))
    write_seed(seed_folder(tmp_path / "checkpoint"), {"users/0": 5}, "reset")
    with pytest.raises(IncompatibleCheckpointError, match="state_buckets 32 is now 64"):
        check_checkpoint(pipeline(tmp_path, state_buckets=64))


def test_the_pending_batch_is_the_last_planned_one_not_yet_committed(tmp_path: Path) -> None:
    assert pending_batch(tmp_path) is None  # nothing planned yet
    for log, batches in ((OFFSET_LOG, (0, 1, 2)), (COMMIT_LOG, (0, 1))):
        log_folder(tmp_path, log).mkdir()
        for batch in batches:
            (log_folder(tmp_path, log) / str(batch)).write_text("v1")
    (log_folder(tmp_path, OFFSET_LOG) / ".2.crc").write_text("")  # checksum files are no batches
    assert pending_batch(tmp_path) == 2
    (log_folder(tmp_path, COMMIT_LOG) / "2").write_text("v1")
    assert pending_batch(tmp_path) is None  # all committed: the next one fails in planning


def _tables(*keys: str, revisions: bool = True) -> dict[str, object]:
    """A lookup of several tables: options and inputs, table ``t{i}`` read by ``keys[i]``."""
    inputs: dict[str, object] = {
        "stream": {"topic": "orders", "schema": "o.avsc", "key": "customer_id", "field": "order"}
    }
    tables = []
    for number, key in enumerate(keys):
        inputs[f"t{number}"] = {"topic": f"t{number}", "schema": "t.avsc", "key": "id"}
        tables.append({"input": f"t{number}", "lookup_key": key, "revisions": revisions})
    return {"joiner": "lookup", "inputs": inputs, "options": {"tables": tables}}


def test_a_lookup_of_tables_records_its_operators_and_a_change_of_them_is_refused(
    tmp_path: Path,
) -> None:
    first_start(tmp_path, **_tables("order.customer_id", "t0.region_id"))
    recorded = json.loads(shape_file(tmp_path / "checkpoint").read_text())
    assert recorded["operators"] == [
        "t0 by order.customer_id",
        "t1 by t0.region_id",
        "numbering",
    ]
    check_checkpoint(pipeline(tmp_path, **_tables("order.customer_id", "t0.region_id")))
    with pytest.raises(IncompatibleCheckpointError) as caught:
        check_checkpoint(pipeline(tmp_path, **_tables("order.customer_id", "order.region_id")))
    assert (
        "operators t0 by order.customer_id, t1 by t0.region_id, numbering are now "
        "t0 by order.customer_id, t1 by order.region_id, numbering"
    ) in str(caught.value)
    # Without revisions the chain has no numbering operator: another query.
    with pytest.raises(
        IncompatibleCheckpointError, match=r"numbering are now [^;]*t0\.region_id\)"
    ):
        check_checkpoint(
            pipeline(tmp_path, **_tables("order.customer_id", "t0.region_id", revisions=False))
        )


def test_a_pipeline_of_one_table_records_no_operators(tmp_path: Path) -> None:
    check_checkpoint(pipeline(tmp_path))
    assert "operators" not in json.loads(shape_file(tmp_path / "checkpoint").read_text())


def test_a_checkpoint_remembers_its_mode_and_a_start_in_the_other_is_refused(
    tmp_path: Path,
) -> None:
    first_start(tmp_path / "micro")
    with pytest.raises(IncompatibleCheckpointError) as caught:
        check_checkpoint(pipeline(tmp_path / "micro", mode="continuous"))
    assert "was run in mode = 'micro_batch', and the file now says mode = 'continuous'" in str(
        caught.value
    )
    first_start(tmp_path / "continuous", mode="continuous")
    assert json.loads(shape_file(tmp_path / "continuous" / "checkpoint").read_text())["mode"] == (
        "continuous"
    )
    check_checkpoint(pipeline(tmp_path / "continuous", mode="continuous"))
    with pytest.raises(IncompatibleCheckpointError, match="now says mode = 'micro_batch'"):
        verify_checkpoint(pipeline(tmp_path / "continuous"))


def test_rescale_takes_a_checkpoint_of_the_other_mode_or_other_leases(tmp_path: Path) -> None:
    first_start(tmp_path, mode="continuous", leases=2)
    written = verify_checkpoint(pipeline(tmp_path), any_layout=True)  # into micro-batch mode
    assert ran_continuous(written) and written["leases"] == 2
    verify_checkpoint(pipeline(tmp_path, mode="continuous"), any_layout=True)  # one lease
    with pytest.raises(IncompatibleCheckpointError, match="leases 2 are now 1 .`daemon rescale"):
        verify_checkpoint(pipeline(tmp_path, mode="continuous"))


def test_a_seeded_chain_refuses_a_start_or_a_rescale_of_another_chain(tmp_path: Path) -> None:
    """A rescale or a reset keeping state leaves a seed with a state per operator, laid out for
    the chain recorded: a start with other tables is refused, as after a batch, and so is a
    rescale (which moves the state into other buckets, never into other operators)."""
    from daemon.state.seed import write_seed

    first_start(tmp_path, **_tables("order.customer_id", "t0.region_id"))
    shutil.rmtree(log_folder(tmp_path / "checkpoint", OFFSET_LOG))  # moved aside by the seed
    write_seed(seed_folder(tmp_path / "checkpoint"), {"orders/0": 5}, "rescale")
    other = _tables("order.customer_id", "order.region_id")
    with pytest.raises(IncompatibleCheckpointError, match="t1 by t0.region_id, numbering are now"):
        check_checkpoint(pipeline(tmp_path, **other))
    with pytest.raises(IncompatibleCheckpointError, match="t1 by t0.region_id, numbering are now"):
        verify_checkpoint(pipeline(tmp_path, state_buckets=8, **other), any_layout=True)
    rescaled = pipeline(tmp_path, state_buckets=8, **_tables("order.customer_id", "t0.region_id"))
    verify_checkpoint(rescaled, any_layout=True)  # the same chain in other buckets: moved
