"""The transactional Kafka sink: restarts from the checkpoint write every output exactly once."""

from __future__ import annotations

import os
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from daemon.broker import EmbeddedBroker
from daemon.checkpoint.layout import COMMIT_LOG, OFFSET_LOG, log_folder
from daemon.errors import CheckpointDivergedError
from daemon.formats.avro.codec import AvroCodec, load_schema_file
from daemon.model.config import PipelineFile
from tests.kafka_helpers import (
    SCHEMAS,
    In,
    TweetViews,
    client_conf,
    create_topic,
    forget_from,
    produce,
    read_topic,
    run_pipeline,
)

USERS = AvroCodec(load_schema_file(SCHEMAS / "user.avsc"))
TWEETS = AvroCodec(load_schema_file(SCHEMAS / "tweet.avsc"))
VIEWS = AvroCodec(load_schema_file(SCHEMAS / "tweet_view.avsc"))


def users(*ids: int) -> list[In]:
    return [
        In(USERS.encode({"id": i, "name": f"user {i}"}), str(i).encode(), timestamp=1000 + i)
        for i in ids
    ]


def tweets(ids: range) -> list[In]:
    return [
        In(
            TWEETS.encode({"id": i, "author_id": 1 + i % 2, "content": f"tweet {i}"}),
            str(i).encode(),
            timestamp=10_000 + i,
        )
        for i in ids
    ]


def view_counts(conf: dict[str, str], topic: str) -> Counter[int]:
    """How many times each tweet's view is in the output (read_committed)."""
    counts: Counter[int] = Counter()
    for record in read_topic(conf, topic):
        view = VIEWS.decode(record.value or b"")
        assert record.key == str(view["id"]).encode()
        assert view["author"]["name"] == f"user {view['tweet']['author_id']}"
        counts[view["id"]] += 1
    return counts


def _setup(
    tweet_views: Callable[..., TweetViews], **pipeline: Any
) -> tuple[dict[str, str], PipelineFile, str, str]:
    setup = tweet_views("sink", partitions=2)
    file = setup.file(**pipeline)
    produce(setup.conf, setup.users, users(1, 2))
    return setup.conf, file, setup.tweets, setup.output


def test_restarts_from_the_checkpoint_write_each_output_once(
    spark: Any, tweet_views: Callable[..., TweetViews]
) -> None:
    """What this proves, on Tansu: (1) a query stopped and started again on the same
    checkpoint resumes at the offsets Spark stored there, so no input record is joined twice
    and none is skipped; (2) when Spark re-runs a micro-batch whose output already landed
    (simulated by deleting its ``commits/N`` file, which is what Spark sees after a crash
    between the Kafka commit and its own commit), the sink's committed-batch marker makes it
    write nothing the second time; (3) the same re-run without the marker (``at_least_once``)
    does duplicate, so (2) is not vacuous. Every check counts the records actually present
    in the output topic, read with ``read_committed``.

    What it cannot prove: behaviour after a real process crash mid-transaction (a hung or
    killed executor), fencing of a zombie producer, or that aborted transactions are hidden
    from ``read_committed`` readers (Tansu may not filter them; these runs abort nothing, so
    any duplicate written would show up in the counts above).
    """
    conf, file, tweet_topic, output = _setup(tweet_views)
    checkpoint = file.pipeline[0].checkpoint

    produce(conf, tweet_topic, tweets(range(100, 106)))
    first = run_pipeline(spark, file)
    assert view_counts(conf, output) == dict.fromkeys(range(100, 106), 1)

    produce(conf, tweet_topic, tweets(range(106, 112)))
    second = run_pipeline(spark, file)
    assert first and second and min(second) > max(first)  # resumed, not restarted
    assert view_counts(conf, output) == dict.fromkeys(range(100, 112), 1)

    # Spark forgets it committed the last batch: on restart it runs that batch again.
    last = max(second)
    forget_from(checkpoint, last)
    replayed = run_pipeline(spark, file)
    assert replayed[0] == last  # then at most batches without input (seen once in CI)
    assert view_counts(conf, output) == dict.fromkeys(range(100, 112), 1)

    # Control: the same replay without transactions writes that batch's views again.
    forget_from(checkpoint, last)
    pipe = file.pipeline[0].model_copy(update={"delivery": "at_least_once"})
    at_least_once = file.model_copy(update={"pipeline": [pipe]})
    assert run_pipeline(spark, at_least_once)[0] == last
    counts = view_counts(conf, output)
    assert set(counts) == set(range(100, 112))
    # It failed once in a full CI run (passing alone): say which ranges the batches read.
    assert any(n > 1 for n in counts.values()), (
        f"no view written twice by the replay of batch {last} (second run: {second}); "
        f"planned ranges: {planned_offsets(checkpoint, [*first, *second])}"
    )

    # (4) The checkpoint loses the last batch whole (offsets and commits: a host crash before
    # Spark's renames reached the disk, a restored snapshot), and more input arrives: Spark
    # would plan that batch again over other ranges, its marker would skip it, and the new
    # tweets' views would never be written. The start refuses, naming both, and writes nothing.
    lose_from(checkpoint, last)
    produce(conf, tweet_topic, tweets(range(112, 122)))
    with pytest.raises(CheckpointDivergedError) as refused:
        run_pipeline(spark, file)
    line = str(refused.value)
    assert "\n" not in line
    assert f"ends at micro-batch {last - 1}, but task " in line
    assert f"marker says micro-batch {last} (" in line and f"{tweet_topic}/" in line
    assert set(view_counts(conf, output)) == set(range(100, 112))


