"""Helpers for tests on the real broker and Spark: produce, read back, build and run pipelines."""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from daemon.broker import EmbeddedBroker
from daemon.checkpoint.batch_logs import batches
from daemon.checkpoint.layout import COMMIT_LOG, OFFSET_LOG, log_folder
from daemon.formats.avro.codec import AvroCodec, load_schema_file
from daemon.kafka.clients import Deliveries, read_partition
from daemon.model.config import (
    PipelineConfig,
    PipelineFile,
    load_pipeline_file,
    parse_pipeline_file,
)
from daemon.replay import ReplayResult, replay

SCHEMAS = Path(__file__).resolve().parent.parent / "schemas"
DEAD_LETTER_HEADERS = frozenset(
    {
        "enrichd.source.topic",
        "enrichd.source.partition",
        "enrichd.source.offset",
        "enrichd.error.class",
        "enrichd.error.message",
        "__streams.errors.exception",
        "__streams.errors.message",
    }
)
"""The headers every dead letter adds to its record's own, saying where it was read and why
(docs/semantics.md, Dead letters); one refused by an exception has a stack trace too."""


@dataclass(frozen=True)
class Out:
    """One record read back from a topic."""

    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    timestamp: int
    headers: dict[str, bytes] = field(default_factory=dict)
    header_list: list[tuple[str, bytes]] = field(default_factory=list)
    """Every header in its order, repeated names too (``headers`` keeps each name's last)."""


@dataclass(frozen=True)
class In:
    """One record to produce."""

    value: bytes | None
    key: bytes | None = None
    timestamp: int | None = None
    partition: int | None = None
    headers: list[tuple[str, bytes]] | None = None


USERS = AvroCodec(load_schema_file(SCHEMAS / "user.avsc"))
TWEETS = AvroCodec(load_schema_file(SCHEMAS / "tweet.avsc"))
VIEWS = AvroCodec(load_schema_file(SCHEMAS / "tweet_view.avsc"))


def user(user_id: int, name: str, timestamp: int) -> In:
    """A user record of the tweet-views pipelines, keyed by its id."""
    return In(USERS.encode({"id": user_id, "name": name}), str(user_id).encode(), timestamp)


def tweet(tweet_id: int, author: int, content: str = "hi") -> In:
    """A tweet record of the tweet-views pipelines, keyed by its id, at 10,000 + its id."""
    value = TWEETS.encode({"id": tweet_id, "author_id": author, "content": content})
    return In(value, str(tweet_id).encode(), 10_000 + tweet_id)


def client_conf(servers: str) -> dict[str, str]:
    return {"bootstrap.servers": servers}


def groups_starting(conf: dict[str, str], prefix: str) -> list[str]:
    """The consumer groups of the cluster whose names start with ``prefix``, sorted."""
    from confluent_kafka.admin import AdminClient

    client = AdminClient(conf)  # held until the answer is in: a client gone answers nothing
    listed = client.list_consumer_groups(request_timeout=30).result(timeout=30)
    return sorted(g.group_id for g in listed.valid if g.group_id.startswith(prefix))


def create_topic(conf: dict[str, str], topic: str, partitions: int = 1) -> None:
    from daemon.kafka.admin import create_topics

    create_topics(conf, {topic: partitions})


def produce(
    conf: dict[str, str], topic: str, records: Iterable[In], *, linger_ms: int = 50
) -> dict[int, int]:
    """Produce ``records`` in one flush; return each partition's end (last offset + 1)."""
    from confluent_kafka import Producer

    producer = Producer({**conf, "linger.ms": linger_ms, "partitioner": "murmur2_random"})
    deliveries = Deliveries()
    for record in records:
        extra: dict[str, Any] = {}
        if record.timestamp is not None:
            extra["timestamp"] = record.timestamp
        if record.partition is not None:
            extra["partition"] = record.partition
        if record.headers is not None:
            extra["headers"] = record.headers
        producer.produce(topic, value=record.value, key=record.key, on_delivery=deliveries, **extra)
    assert producer.flush(30) == 0, "records still queued after 30 s"
    assert not deliveries.failures, deliveries.failures
    return {int(name.rpartition("/")[2]): end for name, end in deliveries.ends.items()}


def read_topic(conf: dict[str, str], topic: str, timeout_s: float = 120.0) -> list[Out]:
    """Every committed record of ``topic`` (``read_committed``), partition by partition.

    A ``read_committed`` read waits at a transaction left open (by a killed writer, until its
    successor initialises the same transactional id: a Spark start and a first micro-batch
    later), so the wait before failing allows for that.
    """
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {
            **conf,
            "group.id": "enrichd-tests",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "fetch.wait.max.ms": 50,
        }
    )
    found: list[Out] = []
    try:
        metadata = consumer.list_topics(topic, timeout=10).topics[topic]
        for partition in sorted(metadata.partitions):
            tp = TopicPartition(topic, partition, 0)
            for records in read_partition(consumer, tp, stall_s=timeout_s):
                found.extend(
                    Out(
                        partition=message.partition() or 0,
                        offset=message.offset() or 0,
                        key=message.key(),
                        value=message.value(),
                        timestamp=message.timestamp()[1],
                        headers=_headers(message.headers()),
                        header_list=[(n, v or b"") for n, v in message.headers() or []],
                    )
                    for message in records
                )
    finally:
        consumer.close()
    return found


