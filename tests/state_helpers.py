"""Helpers for the tests of the state commands: a pipeline file on disk, the CLI in-process."""

from __future__ import annotations

import io
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from daemon.avro import AvroCodec, load_schema_file
from tests.kafka_helpers import SCHEMAS

USERS = AvroCodec(load_schema_file(SCHEMAS / "user.avsc"))
TWEETS = AvroCodec(load_schema_file(SCHEMAS / "tweet.avsc"))
VIEWS = AvroCodec(load_schema_file(SCHEMAS / "tweet_view.avsc"))

COMAP = """\
[kafka]
bootstrap_servers = "{servers}"

[spark]
master = "local[2]"
{spark_conf}
[[pipeline]]
name = "{name}"
joiner = "comap"
checkpoint = "{checkpoint}"
dead_letter_topic = "{name}.dlq"
state_buckets = {buckets}

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
) -> Path:
    """Write the tweet-views ``comap`` pipeline on the given topics to ``path``; return it."""
    setting = f'"spark.sql.shuffle.partitions" = "{partitions}"'
    conf = "" if partitions is None else f"conf = {{ {setting} }}\n"
    path.write_text(
        COMAP.format(
            servers=servers,
            spark_conf=conf,
            name=name,
            checkpoint=checkpoint,
            buckets=buckets,
            users=users,
            tweets=tweets,
            output=output,
            schemas=SCHEMAS,
        )
    )
    return path


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


def listing(folder: Path) -> dict[str, tuple[int, int]]:
    """Every file under ``folder`` with its size and modification time, to show nothing moved.

    The lock file is left out: a command that holds the checkpoint leaves it, as ``daemon
    run`` does, and it holds nothing but the last holder's pid.
    """
    return {
        str(path.relative_to(folder)): (path.stat().st_size, path.stat().st_mtime_ns)
        for path in sorted(folder.rglob("*"))
        if path.is_file() and path.name != "enrichd.lock"
    }