def lose_from(checkpoint: Path, batch: int) -> None:
    """Make Spark's checkpoint lose ``batch`` and those after it: offsets and commits."""
    for log in (COMMIT_LOG, OFFSET_LOG):
        folder = log_folder(checkpoint, log)
        for path in folder.glob("[0-9]*"):
            if int(path.name) >= batch:
                path.unlink()
                (folder / f".{path.name}.crc").unlink(missing_ok=True)


def planned_offsets(checkpoint: Path, batches: list[int]) -> dict[int, str]:
    """The source offsets each batch planned, as the checkpoint's offset log holds them."""
    logs = {n: log_folder(checkpoint, OFFSET_LOG) / str(n) for n in batches}
    return {n: path.read_text().splitlines()[-1] for n, path in logs.items() if path.exists()}


def test_at_least_once_delivery_writes_every_output(
    spark: Any, tweet_views: Callable[..., TweetViews]
) -> None:
    conf, file, tweet_topic, output = _setup(
        tweet_views, delivery="at_least_once", max_records_per_batch=5
    )
    produce(conf, tweet_topic, tweets(range(200, 212)))
    batches = run_pipeline(spark, file)
    assert len(batches) >= 2
    assert view_counts(conf, output) == dict.fromkeys(range(200, 212), 1)


def test_a_fresh_checkpoint_writes_its_outputs_again(
    spark: Any, tweet_views: Callable[..., TweetViews], tmp_path: Path
) -> None:
    """Deleting the checkpoint reprocesses the inputs from the start: the new query's batch
    ids start at 0 again, and the sink must not take them for the old query's batches."""
    conf, file, tweet_topic, output = _setup(tweet_views)
    produce(conf, tweet_topic, tweets(range(300, 304)))
    run_pipeline(spark, file)
    assert view_counts(conf, output) == dict.fromkeys(range(300, 304), 1)

    pipe = file.pipeline[0].model_copy(update={"checkpoint": tmp_path / "new-checkpoint"})
    run_pipeline(spark, file.model_copy(update={"pipeline": [pipe]}))
    assert view_counts(conf, output) == dict.fromkeys(range(300, 304), 2)


def sink_spec(conf: dict[str, str], pipeline: str, topic: str) -> Any:
    """An exactly-once output spec of ``pipeline`` writing ``topic``, its markers topic
    created (as a pipeline's start creates it)."""
    from daemon.sink.spec import OutputSpec

    spec = OutputSpec(pipeline, conf, "exactly_once", output_topic=topic)
    create_topic(conf, spec.markers_topic)
    return spec


