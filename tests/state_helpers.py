"""Helpers for the tests of the state commands: a pipeline on disk, the CLI in-process."""

from __future__ import annotations

import io
import shutil
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from daemon.broker import EmbeddedBroker
from daemon.checkpoint.batch_logs import last_committed, planned_past_commit
from daemon.checkpoint.copied import own_schema_paths
from daemon.checkpoint.layout import LOCK
from daemon.joiners.comap import CoMap
from daemon.model.config import load_pipeline_file
from daemon.pipeline.checkpoint_shape import check_checkpoint
from daemon.pipeline.plan import end_long_batches, plan_pipeline, start_query
from daemon.sink.task_producer import forget_kept_clients
from daemon.testing import run_joiner
from tests.kafka_helpers import (
    SCHEMAS,
    TWEETS,
    USERS,
    VIEWS,
    In,
    client_conf,
    fresh_tweet_views,
    produce,
    read_topic,
)
from tests.kafka_helpers import run_pipeline as run_query


@dataclass(frozen=True)
class Done:
    """What a ``daemon`` command run in-process did."""

    code: int
    out: str
    err: str


def daemon(capsys: pytest.CaptureFixture[str], *args: str, answer: str = "") -> Done:
    """``daemon ARGS`` through the command line's own entry (``daemon.cli.main``), in-process.

    In-process, so that a command that reads state uses the test session's Spark; ``answer``
    is what the operator types at a prompt.
    """
    from daemon.cli import main

    capsys.readouterr()
    argv, stdin = sys.argv, sys.stdin
    sys.argv, sys.stdin = ["daemon", *args], io.StringIO(answer)
    code: Any = 0
    try:
        main()
    except SystemExit as exit_:
        code = exit_.code
    finally:
        sys.argv, sys.stdin = argv, stdin
    captured = capsys.readouterr()
    return Done(int(code or 0), captured.out, captured.err)


def one_error_line(done: Done) -> str:
    """The one ``error:`` line of a command that failed with exit code 1."""
    assert done.code == 1, (done.out, done.err)
    (line,) = done.err.strip().splitlines()
    assert line.startswith("error: "), line
    return line


def listing(folder: Path) -> dict[str, tuple[int, int]]:
    """Every file under ``folder`` with its size and modification time, to show nothing moved.

    The lock file is left out: a command that holds the checkpoint leaves it, as ``daemon
    run`` does, and it holds nothing but the last holder's pid.
    """
    return {
        str(path.relative_to(folder)): (path.stat().st_size, path.stat().st_mtime_ns)
        for path in sorted(folder.rglob("*"))
        if path.is_file() and path.name != LOCK
    }


def run_continuous(spark: Any, path: Path, servers: str, done: Callable[[], bool]) -> None:
    """Run the file's one pipeline, in continuous mode, until ``done()``, then stop it as the
    daemon does: its long batch ends and commits (its state written) before the query stops."""
    file = load_pipeline_file(path)
    pipe = file.pipeline[0]
    check_checkpoint(pipe)
    plan = plan_pipeline(file, pipe, client_conf(servers))
    query = start_query(spark, plan)
    try:
        deadline = time.monotonic() + 120
        while not done():
            assert time.monotonic() < deadline, "the continuous run did not join its input"
            time.sleep(0.25)
        end_long_batches(plan)
        while last_committed(pipe.checkpoint) is None or planned_past_commit(pipe.checkpoint):
            assert time.monotonic() < deadline, "the long batch did not end"
            time.sleep(0.1)
    finally:
        query.stop()
        forget_kept_clients()


def user(i: int, at: int, name: str | None = None) -> dict[str, Any]:
    return {"key": str(i), "value": {"id": i, "name": name or f"user {i}"}, "timestamp": at}


def tweet(t: int, author: int, at: int) -> dict[str, Any]:
    return {
        "key": str(t),
        "value": {"id": t, "author_id": author, "content": f"tweet {t}"},
        "timestamp": at,
    }


class Tweets:
    """Fresh users and tweets topics, a comap pipeline file on them, and its checkpoint."""

    def __init__(
        self, broker: EmbeddedBroker, folder: Path, *, stem: str | None = None, **file: Any
    ) -> None:
        """Topics named after ``stem`` (a fresh one if None), with two partitions each; the
        file written with ``file`` (what :meth:`TweetViews.write` takes)."""
        stem = stem or uuid.uuid4().hex[:8]
        self.setup = fresh_tweet_views(
            broker.bootstrap_servers, lambda name: f"{name}-{stem}", folder, partitions=2
        )
        self.conf, self.name = self.setup.conf, self.setup.name
        self.users, self.tweets = self.setup.users, self.setup.tweets
        self.output = self.setup.output
        self.checkpoint, self.path = self.setup.checkpoint, self.setup.path
        self.write(**file)
        self.records: dict[str, list[dict[str, Any]]] = {"one": [], "many": []}

    def write(self, **file: Any) -> None:
        """Write the pipeline file again, with ``file``'s settings."""
        self.setup.write(**file)

    def produce(
        self, users: list[dict[str, Any]] | None = None, tweets: list[dict[str, Any]] | None = None
    ) -> None:
        for topic, codec, role, records in (
            (self.users, USERS, "one", users or []),
            (self.tweets, TWEETS, "many", tweets or []),
        ):
            produce(
                self.conf,
                topic,
                [In(codec.encode(r["value"]), r["key"].encode(), r["timestamp"]) for r in records],
            )
            self.records[role].extend(records)

    def run(self, spark: Any) -> list[int]:
        """Run the pipeline until it has read everything, as ``daemon run`` would start it."""
        file = load_pipeline_file(self.path)
        check_checkpoint(file.pipeline[0])
        return run_query(spark, file)

    def views(self) -> list[dict[str, Any]]:
        return [VIEWS.decode(r.value or b"") for r in read_topic(self.conf, self.output)]


def copy_of(ran: Tweets, folder: Path) -> Path:
    """A pipeline file like ``ran``'s on a copy of its checkpoint in ``folder``."""
    checkpoint = folder / "checkpoint"
    shutil.copytree(ran.checkpoint, checkpoint)
    checkpoint.chmod(0o700)  # as enrichd makes a checkpoint: a start would warn and close it
    own_schema_paths(checkpoint)  # Spark's operator metadata names them by absolute path
    path = folder / "copy.toml"
    path.write_text(ran.path.read_text().replace(str(ran.checkpoint), str(checkpoint)))
    return path


def joined(tweets: Tweets) -> Any:
    """What the comap joiner holds after these inputs, run in plain Python (daemon.testing)."""
    return run_joiner(
        CoMap,
        tweets.records,
        keys={"one": "id", "many": "author_id"},
        options={"many_id": "id"},
        fields={"one": "author", "many": "tweet"},
        schemas={"one": SCHEMAS / "user.avsc", "many": SCHEMAS / "tweet.avsc"},
    )
