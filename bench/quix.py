"""The peer: Quix Streams doing the same stateful co-map on the same broker, topics and data.

Install it with ``.venv/bin/pip install -e '.[bench]'``. Quix Streams 3.x pins
``confluent-kafka<2.13`` and ``pydantic<2.14``, so that install may downgrade both in the
project's environment; to keep the project's environment as it is, install
``quixstreams[avro]`` into a separate virtualenv and pass its interpreter with
``python -m bench comap --quix-python PATH``. The application runs in a child process
(``python -m bench.quix CONFIG``) under that interpreter, which is why this module imports
nothing but the standard library at its top: the child needs only Quix Streams (and the
fastavro its Avro serializers use).

The application, written as a Quix Streams user would:

- users: a topic with an ``AvroDeserializer``, keyed by user id as produced;
- tweets: keyed by tweet id as produced, so ``group_by(author_id)`` re-keys them through a
  ``repartition__`` topic Quix creates (JSON values, the author id as a string key);
- the two dataframes are ``concat``-ed and one ``apply(stateful=True, expand=True)`` keeps
  the latest user and the tweets (by tweet id) under each author in Quix's RocksDB state,
  emitting a view per tweet when its author is known and every stored tweet again when the
  user arrives or changes, as enrichd's comap does;
- views go to the output topic through an ``AvroSerializer``, keyed by tweet id.

Quix's state lives per key and partition number, so a user and their re-keyed tweets must land
on the same partition: the workload's producer partitions with murmur2, as Quix's producer
(and Kafka's Java clients) do. The application keeps Quix's defaults otherwise: at-least-once,
changelog topics for state, a 5 s commit interval.

Timing: a consumer-group join on the embedded broker takes 20-25 s, so the rate counts from
the first input record the application sees to the end of the run (the last view handed to
the producer, then the final checkpoint commit, which flushes the producer); the time from
``Application.run()`` to the first record is reported as start-up.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_REPO = Path(__file__).resolve().parent.parent
_SCHEMAS = _REPO / "schemas"
_INSTALL = ".venv/bin/pip install -e '.[bench]'"


@dataclass(frozen=True)
class QuixResult:
    """A Quix Streams run, or why there was none (``reason`` set, no figures)."""

    input_records: int
    version: str = ""
    reason: str = ""
    startup_s: float = 0.0
    """From ``Application.run()`` to the first input record (group join, topic creation)."""
    seconds: float = 0.0
    """From the first input record to the final commit (all views delivered)."""
    stop_s: float = 0.0
    """From the final commit until ``run()`` returned (consumer close, leaving the group)."""
    views: int = 0
    """Views the application handed to its producer."""

    @property
    def ran(self) -> bool:
        """Whether there are figures."""
        return not self.reason

    @property
    def rate(self) -> float:
        """Input records per second, 0 without figures."""
        return self.input_records / self.seconds if self.ran and self.seconds else 0.0


def probe(python: str) -> tuple[str, str]:
    """(Quix Streams version, "") when ``python`` can import it, else ("", why not).

    An empty ``python`` is ``--no-quix``: the peer is left out.
    """
    if not python:
        return "", "left out (--no-quix)"
    code = "import fastavro, quixstreams; print(quixstreams.__version__)"
    try:
        done = subprocess.run(  # noqa: S603 - our own interpreter choice, no shell
            [python, "-c", code], capture_output=True, text=True, timeout=120, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return "", f"cannot run {python}: {exc}"
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return "", f"quixstreams is not importable by {python} ({last}); install: {_INSTALL}"
    version = done.stdout.strip()
    if not version.startswith("3."):
        return "", f"quixstreams {version} found; the peer is written for 3.x"
    return version, ""


def launch(
    python: str,
    module: str,
    config: dict[str, Any],
    group: str,
    input_records: int,
    timeout_s: float,
) -> tuple[QuixResult, dict[str, Any]]:
    """Run ``python -m module CONFIG`` (a Quix child); its result and its JSON answer.

    ``config`` gets the keys every child also reads (``state_dir``, a fresh
    consumer group starting ``group``, ``timeout_s``) added. Never raises for a Quix
    failure: a missing install, an error inside Quix or a run that does not finish in time
    comes back as a result with ``reason`` set and an empty answer.
    """
    version, reason = probe(python)
    if reason:
        return QuixResult(input_records, reason=reason), {}
    with tempfile.TemporaryDirectory(prefix="enrichd-bench-quix-") as state_dir:
        config = {
            **config,
            "state_dir": state_dir,
            "group": f"{group}-{os.getpid()}-{int(time.time())}",
            "timeout_s": timeout_s,
        }
        try:
            done = subprocess.run(  # noqa: S603 - our own interpreter choice, no shell
                [python, "-m", module, json.dumps(config)],
                cwd=_REPO,
                capture_output=True,
                text=True,
                timeout=timeout_s + 120,
                check=False,
            )
        except subprocess.TimeoutExpired:
            return QuixResult(input_records, version, f"no answer in {timeout_s + 120:.0f} s"), {}
    answers = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not answers:
        tail = " | ".join(done.stderr.strip().splitlines()[-3:]) or "no output"
        return QuixResult(input_records, version, f"exit code {done.returncode}: {tail}"), {}
    answer = json.loads(answers[-1])
    if answer.get("error"):
        return QuixResult(input_records, version, answer["error"]), {}
    result = QuixResult(
        input_records,
        version,
        startup_s=answer["first"] - answer["started"],
        seconds=answer["committed"] - answer["first"],
        stop_s=answer["returned"] - answer["committed"],
        views=answer["views"],
    )
    return result, answer


def run_quix(
    python: str,
    servers: str,
    users_topic: str,
    tweets_topic: str,
    output: str,
    expected_views: int,
    input_records: int,
    timeout_s: float = 900.0,
) -> QuixResult:
    """Run the Quix application in a child process; never raises for a Quix failure.

    A missing install, an error inside Quix or a run that does not deliver
    ``expected_views`` in time comes back as a result with ``reason`` set.
    """
    config = {
        "servers": servers,
        "users": users_topic,
        "tweets": tweets_topic,
        "output": output,
        "expected_views": expected_views,
    }
    return launch(python, "bench.quix", config, "bench-quix", input_records, timeout_s)[0]


def schema(name: str) -> Any:
    """The parsed Avro schema ``schemas/NAME.avsc``."""
    return json.loads((_SCHEMAS / f"{name}.avsc").read_text(encoding="utf-8"))


def _co_map(value: dict[str, Any], state: Any) -> list[dict[str, Any]]:
    """The comap step for one record under its author's key: the views it emits."""
    if "content" in value:  # a tweet: store it, and view it if its author is known
        tweets = state.get("tweets") or {}
        tweets[str(value["id"])] = value
        state.set("tweets", tweets)
        author = state.get("user")
        return [] if author is None else [{"id": value["id"], "tweet": value, "author": author}]
    state.set("user", value)  # a user: the latest wins, and every stored tweet is viewed again
    stored = state.get("tweets") or {}
    return [{"id": tweet["id"], "tweet": tweet, "author": value} for tweet in stored.values()]