def commit_one(spec: Any, topic: str, batch: int, value: bytes) -> Any:
    """Write one record as partition 0's task of ``batch`` would, and commit; the task output."""
    from daemon.sink.task_output import TaskOutput

    output = TaskOutput(spec, 0, batch, "query")
    output.send(topic, b"k", value, None)
    output.commit()
    return output


def test_a_kept_producer_fenced_by_another_starts_over_and_writes_each_batch_once(
    broker: EmbeddedBroker, fresh_topic: Callable[[str], str]
) -> None:
    """A task keeps its transactional producer for the next batch; when another producer has
    initialised the same id meanwhile (the task ran in another worker), the kept one is
    fenced before it writes, and the task starts over with a new producer. Drives the task
    output directly against the broker, as a reused Python worker would."""
    from confluent_kafka import Producer

    from daemon.sink.task_output import TaskOutput
    from daemon.sink.task_producer import forget_kept_clients

    conf = client_conf(broker.bootstrap_servers)
    topic = fresh_topic("fenced")
    create_topic(conf, topic)
    spec = sink_spec(conf, f"fenced-{topic}", topic)

    def write(batch: int, value: bytes) -> TaskOutput:
        return commit_one(spec, topic, batch, value)

    try:
        assert not write(0, b"a").skipped
        rival = Producer({**conf, "transactional.id": f"enrichd.{spec.pipeline}.0"})
        rival.init_transactions(30)  # fences the producer the task kept
        assert write(1, b"b").records == {topic: 1}
        assert write(1, b"b").skipped  # batch 1 again
        assert write(2, b"c").records == {topic: 1}
        assert [record.value for record in read_topic(conf, topic)] == [b"a", b"b", b"c"]
    finally:  # what the task keeps would outlive the broker in this process
        forget_kept_clients()


class _Watched:
    """A producer that counts the transactions begun on it."""

    def __init__(self, producer: Any) -> None:
        self.producer = producer
        self.begun = 0

    def begin_transaction(self) -> None:
        self.begun += 1
        self.producer.begin_transaction()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.producer, name)


def test_a_kept_producer_that_did_not_commit_the_last_batch_is_not_tried(
    broker: EmbeddedBroker, fresh_topic: Callable[[str], str]
) -> None:
    """Worker A keeps its producer after batch 0; batch 1 runs in worker B, whose producer
    takes the id over; batch 2 comes back to A. The marker says A's producer did not commit
    batch 1, so A starts over with a new producer without trying the kept one, which would
    only be refused as fenced (and the client log an error)."""
    from daemon.sink import task_producer
    from daemon.sink.task_output import TaskOutput
    from daemon.sink.task_producer import forget_kept_clients

    conf = client_conf(broker.bootstrap_servers)
    topic = fresh_topic("moved")
    create_topic(conf, topic)
    spec = sink_spec(conf, f"moved-{topic}", topic)
    kept = task_producer._TRANSACTIONAL
    txn_id = f"enrichd.{spec.pipeline}.0"

    def write(batch: int, value: bytes) -> TaskOutput:
        return commit_one(spec, topic, batch, value)

    try:
        write(0, b"a")
        producer, group, batch = kept.pop(txn_id)  # worker A's, set aside while B runs
        worker_a = _Watched(producer)
        write(1, b"b")  # in worker B: a new producer takes the id over
        kept[txn_id] = (worker_a, group, batch)  # back in worker A

        assert write(2, b"c").records == {topic: 1}
        assert worker_a.begun == 0
        assert [record.value for record in read_topic(conf, topic)] == [b"a", b"b", b"c"]
    finally:  # what the task keeps would outlive the broker in this process
        forget_kept_clients()


