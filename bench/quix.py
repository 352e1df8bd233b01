"""The peer: Quix Streams doing the same stateful co-map on the same broker, topics and data.

Install it with ``.venv/bin/pip install -e '.[bench]'``. Quix Streams 3.x pins
``confluent-kafka<2.13`` and ``pydantic<2.14``, so that install may downgrade both in the
project's environment; to keep the project's environment as it is, install
``quixstreams[avro]`` into a separate virtualenv and pass its interpreter with
``python -m bench comap --quix-python PATH``. The application runs in child processes
(``python -m bench.quix CONFIG``) under that interpreter, which is why this module imports
nothing but the standard library at its top: the child needs only Quix Streams (and the
fastavro its Avro serializers use). It runs in as many children as enrichd's Spark session
has cores, all in one consumer group, which is how Quix scales (one process per partition),
so that "vs Quix" compares the two per core.

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
(and Kafka's Java clients) do. The application keeps Quix's defaults otherwise (at-least-once,
a 5 s commit interval) but one: its state has no changelog topic. Quix's changelog gets the
whole value at each update, here an author's every tweet at each tweet, so at 20,000 users and
3,000,000 tweets it wrote some 18 GB into the test broker, which keeps topics in memory, and
filled the 24 GiB machine. Without it Quix does less work than by default (its state lives in
its local RocksDB only), so the comparison favours the peer. The other peers keep their
changelogs (:func:`application`'s ``changelog``), whose values stay small.

Timing: a consumer-group join on the embedded broker takes 20-25 s, so the rate counts from
the first input record any child sees to the end of the run (every view handed to a
producer, then the last child's final checkpoint commit, which flushes its producer); the
time from the first ``Application.run()`` to the first record is reported as start-up. Each
child publishes its count through a :class:`Tally`, so each knows when all of them together
are done.
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
    """Views the application handed to its producer (all its processes together)."""
    processes: int = 1
    """Processes the application ran in, one consumer group."""
    consumed: tuple[int, ...] = ()
    """Input records each process saw."""

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
    processes: int = 1,
) -> tuple[QuixResult, dict[str, Any]]:
    """Run ``processes`` children ``python -m module CONFIG`` in one consumer group.

    Each child gets ``config`` with the keys every child also reads added: its own
    ``state_dir``, the group (a fresh one starting ``group``), ``timeout_s``, and the
    :class:`Tally` folder through which the children learn when all of them together are
    done. The answer is the children's, summed (``views``, ``consumed`` and any other count)
    and on one clock: from the first record any child saw to the last child's final commit.
    Never raises for a Quix failure: a missing install, an error inside Quix or a run that
    does not finish in time comes back as a result with ``reason`` set and an empty answer.
    """
    version, reason = probe(python)
    if reason:
        return QuixResult(input_records, reason=reason), {}
    with tempfile.TemporaryDirectory(prefix="enrichd-bench-quix-") as work:
        shared = {
            **config,
            "group": f"{group}-{os.getpid()}-{int(time.time())}",
            "timeout_s": timeout_s,
            "tally_dir": work,
            "processes": processes,
        }

        def start(index: int) -> subprocess.Popen[str]:
            own = {**shared, "index": index, "state_dir": f"{work}/state-{index}"}
            return subprocess.Popen(  # noqa: S603 - our own interpreter choice, no shell
                [python, "-m", module, json.dumps(own)],
                cwd=_REPO,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )

        children = [start(i) for i in range(processes)]
        deadline = time.monotonic() + timeout_s + 120
        try:
            finished = [
                child.communicate(timeout=max(deadline - time.monotonic(), 1)) for child in children
            ]
        except subprocess.TimeoutExpired:
            return QuixResult(input_records, version, f"no answer in {timeout_s + 120:.0f} s"), {}
        finally:
            for child in children:
                if child.poll() is None:
                    child.kill()
                    child.communicate()
    answers: list[dict[str, Any]] = []
    for child, (out, err) in zip(children, finished, strict=True):
        lines = [line for line in out.splitlines() if line.startswith("{")]
        if child.returncode != 0 or not lines:
            tail = " | ".join(err.strip().splitlines()[-3:]) or "no output"
            return QuixResult(input_records, version, f"exit code {child.returncode}: {tail}"), {}
        answers.append(json.loads(lines[-1]))
    errors = [answer["error"] for answer in answers if answer.get("error")]
    if errors:
        return QuixResult(input_records, version, errors[0]), {}
    answer = _combined(answers)
    result = QuixResult(
        input_records,
        version,
        startup_s=answer["first"] - answer["started"],
        seconds=answer["committed"] - answer["first"],
        stop_s=answer["returned"] - answer["committed"],
        views=answer["views"],
        processes=processes,
        consumed=tuple(a["consumed"] for a in answers),
    )
    return result, answer


def _combined(answers: list[dict[str, Any]]) -> dict[str, Any]:
    """The children's answers as one: counts summed; the run starts when the first child
    started and first saw a record, and ends at the last child's commit and return."""
    combined: dict[str, Any] = {
        key: sum(a[key] for a in answers)
        for key, value in answers[0].items()
        if isinstance(value, int) and not isinstance(value, bool)
    }
    seen = [a["first"] for a in answers if a["first"]]
    combined.update(
        started=min(a["started"] for a in answers),
        first=min(seen, default=0.0),
        committed=max(a["committed"] for a in answers),
        returned=max(a["returned"] for a in answers),
    )
    return combined