def application(config: dict[str, Any]) -> Any:
    """The child's Quix ``Application`` on the config's broker, group and state directory."""
    from quixstreams import Application

    return Application(
        broker_address=config["servers"],
        consumer_group=config["group"],
        auto_offset_reset="earliest",
        state_dir=config["state_dir"],
        loglevel="WARNING",
    )


def new_clock() -> dict[str, Any]:
    """A child's readings: first input record, records seen, outputs, final commit."""
    return {"first": 0.0, "consumed": 0, "views": 0, "committed": 0.0}


def run_timed(
    app: Any, clock: dict[str, Any], finished: Callable[[], bool], timeout_s: float
) -> dict[str, Any]:
    """Run ``app`` to its stop (or ``timeout_s``); the clock readings, on ``time.monotonic``.

    ``clock["committed"]`` is set at the first forced checkpoint commit once ``finished()``.
    """
    # The final commit is the moment the last output is delivered: time it from the outside.
    context = app._processing_context  # noqa: SLF001 - only to read the clock at the commit
    commit = context.commit_checkpoint

    def timed_commit(force: bool = False, revoking: bool = False) -> None:
        commit(force=force, revoking=revoking)
        if force and finished() and not clock["committed"]:
            clock["committed"] = time.monotonic()

    context.commit_checkpoint = timed_commit
    timer = threading.Timer(timeout_s, app.stop)
    timer.daemon = True
    timer.start()
    started = time.monotonic()
    app.run()
    returned = time.monotonic()
    timer.cancel()
    return {
        "started": started,
        "first": clock["first"],
        "committed": clock["committed"],
        "returned": returned,
        "views": clock["views"],
        "consumed": clock["consumed"],
    }


def child_main(child: Callable[[dict[str, Any]], dict[str, Any]], argv: list[str]) -> int:
    """Child entry point: ``child`` the JSON config in ``argv[0]``, print a JSON answer."""
    try:
        answer = child(json.loads(argv[0]))
    except Exception as exc:  # noqa: BLE001 - the parent reports any failure as such
        answer = {"error": f"{type(exc).__name__}: {exc}"}
    print(json.dumps(answer), flush=True)
    return 0


def _child(config: dict[str, Any]) -> dict[str, Any]:
    """Build and run the application; the clock readings it took, on ``time.monotonic``."""
    from quixstreams.models.serializers.avro import AvroDeserializer, AvroSerializer

    app = application(config)
    users = app.topic(
        config["users"],
        key_deserializer="str",
        value_deserializer=AvroDeserializer(schema("user")),
    )
    tweets = app.topic(
        config["tweets"],
        key_deserializer="str",
        value_deserializer=AvroDeserializer(schema("tweet")),
    )
    output = app.topic(
        config["output"],
        key_serializer="str",
        value_serializer=AvroSerializer(schema("tweet_view")),
    )
    clock = new_clock()
    expected = config["expected_views"]

    def seen(_value: Any) -> None:
        if not clock["first"]:
            clock["first"] = time.monotonic()
        clock["consumed"] += 1

    def delivered(_value: Any) -> None:
        clock["views"] += 1
        if clock["views"] == expected:
            app.stop()  # run() then commits its checkpoint, which flushes the producer

    user_sdf = app.dataframe(users).update(seen)
    tweet_sdf = app.dataframe(tweets).update(seen)
    by_author = tweet_sdf.group_by(
        lambda tweet: str(tweet["author_id"]),
        name="author",
        key_serializer="str",
        key_deserializer="str",
    )
    views = user_sdf.concat(by_author).apply(_co_map, stateful=True, expand=True)
    views = views.to_topic(output, key=lambda view: str(view["id"]))
    views = views.update(delivered)

    result = run_timed(app, clock, lambda: clock["views"] >= expected, config["timeout_s"])
    if clock["views"] < expected or not clock["committed"]:
        result["error"] = (
            f"stopped after {config['timeout_s']:.0f} s with {clock['views']:,} of "
            f"{expected:,} views ({clock['consumed']:,} input records seen)"
        )
    return result


if __name__ == "__main__":
    sys.exit(child_main(_child, sys.argv[1:]))