def produced(conf: dict[str, str], topic: str, expected: int, wait_s: float = 3.0) -> list[bytes]:
    """The values in ``topic``'s partition 0 so far, committed or not: read until ``expected``
    are found or ``wait_s`` passes."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {**conf, "group.id": "enrichd-tests", "isolation.level": "read_uncommitted"}
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    values: list[bytes] = []
    deadline = time.monotonic() + wait_s
    try:
        while len(values) < expected and time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is not None and message.error() is None:
                values.append(message.value())
    finally:
        consumer.close()
    return values


def test_a_task_produces_its_records_when_it_commits_past_its_memory_too(
    broker: EmbeddedBroker, fresh_topic: Callable[[str], str]
) -> None:
    """A task's records are held back until it commits, so a task killed before its commit
    has put none of them in the output; past its memory budget it holds them in a file, not
    in the output."""
    from daemon.sink.task_output import TaskOutput
    from daemon.sink.task_producer import forget_kept_clients

    conf = client_conf(broker.bootstrap_servers)
    topic = fresh_topic("held")
    create_topic(conf, topic)
    spec = replace(sink_spec(conf, f"held-{topic}", topic), held_bytes=600)
    try:
        output = TaskOutput(spec, 0, 0, "query")
        for value in (b"a", b"b", b"c", b"d"):
            output.send(topic, b"k", value, None)
        assert produced(conf, topic, 1) == []  # held, the first ones on disk
        output.commit()
        assert [record.value for record in read_topic(conf, topic)] == [b"a", b"b", b"c", b"d"]
    finally:  # what the task keeps would outlive the broker in this process
        forget_kept_clients()


def test_a_replay_over_other_input_ranges_stops_naming_both(
    broker: EmbeddedBroker, fresh_topic: Callable[[str], str]
) -> None:
    """The marker records the input ranges the task's batch covered: a replay of the batch
    over the same ranges writes nothing; over other ranges (the checkpoint lost what the
    output holds) it fails with one line naming both, and writes nothing either."""
    from daemon.errors import CheckpointDivergedError
    from daemon.sink.markers import query_markers
    from daemon.sink.task_output import TaskOutput
    from daemon.sink.task_producer import forget_kept_clients

    conf = client_conf(broker.bootstrap_servers)
    topic = fresh_topic("ranges")
    create_topic(conf, topic)
    spec = sink_spec(conf, f"ranges-{topic}", topic)

    def task(batch: int, covered: str) -> TaskOutput:
        output = TaskOutput(spec, 0, batch, "query")
        output.covered.add(covered)
        output.send(topic, b"k", covered.encode(), None)
        return output

    try:
        task(0, "tweets/0:0-15").commit()
        (marker,) = query_markers(conf, "enrichd", spec.pipeline, "query", topic).values()
        assert marker.batch == 0 and marker.share is not None
        assert marker.share.by_partition() == {"tweets/0": (0, 15)}

        again = task(0, "tweets/0:0-15")
        again.commit()
        assert again.skipped

        diverged = task(0, "tweets/0:0-25")
        with pytest.raises(CheckpointDivergedError) as failed:
            diverged.commit()
        line = str(failed.value)
        assert "\n" not in line
        assert "marker says it covered tweets/0 offsets 0-15" in line
        assert "this run read tweets/0 offsets 0-25" in line
        assert [r.value for r in read_topic(conf, topic)] == [b"tweets/0:0-15"]
    finally:  # what the task keeps would outlive the broker in this process
        forget_kept_clients()


def test_a_marker_of_the_older_layout_is_read_once_to_migrate(
    broker: EmbeddedBroker, fresh_topic: Callable[[str], str]
) -> None:
    """A checkpoint of an older enrichd: its marker is the offset batch + 1 of the group
    ``...sink.<query>.<task>`` on the output's partition 0. Its batch is skipped; the next
    one writes, and its marker goes to the markers topic, off the output's partitions."""
    from confluent_kafka import Consumer, TopicPartition

    from daemon.kafka.names import legacy_marker_group
    from daemon.sink.markers import query_markers
    from daemon.sink.task_producer import forget_kept_clients

    conf = client_conf(broker.bootstrap_servers)
    topic = fresh_topic("legacy")
    create_topic(conf, topic)
    spec = sink_spec(conf, f"legacy-{topic}", topic)
    old = Consumer({**conf, "group.id": legacy_marker_group("enrichd", spec.pipeline, "query", 0)})
    old.commit(offsets=[TopicPartition(topic, 0, 5)], asynchronous=False)  # batch 4 committed
    old.close()
    try:
        assert commit_one(spec, topic, 4, b"replayed").skipped
        assert not commit_one(spec, topic, 5, b"new").skipped
        assert [r.value for r in read_topic(conf, topic)] == [b"new"]
        (marker,) = query_markers(conf, "enrichd", spec.pipeline, "query", topic).values()
        assert marker.batch == 5 and marker.share is not None
    finally:  # what the task keeps would outlive the broker in this process
        forget_kept_clients()


