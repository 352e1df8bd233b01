"""``daemon state``, ``reset``, ``rescale``, ``snapshot`` and ``restore`` on real checkpoints,
and the refusals of state and Spark files a start cannot read.

Every checkpoint here is made by the real engine (the session's broker and Spark) running the
tweet-views ``comap`` pipeline: here, or once for the kept checkpoint of state format 1
(``tests/fixtures/checkpoint_format_1.py``). The commands run through the command line's own
entry, in this process, so that they read state with the session's Spark.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from daemon.broker import EmbeddedBroker
from daemon.checkpoint import due_times
from daemon.checkpoint.batch_logs import last_committed
from daemon.checkpoint.due_times import NO_BATCH, DueTimes
from daemon.checkpoint.layout import COMMIT_LOG, OFFSET_LOG, log_folder, shape_file
from daemon.model.config import load_pipeline_file
from daemon.model.record_route import bucket_labels
from daemon.operator.state_format import STATE_FORMAT
from daemon.pipeline.checkpoint_shape import check_checkpoint
from daemon.pipeline.written_by import running
from daemon.state.reader import CheckpointState
from daemon.state.render import iso_ms, to_json
from tests.daemon_process import daemon_run
from tests.fixtures.checkpoint_format_1 import FIXTURE, kept_copy
from tests.kafka_helpers import In, groups_starting, produce, run_pipeline
from tests.state_helpers import (
    TWEETS,
    Tweets,
    copy_of,
    daemon,
    joined,
    listing,
    one_error_line,
    tweet,
    user,
)


@pytest.fixture(scope="module")
def ran(broker: EmbeddedBroker, tmp_path_factory: pytest.TempPathFactory) -> Tweets:
    """A pipeline that joined five users (one renamed) and twelve tweets, then stopped: a copy
    of the checkpoint of state format 1 kept in tests/fixtures, which the engine made."""
    return kept_copy(broker, tmp_path_factory.mktemp("ran"))


def _pending_deltas(spark: Any, checkpoint: Path) -> int:
    """Deltas the checkpoint's committed state holds after its buckets' values."""
    batch = last_committed(checkpoint)
    assert batch is not None
    return int(CheckpointState(spark, checkpoint, batch).deltas_frame().count())


def test_the_kept_checkpoint_is_small_of_format_1_and_the_engine_reads_on_from_it(
    ran: Tweets, spark: Any, tmp_path: Path
) -> None:
    """A new tweet by user 2, run by the engine on (a copy of) the kept checkpoint, is viewed
    with the name its state kept (user 2 was renamed), and nothing else is read. The start
    takes the checkpoint up to state format 2 (format 1 with no deltas yet), and records the
    versions of enrichd and pyspark, which format 1 did not."""
    size = sum(path.stat().st_size for path in FIXTURE.rglob("*") if path.is_file())
    assert size < 1_000_000
    shape = json.loads(shape_file(ran.checkpoint).read_text())
    assert shape["state"] == {"format": 1, "buckets": 4} and "written_by" not in shape
    path = copy_of(ran, tmp_path)
    produce(ran.conf, ran.tweets, [In(TWEETS.encode(tweet(100, 2, 4000)["value"]), b"100", 4000)])
    file = load_pipeline_file(path)
    check_checkpoint(file.pipeline[0])
    upgraded = json.loads(shape_file(file.pipeline[0].checkpoint).read_text())
    assert upgraded == {**shape, "state": {"format": 2, "buckets": 4}, "written_by": running()}
    assert run_pipeline(spark, file) == [1]
    views = ran.views()
    assert [(view["id"], view["author"]["name"]) for view in views] == [(100, "renamed")]


def test_state_of_a_key_is_what_the_joiner_holds_after_a_replay(
    ran: Tweets, capsys: pytest.CaptureFixture[str]
) -> None:
    expected = joined(ran).states
    assert sorted(expected) == ["1", "2", "3", "4", "5"]
    for key, state in expected.items():
        done = daemon(capsys, "state", str(ran.path), "--key", key)
        assert done.code == 0, done.err
        shown = json.loads(done.out)
        assert (shown["pipeline"], shown["key"], shown["micro_batch"]) == (ran.name, key, 0)
        assert shown["state"] == to_json(state)
    two = json.loads(daemon(capsys, "state", str(ran.path), "--key", "2").out)
    assert two["state"]["one"]["name"] == "renamed"
    assert sorted(two["state"]["many"]) == ["1", "5", "9"]  # the stashed tweets, by id
    assert two["event_time"] == iso_ms(3000) and two["ended"] is False


def test_the_summary_counts_keys_bytes_and_event_times_per_bucket(
    ran: Tweets, capsys: pytest.CaptureFixture[str]
) -> None:
    done = daemon(capsys, "state", str(ran.path), "--summary")
    assert done.code == 0, done.err
    shown = json.loads(done.out)
    newest: dict[str, int] = {}  # each author's newest record: every record changed its state
    for role, key_field in (("one", "id"), ("many", "author_id")):
        for record in ran.records[role]:
            key = str(record["value"][key_field])
            newest[key] = max(newest.get(key, 0), record["timestamp"])
    assert shown["keys"] == 5 and shown["micro_batch"] == 0
    assert shown["oldest_event_time"] == iso_ms(min(newest.values()))
    assert shown["newest_event_time"] == iso_ms(3000)
    assert sum(bucket["keys"] for bucket in shown["buckets"]) == 5
    assert {bucket["bucket"] for bucket in shown["buckets"]} <= set(bucket_labels(4))
    assert all(bucket["bytes"] > 0 for bucket in shown["buckets"])
    assert sum(bucket["stashed_values"] for bucket in shown["buckets"]) == 12
    assert shown["bytes"] == sum(bucket["bytes"] for bucket in shown["buckets"])


def test_bad_requests_get_one_line_and_change_nothing(
    ran: Tweets, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    before = listing(ran.checkpoint)
    path = str(ran.path)
    line = one_error_line(daemon(capsys, "state", path, "--key", "42"))
    assert "no state for key '42'" in line
    line = one_error_line(daemon(capsys, "state", path, "--pipeline", "nope", "--summary"))
    assert "no pipeline 'nope'" in line
    line = one_error_line(daemon(capsys, "reset", path, "--pipeline", "nope", "--to", "latest"))
    assert "no pipeline 'nope'" in line
    line = one_error_line(daemon(capsys, "state", path))
    assert "--key KEY or --summary" in line
    line = one_error_line(daemon(capsys, "reset", path, "--to", "yesterday"))
    assert "--to 'yesterday'" in line

    # The same pipeline on another users topic: a checkpoint of another shape.
    other = tmp_path / "other.toml"
    other.write_text(ran.path.read_text().replace(f'"{ran.users}"', '"people"'))
    for command in (
        ["state", str(other), "--summary"],
        ["reset", str(other), "--to", "earliest", "--yes"],
        ["rescale", str(other), "--yes"],
    ):
        line = one_error_line(daemon(capsys, *command))
        assert f"input 'one' topic {ran.users!r} is now 'people'" in line, line

    # Asked to confirm, the operator says no.
    done = daemon(capsys, "reset", path, "--to", "earliest", answer="n\n")
    assert "users" in done.out and "-> 0" in done.out  # what it would change, shown first
    assert "reset cancelled; nothing changed" in one_error_line(done)
    assert listing(ran.checkpoint) == before


def test_reset_to_a_time_reads_exactly_the_records_from_there(
    broker: EmbeddedBroker,
    spark: Any,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Ten users, then twenty tweets of them: each tweet makes one view. Reset to the time of
    tweet 12 keeping the state, the next run reads tweets 12-19 again and views them again
    (the users are in the kept state); reset to the time of user 8 dropping it, the next run
    reads users 8-9 and every tweet, and views only the tweets of users 8 and 9. Each reset
    deletes the marker groups of the checkpoint it replaces ([kafka] id_prefix's)."""
    tweets = Tweets(broker, tmp_path, kafka={"id_prefix": "reset-env"})
    markers = f"reset-env.{tweets.name}.marker."
    tweets.produce(
        users=[user(i, 1000 + i) for i in range(10)],
        tweets=[tweet(t, t % 10, 2000 + t) for t in range(20)],
    )
    tweets.run(spark)
    first = tweets.views()
    assert sorted(view["id"] for view in first) == list(range(20))
    old_markers = groups_starting(tweets.conf, markers)
    assert old_markers, "the run left no marker groups named by its id_prefix"
    assert groups_starting(tweets.conf, f"enrichd.{tweets.name}.") == []

    done = daemon(capsys, "reset", str(tweets.path), "--to", "2012", "--keep-state", "--yes")
    assert done.code == 0, done.err
    assert "state kept" in done.out
    assert f"deleted the old checkpoint's marker groups: {', '.join(old_markers)}" in done.out
    assert groups_starting(tweets.conf, markers) == []
    backups = list(tmp_path.glob("checkpoint.before-reset-*"))
    assert len(backups) == 1 and (log_folder(backups[0], COMMIT_LOG) / "0").exists()
    assert tweets.run(spark) == [0]  # a new checkpoint: its micro-batches count from 0
    second = tweets.views()
    again = Counter(view["id"] for view in second) - Counter(view["id"] for view in first)
    assert sorted(again.elements()) == list(range(12, 20))
    assert all(view["author"]["id"] == view["tweet"]["author_id"] for view in second)

    new_markers = groups_starting(tweets.conf, markers)
    assert new_markers and not set(new_markers) & set(old_markers)

    iso = iso_ms(1008)
    assert iso is not None
    done = daemon(capsys, "reset", str(tweets.path), "--to", iso, "--yes")
    assert done.code == 0, done.err
    assert "state dropped" in done.out
    assert groups_starting(tweets.conf, markers) == []
    tweets.run(spark)
    last = Counter(view["id"] for view in tweets.views()) - Counter(view["id"] for view in second)
    assert sorted(last.elements()) == [t for t in range(20) if t % 10 in (8, 9)]