def _headers(raw: Any) -> dict[str, bytes]:
    return {name: value or b"" for name, value in raw or []}


COMAP_HEADER = """\
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
joiner = "{joiner}"
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


def _settings(settings: dict[str, Any]) -> str:
    return "".join(f"{key} = {json.dumps(value)}\n" for key, value in settings.items())


@dataclass(frozen=True)
class TweetViews:
    """The tweet-views ``comap`` pipeline on topics of its own, and where its files go.

    :func:`fresh_tweet_views` (the ``tweet_views`` fixture of tests/conftest.py) names the
    topics afresh and creates them; a test that needs other names builds one itself.
    """

    servers: str
    """The bootstrap servers of the cluster its topics are on."""
    folder: Path
    """Where its pipeline file (``pipeline.toml``) and checkpoint (``checkpoint/``) go."""
    name: str
    users: str
    tweets: str
    output: str
    dead_letters: str

    @property
    def conf(self) -> dict[str, str]:
        """Client settings for its cluster."""
        return client_conf(self.servers)

    @property
    def path(self) -> Path:
        """Its pipeline file, once :meth:`write` wrote it."""
        return self.folder / "pipeline.toml"

    @property
    def checkpoint(self) -> Path:
        """Its checkpoint folder."""
        return self.folder / "checkpoint"

    def pipeline(self, *, joiner: str = "comap", buckets: int = 32, **settings: Any) -> str:
        """Its ``[[pipeline]]`` tables: ``joiner`` (a comap of a test's own, say), ``buckets``
        state buckets, and more ``settings`` (``max_records_per_batch``, ``delivery``, ...)."""
        return COMAP_PIPELINE.format(
            name=self.name,
            joiner=joiner,
            checkpoint=self.checkpoint,
            dead_letters=self.dead_letters,
            buckets=buckets,
            settings=_settings(settings),
            users=self.users,
            tweets=self.tweets,
            output=self.output,
            schemas=SCHEMAS,
        )

    def write(
        self,
        *,
        servers: str | None = None,
        kafka: dict[str, Any] | None = None,
        partitions: int | None = None,
        **pipeline: Any,
    ) -> Path:
        """Write its one-pipeline file to :attr:`path`; return that path.

        Args:
            servers: the bootstrap servers in the file (None: its cluster's).
            kafka: more ``[kafka]`` settings (``id_prefix``, ``commit_turn``).
            partitions: ``spark.sql.shuffle.partitions`` (None: Spark's default).
            pipeline: what :meth:`pipeline` takes.
        """
        setting = f'"spark.sql.shuffle.partitions" = "{partitions}"'
        header = COMAP_HEADER.format(
            servers=servers or self.servers,
            kafka_settings=_settings(kafka or {}),
            spark_conf="" if partitions is None else f"conf = {{ {setting} }}\n",
        )
        self.folder.mkdir(parents=True, exist_ok=True)
        self.path.write_text(header + self.pipeline(**pipeline))
        return self.path

    def file(self, **settings: Any) -> PipelineFile:
        """Its one-pipeline file, written (:meth:`write` takes ``settings``) and loaded."""
        return load_pipeline_file(self.write(**settings))

    def views(self) -> Counter[int]:
        """How many times each tweet's view is in its output, read ``read_committed``; each
        view's author must be its tweet's (users named ``user N``, as :func:`user` makes
        them in the tests)."""
        counts: Counter[int] = Counter()
        for record in read_topic(self.conf, self.output):
            view = VIEWS.decode(record.value or b"")
            assert view["author"]["name"] == f"user {view['tweet']['author_id']}"
            counts[view["id"]] += 1
        return counts


def fresh_tweet_views(
    servers: str,
    fresh: Callable[[str], str],
    folder: Path,
    stem: str = "views",
    *,
    partitions: int = 1,
    create: bool = True,
) -> TweetViews:
    """The tweet-views pipeline named ``fresh(stem)``, on topics named ``fresh("users")``,
    ``fresh("tweets")`` and ``fresh("views")``, its dead letters to ``NAME.dlq``, its files in
    ``folder``.

    ``create``: create its two input topics, with ``partitions`` partitions each (the output
    topics are created by the pipeline's start, as in production).
    """
    name = fresh(stem)
    views = TweetViews(
        servers,
        folder,
        name=name,
        users=fresh("users"),
        tweets=fresh("tweets"),
        output=fresh("views"),
        dead_letters=f"{name}.dlq",
    )
    if create:
        for topic in (views.users, views.tweets):
            create_topic(views.conf, topic, partitions)
    return views


def on_topics(
    pipe: PipelineConfig, inputs: dict[str, str], output: str, **update: Any
) -> PipelineConfig:
    """``pipe`` reading the topic ``inputs`` names per role and writing ``output``; other
    fields replaced by ``update``."""
    return pipe.model_copy(
        update={
            "inputs": {
                role: spec.model_copy(update={"topic": inputs[role]})
                for role, spec in pipe.inputs.items()
            },
            "output": pipe.output.model_copy(update={"topic": output}),
            **update,
        }
    )


def process_all(query: Any, timeout_s: float = 120.0) -> None:
    """``query.processAllAvailable()``, failing instead of hanging after ``timeout_s``."""
    failure: list[BaseException] = []

    def run() -> None:
        try:
            query.processAllAvailable()
        except BaseException as exc:  # re-raised in the test's thread
            failure.append(exc)

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(timeout_s)
    if worker.is_alive():
        query.stop()
        worker.join(30)
        raise AssertionError(f"the query did not catch up within {timeout_s:.0f}s")
    if failure:
        raise failure[0]


def await_committed(checkpoint: Path, timeout_s: float) -> None:
    """Wait until every micro-batch in the checkpoint's offset log is in its commit log.

    On a restart Spark first re-runs a planned but uncommitted micro-batch, and
    processAllAvailable() can return before that re-run has finished.
    """
    deadline = time.monotonic() + timeout_s
    while max(batches(checkpoint, OFFSET_LOG), default=-1) > max(
        batches(checkpoint, COMMIT_LOG), default=-1
    ):
        assert time.monotonic() < deadline, f"{checkpoint}: a planned micro-batch never committed"
        time.sleep(0.1)


def forget_from(checkpoint: Path, batch: int) -> None:
    """Make Spark's checkpoint look as after a crash between the Kafka commit of ``batch``
    and Spark's own: ``batch`` planned but not committed, and nothing after it."""
    for log, first in ((COMMIT_LOG, batch), (OFFSET_LOG, batch + 1)):
        folder = log_folder(checkpoint, log)
        for path in folder.glob("[0-9]*"):
            if int(path.name) >= first:
                path.unlink()
                (folder / f".{path.name}.crc").unlink(missing_ok=True)


def run_pipeline(
    spark: Any, file: PipelineFile, timeout_s: float = 120.0, *, metrics_address: str | None = None
) -> list[int]:
    """Run the file's one pipeline until it has consumed its inputs, then stop it.

    Returns the ids of the micro-batches this run committed to the checkpoint's commit log,
    which are the batches that read input (the session runs no batches without data). The
    commit log says it more reliably than progress reports, which Spark posts after the
    commit and which were seen to report no input rows for a re-run batch.

    ``metrics_address``: the socket its source reports to, as to the daemon
    (:class:`daemon.report_socket.ReportSocket`); None: none.
    """
    from dataclasses import replace

    from daemon.pipeline.plan import plan_pipeline, start_query

    (pipe,) = file.pipeline
    assert file.kafka.bootstrap_servers is not None
    plan = plan_pipeline(file, pipe, client_conf(file.kafka.bootstrap_servers))
    if metrics_address is not None:
        plan = replace(plan, source=replace(plan.source, metrics_address=metrics_address))
    committed_before = set(batches(pipe.checkpoint, COMMIT_LOG))
    query = start_query(spark, plan)
    try:
        process_all(query, timeout_s)
        await_committed(pipe.checkpoint, timeout_s)
    finally:
        query.stop()
    return sorted(set(batches(pipe.checkpoint, COMMIT_LOG)) - committed_before)


def replay_files(
    folder: Path,
    broker: EmbeddedBroker,
    pipeline: dict[str, Any],
    schemas: dict[str, Any],
    inputs: dict[str, list[dict[str, Any]]],
) -> ReplayResult:
    """Replay ``pipeline`` with ``schemas`` written to files (``{name}`` paths in it filled)
    and each role's ``inputs`` lines written to a replay file; its result."""
    paths = {}
    for name, schema in schemas.items():
        paths[name] = folder / f"{name}.avsc"
        paths[name].write_text(json.dumps(schema), encoding="utf-8")
    text = json.dumps(pipeline)
    for name, path in paths.items():
        text = text.replace(f'"{{{name}}}"', json.dumps(str(path)))
    file = parse_pipeline_file(folder / "p.toml", {"pipeline": [json.loads(text)]})
    files = {}
    for role, lines in inputs.items():
        files[role] = folder / f"{role}.jsonl"
        files[role].write_text("".join(json.dumps(line) + "\n" for line in lines))
    return replay(file, files, bootstrap_servers=broker.bootstrap_servers)


def recreate_topic(conf: dict[str, str], topic: str, partitions: int = 1) -> None:
    """Delete ``topic`` and create it again, empty: its offsets start at 0 again."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient(conf)
    for future in admin.delete_topics([topic], operation_timeout=30).values():
        future.result(30)
    deadline = time.monotonic() + 30
    while topic in admin.list_topics(timeout=10).topics:
        assert time.monotonic() < deadline, f"topic {topic} still listed 30 s after its deletion"
        time.sleep(0.1)
    create_topic(conf, topic, partitions)