COMMIT_GUARD_S = 120.0
"""A guard against a hang, not a measurement: a task that waited for the commit turn held by
the test would wait for as long as the test holds it."""


def test_the_commit_turn_is_taken_on_the_embedded_broker_only_unless_forced(
    broker: EmbeddedBroker, tweet_views: Callable[..., TweetViews]
) -> None:
    """A plan asks the cluster for its id: the embedded broker's takes the turn, any other
    cluster's (here a Tansu with its own id) does not, and ``[kafka] commit_turn`` forces
    either. On the other cluster a task initialises, writes and commits while this process
    holds the turn, which a task that took it would wait for. There, the plan creates the
    output topics only with ``[kafka] replication_factor`` set: the broker's default may be
    less than the cluster needs."""
    import fcntl

    from daemon.errors import ConfigError
    from daemon.kafka.admin import existing_topics
    from daemon.pipeline.plan import plan_pipeline
    from daemon.private_paths import open_private, runtime_folder
    from daemon.sink.commit_turn import LOCK_NAME
    from daemon.sink.spec import OutputSpec
    from daemon.sink.task_producer import forget_kept_clients
    from tests.ports import free_port
    from tests.secure_cluster import start_tansu, stop_process

    port = free_port()
    tansu = start_tansu(port, port, cluster_id="tansu_cluster")
    other = f"127.0.0.1:{port}"
    setup = tweet_views("unturned", create=False)
    setup = replace(setup, output=setup.name)  # one topic, named as the pipeline
    topic = setup.name

    def planned(servers: str, **kafka: Any) -> OutputSpec:
        file = setup.file(servers=servers, kafka=kafka)
        return plan_pipeline(file, file.pipeline[0], client_conf(servers)).output

    try:
        for servers in (broker.bootstrap_servers, other):
            create_topic(client_conf(servers), setup.users)
            create_topic(client_conf(servers), setup.tweets)
        assert planned(broker.bootstrap_servers).commit_turn is True
        with pytest.raises(ConfigError) as refused:
            planned(other)
        assert str(refused.value).startswith(
            f"topics '{topic}', '{setup.dead_letters}' do not exist, and [kafka] "
            "replication_factor is not set; create them with the replication your cluster "
            "needs, or set replication_factor"
        )
        assert topic not in existing_topics(client_conf(other))
        assert planned(other, replication_factor=1).commit_turn is False
        assert planned(other, replication_factor=1, commit_turn=True).commit_turn is True
        assert planned(broker.bootstrap_servers, commit_turn=False).commit_turn is False

        spec = planned(other)  # the output topic is there: nothing to create
        written: list[Any] = []  # the task's output, once it committed
        writer = threading.Thread(target=lambda: written.append(commit_one(spec, topic, 0, b"a")))
        turn = open_private(runtime_folder() / LOCK_NAME)
        try:
            fcntl.flock(turn, fcntl.LOCK_EX)
            writer.start()
            writer.join(COMMIT_GUARD_S)
            took_turn = writer.is_alive()
        finally:
            os.close(turn)  # releases the turn: a waiting task goes on and ends
            writer.join()
        assert not took_turn, "the task waited for the commit turn on a cluster not embedded"
        assert written and written[0].records == {topic: 1}
        assert [record.value for record in read_topic(client_conf(other), topic)] == [b"a"]
    finally:
        forget_kept_clients()  # before the broker goes: the task keeps its producer
        stop_process(tansu)