def test_a_reset_keeping_state_shows_the_state_before_the_next_start(
    ran: Tweets, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """State kept by a reset waits in the checkpoint's seed; daemon state reads it there."""
    copy = copy_of(ran, tmp_path)
    done = daemon(capsys, "reset", str(copy), "--to", "latest", "--keep-state", "--yes")
    assert done.code == 0, done.err
    shown = json.loads(daemon(capsys, "state", str(copy), "--key", "2").out)
    assert shown["micro_batch"] is None and "seeded" in shown
    assert shown["state"] == to_json(joined(ran).states["2"])
    summary = json.loads(daemon(capsys, "state", str(copy), "--summary").out)
    assert summary["keys"] == 5


def test_rescale_moves_the_state_and_a_snapshot_puts_it_back_after_the_pipeline_ran_on(
    broker: EmbeddedBroker,
    spark: Any,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Rescaled from 32 buckets over 2 partitions to 4 buckets over 1, the pipeline reads on
    where it stopped with every key's state: a user's rename fans out to all their tweets.
    A snapshot of it, restored after the pipeline ran on, gives back its state, and the
    batch after it is written again.

    The users come in the first of four micro-batches and their tweets in the next three, so
    the buckets hold deltas after their values ([state] deltas) when ``daemon state`` and the
    rescale read them. (One pipeline for both: each query start costs seconds.)"""
    tweets = Tweets(broker, tmp_path, buckets=32, partitions=2, max_records_per_batch=6)
    tweets.produce(
        users=[user(i, 1000 + i) for i in range(6)],
        tweets=[tweet(t, t % 6, 2000 + t) for t in range(18)],
    )
    assert len(tweets.run(spark)) >= 4
    assert _pending_deltas(spark, tweets.checkpoint) > 0
    before = json.loads(daemon(capsys, "state", str(tweets.path), "--key", "3").out)
    assert before["state"] == to_json(joined(tweets).states["3"])  # the value and its deltas
    whole = json.loads(daemon(capsys, "state", str(tweets.path), "--summary").out)
    assert whole["keys"] == 6 and sum(b["stashed_values"] for b in whole["buckets"]) == 18

    markers = f"enrichd.{tweets.name}.marker."  # the default id_prefix
    assert groups_starting(tweets.conf, markers)
    tweets.write(buckets=4, partitions=1)
    done = daemon(capsys, "rescale", str(tweets.path), "--yes")
    assert done.code == 0, done.err
    assert "deleted the old checkpoint's marker groups" in done.out
    assert groups_starting(tweets.conf, markers) == []
    assert "from 32 buckets over 2 shuffle partitions into 4 buckets over 1" in done.out
    moved = json.loads(daemon(capsys, "state", str(tweets.path), "--key", "3").out)
    assert moved["state"] == before["state"] and moved["bucket"] in bucket_labels(4)
    # The new checkpoint knows when its seeded keys are due (comap's never are), so a
    # pipeline that wakes keys would run no batch before one is.
    assert due_times.read(tweets.checkpoint) == DueTimes(NO_BATCH, {})

    tweets.produce(users=[user(3, 5000, "renamed")])
    setting = "spark.sql.shuffle.partitions"  # the running session's, as a new query takes it
    was = spark.conf.get(setting)
    spark.conf.set(setting, "1")
    try:
        assert tweets.run(spark) == [0]
    finally:
        spark.conf.set(setting, was)
    renamed = [view for view in tweets.views() if view["author"]["name"] == "renamed"]
    assert sorted(view["id"] for view in renamed) == [3, 9, 15]
    summary = json.loads(daemon(capsys, "state", str(tweets.path), "--summary").out)
    assert summary["keys"] == 6
    assert {bucket["bucket"] for bucket in summary["buckets"]} <= set(bucket_labels(4))
    offsets = (log_folder(tweets.checkpoint, OFFSET_LOG) / "0").read_text().splitlines()
    assert json.loads(offsets[1])["conf"][setting] == "1"

    done = daemon(capsys, "rescale", str(tweets.path), "--yes")
    assert done.code == 0 and "nothing to rescale" in done.out

    # A snapshot of the rescaled checkpoint; then user 3 renamed again, and joined.
    snapped = last_committed(tweets.checkpoint)
    snapshot = tmp_path / "snapshot"
    done = daemon(capsys, "snapshot", str(tweets.path), "--to", str(snapshot))
    assert done.code == 0, done.err
    kept = json.loads(daemon(capsys, "state", str(tweets.path), "--key", "3").out)
    assert kept["micro_batch"] == snapped and kept["state"]["one"]["name"] == "renamed"
    tweets.produce(users=[user(3, 6000, "again")])
    assert tweets.run(spark) == [snapped + 1], snapped
    assert Counter(v["id"] for v in tweets.views() if v["author"]["name"] == "again") == {
        3: 1,
        9: 1,
        15: 1,
    }

    # Restored, the state is the snapshot's, and the next run reads the rename again and
    # writes its views again: the restored checkpoint is a query of its own, which the
    # markers of the batch that ran after the snapshot do not silence.
    done = daemon(capsys, "restore", str(tweets.path), "--from", str(snapshot), "--yes")
    assert done.code == 0, done.err
    backups = tweets.checkpoint.parent.glob(f"{tweets.checkpoint.name}.before-restore-*")
    assert len(list(backups)) == 1
    assert json.loads(daemon(capsys, "state", str(tweets.path), "--key", "3").out) == kept
    assert tweets.run(spark) == [snapped + 1]
    again = Counter(v["id"] for v in tweets.views() if v["author"]["name"] == "again")
    assert again == {3: 2, 9: 2, 15: 2}


def test_a_start_refuses_a_newer_state_format_or_another_pyspark_with_one_line(
    ran: Tweets, tmp_path: Path
) -> None:
    """Refused before Spark starts, each with one line naming both versions and the ways on."""
    path = copy_of(ran, tmp_path)
    shape_path = shape_file(tmp_path / "checkpoint")
    shape = json.loads(shape_path.read_text())
    pyspark = running()["pyspark"]
    major, minor = pyspark.split(".")[:2]
    other = f"{major}.{int(minor) + 1}.1"
    shape_path.write_text(
        json.dumps({**shape, "written_by": {"enrichd": "0.0.9", "pyspark": other}})
    )
    done = daemon_run(path)
    assert done.returncode == 1 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith(f"error: pipeline '{ran.name}': checkpoint ")
    assert f"made by pyspark {other}, and this is pyspark {pyspark}" in line, line
    assert f"pip install 'pyspark>={major}.{int(minor) + 1},<{major}.{int(minor) + 2}'" in line

    newer = {**shape, "state": {"format": STATE_FORMAT + 1, "buckets": 4}}
    newer["written_by"] = {**running(), "enrichd": "9.0.0"}
    shape_path.write_text(json.dumps(newer))
    done = daemon_run(path)
    assert done.returncode == 1 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert f"holds state in format {STATE_FORMAT + 1} (made by enrichd 9.0.0)" in line, line
    assert f"reads (state formats 1 to {STATE_FORMAT}); run enrichd 9.0.0 or newer" in line

def test_state_shows_when_a_key_expires_and_that_it_has(
    broker: EmbeddedBroker, spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """With a ``state_ttl``, a key's state expires that long after it last changed. Between
    then and the micro-batch whose timer drops it (none runs here: the pipeline stopped), the
    joiner no longer sees it, and ``daemon state`` says so, for the key and in the summary."""
    tweets = Tweets(broker, tmp_path, buckets=4)
    text = tweets.path.read_text()
    tweets.path.write_text(text.replace('many_id = "id"', 'many_id = "id"\nstate_ttl = "2s"'))
    tweets.produce(users=[user(1, 1000)], tweets=[tweet(7, 1, 2000)])
    assert tweets.run(spark)
    shown = json.loads(daemon(capsys, "state", str(tweets.path), "--key", "1").out)
    expires = shown["updated_ms"] + 2000
    assert shown["expires_ms"] == expires and shown["state"]["one"]["name"] == "user 1"
    while time.time() * 1000 < expires:  # wall-clock time the TTL counts, not a speed
        time.sleep(0.1)
    shown = json.loads(daemon(capsys, "state", str(tweets.path), "--key", "1").out)
    assert shown["expired"] is True and shown["expires_ms"] == expires
    summary = json.loads(daemon(capsys, "state", str(tweets.path), "--summary").out)
    assert (summary["keys"], summary["expired_keys"]) == (1, 1)


def test_a_key_stored_without_a_ttl_shows_none_until_its_next_change(
    ran: Tweets, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """The kept checkpoint ran without a TTL: with one set now, its keys' TTLs count from
    their next change (as the engine counts them), so none shows as expired."""
    copy = copy_of(ran, tmp_path)
    copy.write_text(copy.read_text().replace('many_id = "id"', 'many_id = "id"\nstate_ttl = "1ms"'))
    shown = json.loads(daemon(capsys, "state", str(copy), "--key", "2").out)
    assert (shown["expires_ms"], shown["expired"]) == (None, False)
    summary = json.loads(daemon(capsys, "state", str(copy), "--summary").out)
    assert summary["expired_keys"] == 0
