"""Helpers for the tests of the state commands: a pipeline file on disk, the CLI in-process."""

from __future__ import annotations

import io
import json
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from daemon.broker import EmbeddedBroker
from daemon.checkpoint.layout import LOCK
from daemon.joiners.comap import CoMap
from daemon.model.config import load_pipeline_file
from daemon.pipeline.checkpoint_shape import check_checkpoint
from daemon.testing import run_joiner
from tests.kafka_helpers import (
    SCHEMAS,
    TWEETS,
    USERS,
    VIEWS,
    In,
    client_conf,
    create_topic,
    produce,
    read_topic,
)
from tests.kafka_helpers import run_pipeline as run_query

COMAP = """\
[kafka]
bootstrap_servers = "{servers}"
{kafka_settings}
[spark]
master = "local[2]"
{spark_conf}
"""

COMAP_PIPELINE = """\
[[pipeline]]
name = "{name}"
joiner = "comap"
checkpoint = "{checkpoint}"
dead_letter_topic = "{dead_letters}"
state_buckets = {buckets}
{settings}

[pipeline.inputs.one]
topic = "{users}"
schema = "{schemas}/user.avsc"
key = "id"
field = "author"

[pipeline.inputs.many]
topic = "{tweets}"
schema = "{schemas}/tweet.avsc"
key = "author_id"
field = "tweet"

[pipeline.output]
topic = "{output}"
schema = "{schemas}/tweet_view.avsc"

[pipeline.options]
many_id = "id"
"""


def comap_toml(
    path: Path,
    servers: str,
    *,
    name: str,
    users: str,
    tweets: str,
    output: str,
    checkpoint: Path,
    buckets: int = 32,
    partitions: int | None = None,
    settings: dict[str, int | str] | None = None,
    id_prefix: str | None = None,
) -> Path:
    """Write the tweet-views ``comap`` pipeline on the given topics to ``path``; return it.

    ``settings``: more of the pipeline's numeric settings (``max_records_per_batch``, ...);
    ``id_prefix``: ``[kafka] id_prefix`` (None: left out, the default).
    """
    setting = f'"spark.sql.shuffle.partitions" = "{partitions}"'
    conf = "" if partitions is None else f"conf = {{ {setting} }}\n"
    header = COMAP.format(
        servers=servers,
        kafka_settings="" if id_prefix is None else f'id_prefix = "{id_prefix}"\n',
        spark_conf=conf,
    )
    pipeline = comap_pipeline(
        name=name,
        users=users,
        tweets=tweets,
        output=output,
        checkpoint=checkpoint,
        buckets=buckets,
        settings=settings,
    )
    path.write_text(header + pipeline)
    return path


def comap_pipeline(
    *,
    name: str,
    users: str,
    tweets: str,
    output: str,
    checkpoint: Path,
    dead_letters: str | None = None,
    buckets: int = 32,
    settings: dict[str, int | str] | None = None,
) -> str:
    """The ``[[pipeline]]`` tables of the tweet-views ``comap`` pipeline on the given topics.

    ``dead_letters``: its dead-letter topic (None: ``NAME.dlq``); ``settings``: more of the
    pipeline's settings (``max_records_per_batch = 5``, ``on_missing_offsets = "fail"``).
    """
    more = "".join(f"{key} = {json.dumps(value)}\n" for key, value in (settings or {}).items())
    return COMAP_PIPELINE.format(
        name=name,
        checkpoint=checkpoint,
        dead_letters=dead_letters or f"{name}.dlq",
        buckets=buckets,
        settings=more,
        users=users,
        tweets=tweets,
        output=output,
        schemas=SCHEMAS,
    )


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
        """Topics named after ``stem`` (a fresh one if None), the file's ``file`` settings."""
        self.conf = client_conf(broker.bootstrap_servers)
        stem = stem or uuid.uuid4().hex[:8]
        self.users, self.tweets = f"users-{stem}", f"tweets-{stem}"
        self.output = f"views-{stem}"
        for topic in (self.users, self.tweets):
            create_topic(self.conf, topic, 2)
        self.checkpoint = folder / "checkpoint"
        self.servers = broker.bootstrap_servers
        self.path = folder / "pipeline.toml"
        self.name = f"views-{stem}"
        self.write(**file)
        self.records: dict[str, list[dict[str, Any]]] = {"one": [], "many": []}

    def write(self, **file: Any) -> None:
        comap_toml(
            self.path,
            self.servers,
            name=self.name,
            users=self.users,
            tweets=self.tweets,
            output=self.output,
            checkpoint=self.checkpoint,
            **file,
        )

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