OTHER_DAEMON = """
import sys
from daemon.sink.spec import OutputSpec
from daemon.sink.task_output import TaskOutput
from daemon.sink.task_producer import forget_kept_clients

spec = OutputSpec.decode(sys.argv[1])
output = TaskOutput(spec, 0, 0, sys.argv[2])
output.open()
print("open", flush=True)
sys.stdin.readline()
try:
    output.send(spec.output_topic, b"k", b"from the other daemon", None)
    output.commit()
    print("committed", flush=True)
finally:
    forget_kept_clients()
"""
"""Task 0 of micro-batch 0 of a pipeline in a daemon of its own: it opens its transaction,
says so, and writes and commits when told."""


def test_two_environments_of_one_pipeline_write_side_by_side_without_fencing(
    tweet_views: Callable[..., TweetViews], fresh_topic: Callable[[str], str], tmp_path: Path
) -> None:
    """Staging and production of one pipeline (one name, one input, outputs of their own),
    each planned from its own file: task 0 of each opens its transaction of the same
    micro-batch at once, production's in a process of its own as in its own daemon, and
    both commit. With their own ``id_prefix`` neither fences the other; with one prefix
    (the control) production's initialisation fences staging's open transaction."""
    import subprocess
    import sys

    from confluent_kafka import KafkaException

    from daemon.pipeline.plan import plan_pipeline
    from daemon.sink.spec import OutputSpec
    from daemon.sink.task_output import TaskOutput
    from daemon.sink.task_producer import forget_kept_clients
    from tests.kafka_helpers import groups_starting

    pipeline = tweet_views("views")  # one name, one input; outputs and files of each's own
    conf, name = pipeline.conf, pipeline.name

    def planned(env: str, prefix: str) -> OutputSpec:
        own = replace(
            pipeline,
            folder=tmp_path / env,
            output=fresh_topic(f"{env}-views"),
            dead_letters=fresh_topic(f"{env}-dlq"),
        )
        file = own.file(kafka={"id_prefix": prefix})
        return plan_pipeline(file, file.pipeline[0], conf).output

    def side_by_side(staging: OutputSpec, production: OutputSpec) -> subprocess.Popen[str]:
        """Staging's task opens, then production's; staging commits, then production."""
        here = TaskOutput(staging, 0, 0, "staging-query")
        here.open()
        other = subprocess.Popen(
            [sys.executable, "-c", OTHER_DAEMON, production.encode(), "production-query"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert other.stdout is not None and other.stdin is not None
        try:
            assert other.stdout.readline() == "open\n"
            here.send(staging.output_topic, b"k", b"from this daemon", None)
            here.commit()
        finally:
            other.stdin.write("go\n")
            other.stdin.close()
            other.wait(120)
        return other

    try:
        staging, production = planned("staging", "staging"), planned("production", "production")
        other = side_by_side(staging, production)
        assert other.returncode == 0 and other.stdout is not None
        assert other.stdout.read() == "committed\n"
        assert [r.value for r in read_topic(conf, staging.output_topic)] == [b"from this daemon"]
        assert [r.value for r in read_topic(conf, production.output_topic)] == [
            b"from the other daemon"
        ]
        for env in ("staging", "production"):
            assert groups_starting(conf, f"{env}.{name}.marker."), env
        assert groups_starting(conf, f"enrichd.{name}.") == []

        # The control: one prefix, one transactional id for both tasks. Staging's producer
        # learns it is fenced when the broker answers its first record's partition: if that
        # answer comes before its next record (the marker), librdkafka refuses that record
        # with its fatal error; if not, the commit is refused as fenced.
        forget_kept_clients()
        with pytest.raises(KafkaException, match="(?i)fenced|fatal error"):
            side_by_side(planned("staging", "shared"), planned("production", "shared"))
    finally:  # what the task keeps would outlive the broker in this process
        forget_kept_clients()