def run_quix(
    python: str,
    servers: str,
    users_topic: str,
    tweets_topic: str,
    output: str,
    expected_views: int,
    input_records: int,
    timeout_s: float = 900.0,
    processes: int = 1,
) -> QuixResult:
    """Run the Quix application in ``processes`` children, one consumer group; never raises
    for a Quix failure.

    A missing install, an error inside Quix or a run that does not deliver
    ``expected_views`` in time comes back as a result with ``reason`` set.
    """
    config = {
        "servers": servers,
        "users": users_topic,
        "tweets": tweets_topic,
        "output": output,
        "expected_views": expected_views,
        "changelog": False,
    }
    return launch(python, "bench.quix", config, "bench-quix", input_records, timeout_s, processes)[
        0
    ]


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
    """The child's Quix ``Application`` on the config's broker, group and state directory;
    its state backed by changelog topics (Quix's default) unless the config's ``changelog``
    is false."""
    from quixstreams import Application

    return Application(
        broker_address=config["servers"],
        consumer_group=config["group"],
        auto_offset_reset="earliest",
        state_dir=config["state_dir"],
        loglevel="WARNING",
        use_changelog_topics=config.get("changelog", True),
    )


def new_clock() -> dict[str, Any]:
    """A child's readings: first input record, records seen, outputs, final commit."""
    return {"first": 0.0, "consumed": 0, "views": 0, "committed": 0.0}


class Tally:
    """How far a run's children are together, shared through one small file per child.

    Each child's :meth:`watch` thread writes its own count (``clock[key]``) to its file every
    :data:`TALLY_INTERVAL_S` and sums everyone's; once the sum reaches ``target`` the run is
    :attr:`done` and the child stops its application (``run()`` then commits its checkpoint,
    which flushes its producer). One process, or several in a consumer group, run alike.
    """

    def __init__(self, config: dict[str, Any], clock: dict[str, Any], key: str, target: int):
        self.folder = Path(config["tally_dir"])
        self.mine = self.folder / f"{config['index']}.count"
        self.clock, self.key, self.target = clock, key, target
        self.done = False

    def total(self) -> int:
        """Everyone's count as last written (this child's as it is now)."""
        counts = [self.clock[self.key]]
        for path in self.folder.glob("*.count"):
            if path != self.mine:
                try:
                    counts.append(int(path.read_text(encoding="utf-8")))
                except (OSError, ValueError):
                    continue  # not written yet
        return sum(counts)

    def watch(self, app: Any) -> None:
        """Start the thread that publishes this child's count and stops ``app`` when done."""

        def loop() -> None:
            while not self.done:
                draft = self.mine.with_suffix(".draft")
                draft.write_text(str(self.clock[self.key]), encoding="utf-8")
                draft.replace(self.mine)  # whole numbers only, never half-written ones
                if self.total() >= self.target:
                    self.done = True
                    app.stop()
                time.sleep(TALLY_INTERVAL_S)

        threading.Thread(target=loop, name="quix-tally", daemon=True).start()


TALLY_INTERVAL_S = 0.05
"""How often a child publishes its count: a run ends at most this much after its last output."""


def run_timed(app: Any, clock: dict[str, Any], tally: Tally, timeout_s: float) -> dict[str, Any]:
    """Run ``app`` until ``tally`` is done (or ``timeout_s``); the clock readings, on
    ``time.monotonic`` (one clock for every process of the machine).

    ``clock["committed"]`` is set at the first forced checkpoint commit once ``tally.done``.
    """
    # The final commit is the moment the last output is delivered: time it from the outside.
    context = app._processing_context  # noqa: SLF001 - only to read the clock at the commit
    commit = context.commit_checkpoint

    def timed_commit(force: bool = False, revoking: bool = False) -> None:
        commit(force=force, revoking=revoking)
        if force and tally.done and not clock["committed"]:
            clock["committed"] = time.monotonic()

    context.commit_checkpoint = timed_commit
    timer = threading.Timer(timeout_s, app.stop)
    timer.daemon = True
    timer.start()
    tally.watch(app)
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

    tally = Tally(config, clock, "views", expected)
    result = run_timed(app, clock, tally, config["timeout_s"])
    if not tally.done or not clock["committed"]:
        result["error"] = (
            f"stopped after {config['timeout_s']:.0f} s with {tally.total():,} of "
            f"{expected:,} views ({clock['consumed']:,} input records seen by this process)"
        )
    return result


if __name__ == "__main__":
    sys.exit(child_main(_child, sys.argv[1:]))
