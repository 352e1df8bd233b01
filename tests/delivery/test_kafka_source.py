"""The ``enrichd-kafka`` streaming source on the real broker and Spark, into a memory sink."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka import TopicPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable

from daemon.broker import EmbeddedBroker
from daemon.checkpoint.batch_logs import batches, planned_batch
from daemon.checkpoint.layout import COMMIT_LOG
from daemon.errors import KafkaReadError, failure_reason
from daemon.formats.avro.codec import AvroCodec, load_schema_file, parse_schema_text
from daemon.kafka import connect
from daemon.kafka.clients import read_partition
from daemon.model.record_route import bucket_of
from daemon.model.wire import (
    DEAD_LETTER_ROUTE,
    parse_offsets,
    range_name,
    split_partition_name,
    unpack,
)
from daemon.source import long_poll
from daemon.source.planning import KafkaPartition, KafkaRange, SourcePlanner
from daemon.source.spec import SourceInput, SourceSpec
from tests.fetch_fault_proxy import TOPIC_AUTHORIZATION_FAILED, faulty
from tests.kafka_helpers import (
    SCHEMAS,
    In,
    TweetViews,
    await_committed,
    client_conf,
    create_topic,
    forget_from,
    process_all,
    produce,
)

USER = load_schema_file(SCHEMAS / "user.avsc")

# The user record with a nullable key and event time, to write records lacking either.
LOOSE_USER = parse_schema_text(
    """{"type": "record", "name": "User", "namespace": "enrichd.examples", "fields": [
        {"name": "id", "type": ["null", "long"], "default": null},
        {"name": "name", "type": "string"},
        {"name": "avatar", "type": ["null", "string"], "default": null},
        {"name": "updated_at", "type": ["null", "long"], "default": null}]}"""
)


def user(i: int) -> dict[str, Any]:
    return {"id": i, "name": f"user-{i}", "avatar": None, "updated_at": 1000 + i}


def run_source(
    spark: Any,
    checkpoint: Path,
    spec: SourceSpec,
    name: str,
    ranges: set[str] | None = None,
    batch_ids: list[int] | None = None,
) -> tuple[list[Any], list[int]]:
    """Run the source into a memory sink until it has read everything; rows and batch sizes.

    ``ranges``: gets the range each pack says it was read over (what batch markers record).
    ``batch_ids``: collect through ``foreachBatch`` instead, and note there each batch's id:
    a query that starts again on its checkpoint needs it, since Spark's memory sink refuses
    to recover from a checkpoint in Append mode (it does only in Complete mode).
    """
    stream = spark.readStream.format("enrichd-kafka").option("spec", spec.encode()).load()
    collected: list[Any] = []
    if batch_ids is None:
        writer = stream.writeStream.format("memory")
    else:

        def keep(frame: Any, batch_id: int) -> None:
            batch_ids.append(batch_id)
            collected.extend(frame.collect())

        writer = stream.writeStream.foreachBatch(keep)
    query = writer.queryName(name).option("checkpointLocation", str(checkpoint)).start()
    try:
        process_all(query)
        await_committed(checkpoint, 60)  # a re-run batch too (processAllAvailable may not wait)
        sizes = [records_of(report) for report in query.recentProgress if report.numInputRows]
    finally:
        query.stop()
    if batch_ids is None:
        packs = spark.table(name).collect()
        spark.catalog.dropTempView(name)
    else:
        packs = collected
    rows = []
    for pack in packs:
        records = [SimpleNamespace(**record) for record in unpack(pack.records).to_pylist()]
        # A pack holds records of one bucket and one partition.
        assert {bucket_of(r.key, spec.state_buckets) for r in records} == {pack.bucket}
        assert len({r.partition for r in records}) == 1
        rows.extend(records)
        if ranges is not None:
            ranges.add(pack.read_range)
    return rows, sizes


def records_of(report: Any) -> int:
    """The records a micro-batch read: its offset ranges' sizes (``numInputRows`` are packs)."""
    (source,) = report.sources
    start, end = parse_offsets(source.startOffset), parse_offsets(source.endOffset)
    return sum(stop - start.get(name, 0) for name, stop in end.items())


def test_reads_the_tail_of_the_last_record_batch_without_newer_data(
    broker: EmbeddedBroker, spark: Any, fresh_topic: Callable[[str], str], tmp_path: Path
) -> None:
    """All 10 records of one produce batch are read, the last one included, with nothing
    produced after them. Tansu's ListOffsets(LATEST) says 1 here; only the Fetch high
    watermark gives 10, so a source planning from ListOffsets reads 1 row and stops."""
    conf = client_conf(broker.bootstrap_servers)
    topic = fresh_topic("hwm")
    create_topic(conf, topic, 1)
    codec = AvroCodec(USER)
    ends = produce(
        conf, topic, [In(codec.encode(user(i)), str(i).encode()) for i in range(10)], linger_ms=50
    )
    assert ends == {0: 10}
    spec = SourceSpec(
        inputs=(SourceInput("one", topic, "id", None, codec),),
        client_conf=conf,
        max_records_per_batch=100_000,
    )

    rows, _ = run_source(spark, tmp_path / "checkpoint", spec, "hwm_rows")

    assert sorted(r.offset for r in rows) == list(range(10))
    last = max(rows, key=lambda r: r.offset)
    assert last.key == "9"
    assert codec.decode(last.value) == user(9)
    assert all(r.error is None and r.input == 0 for r in rows)


CAPPED_RECORDS = sorted([(0, o) for o in range(9)] + [(1, o) for o in range(8)])
"""The (partition, offset) of each of :func:`capped`'s records."""


def capped(broker: EmbeddedBroker, topic: str, **settings: Any) -> SourceSpec:
    """17 users on two partitions of ``topic`` (user i on partition i % 2, Kafka timestamp
    5000 + i), read at most 6 a micro-batch with the spec's other ``settings``."""
    conf = client_conf(broker.bootstrap_servers)
    create_topic(conf, topic, 2)
    codec = AvroCodec(USER)
    records = [In(codec.encode(user(i)), partition=i % 2, timestamp=5000 + i) for i in range(17)]
    assert produce(conf, topic, records) == {0: 9, 1: 8}
    return SourceSpec(
        inputs=(SourceInput("one", topic, "id", "updated_at", codec),),
        client_conf=conf,
        max_records_per_batch=6,
        **settings,
    )


@pytest.mark.parametrize(
    "settings",
    [{"read_tasks": 0}, {"read_tasks": 1}, {"read_on_driver": True}],
    ids=["task-per-partition", "one-task", "driver"],
)
def test_caps_micro_batches_and_reads_every_partition_once(
    broker: EmbeddedBroker,
    spark: Any,
    fresh_topic: Callable[[str], str],
    tmp_path: Path,
    settings: dict[str, Any],
) -> None:
    """With ``read_tasks`` 1 one task reads both partitions' ranges, one after the other;
    with ``read_on_driver`` (``ENRICHD_SOURCE_READER=driver``) the driver's planning process
    reads them, and the planner, not Spark, applies the cap."""
    spec = capped(broker, fresh_topic("cap"), **settings)
    name = "cap_rows_" + "_".join(f"{key}_{int(value)}" for key, value in settings.items())

    rows, sizes = run_source(spark, tmp_path / "checkpoint", spec, name)

    assert sorted((r.partition, r.offset) for r in rows) == CAPPED_RECORDS
    assert sum(sizes) == 17
    assert max(sizes) <= 6 and len(sizes) >= 3
    by_id = {int(r.key): r for r in rows}
    assert sorted(by_id) == list(range(17))
    assert all(by_id[i].event_time == 1000 + i for i in by_id)  # from the time field
    assert all(by_id[i].timestamp == 5000 + i for i in by_id)  # the Kafka timestamp


def test_a_batch_the_driver_read_is_read_again_from_its_planned_offsets_after_a_restart(
    broker: EmbeddedBroker, spark: Any, fresh_topic: Callable[[str], str], tmp_path: Path
) -> None:
    """``read_on_driver``: a batch Spark runs again after a crash before its commit (its
    ``commits/N`` deleted) has no copy left (it lived in the driver runner's memory) and is
    read again, by a Python task, from the offsets its plan recorded: the same records, in
    packs that name the same ranges, so a batch marker's digest of them matches."""
    spec = capped(broker, fresh_topic("driver"), read_on_driver=True)
    checkpoint = tmp_path / "checkpoint"
    first_ranges: set[str] = set()

    rows, _ = run_source(spark, checkpoint, spec, "driver_rows", first_ranges, [])

    assert sorted((r.partition, r.offset) for r in rows) == CAPPED_RECORDS
    last = max(batches(checkpoint, COMMIT_LOG))
    assert last >= 2  # 17 records at most 6 a batch
    before, end = planned_batch(checkpoint, last - 1).ends, planned_batch(checkpoint, last).ends
    planned = {
        (split_partition_name(name)[1], offset)
        for name, stop in end.items()
        for offset in range(before.get(name, 0), stop)
    }
    planned_ranges = {
        range_name(*split_partition_name(name), before.get(name, 0), stop)
        for name, stop in end.items()
        if stop > before.get(name, 0)
    }
    assert planned and planned_ranges <= first_ranges
    forget_from(checkpoint, last)
    again_ranges: set[str] = set()
    again_ids: list[int] = []

    again, _ = run_source(spark, checkpoint, spec, "driver_again", again_ranges, again_ids)

    assert again_ids == [last]  # run again, and nothing more
    assert max(batches(checkpoint, COMMIT_LOG)) == last
    assert sorted((r.partition, r.offset) for r in again) == sorted(planned)
    assert again_ranges == planned_ranges
    assert {(r.key, r.value) for r in again} <= {(r.key, r.value) for r in rows}


def test_end_of_input_markers_become_control_rows_outside_the_cap(
    broker: EmbeddedBroker, spark: Any, fresh_topic: Callable[[str], str], tmp_path: Path
) -> None:
    from confluent_kafka import Producer

    from daemon.model.wire import CONTROL_INPUT, END_OF_INPUT_HEADERS
    from daemon.plugin.joiner import END_OF_TIME

    conf = client_conf(broker.bootstrap_servers)
    topic = fresh_topic("markers")
    create_topic(conf, topic, 1)
    codec = AvroCodec(USER)
    produce(conf, topic, [In(codec.encode(user(i)), timestamp=5000 + i) for i in range(6)])
    producer = Producer(conf)
    for key in (b"1", b"2", b"3"):  # after every record, as replay sends them
        producer.produce(topic, value=None, key=key, timestamp=5005, headers=END_OF_INPUT_HEADERS)
    assert producer.flush(30) == 0
    spec = SourceSpec(
        inputs=(SourceInput("one", topic, "id", None, codec, keyed_tombstones=False),),
        client_conf=conf,
        max_records_per_batch=3,
    )

    rows, sizes = run_source(spark, tmp_path / "checkpoint", spec, "marker_rows")

    # Six records in two batches of three; the markers ride along with the second.
    assert sizes == [3, 6]
    control = sorted((r.key, r.event_time) for r in rows if r.input == CONTROL_INPUT)
    assert control == [("1", END_OF_TIME), ("2", END_OF_TIME), ("3", END_OF_TIME)]
    assert sorted(int(r.key) for r in rows if r.input == 0) == list(range(6))


def test_routes_undecodable_and_keyless_records_to_dead_letters(
    broker: EmbeddedBroker, spark: Any, fresh_topic: Callable[[str], str], tmp_path: Path
) -> None:
    conf = client_conf(broker.bootstrap_servers)
    ones, manys = fresh_topic("ones"), fresh_topic("manys")
    create_topic(conf, ones, 1)
    create_topic(conf, manys, 1)
    codec, loose = AvroCodec(USER), AvroCodec(LOOSE_USER)
    good = loose.encode(user(1))
    sent = [
        In(good, b"k1", timestamp=10),  # 0
        In(b"\xff\xfe not avro", b"k2", timestamp=11),  # 1
        In(loose.encode({"id": None, "name": "no key"}), timestamp=12),  # 2
        In(loose.encode({"id": 5, "name": "no time", "updated_at": None}), timestamp=13),  # 3
        In(None, b"7", timestamp=14),  # 4: a keyed tombstone
        In(None, None, timestamp=15),  # 5: a tombstone without a Kafka key
        In(good + b"\x00\x01", timestamp=16),  # 6: trailing bytes
    ]
    produce(conf, ones, sent)
    produce(conf, manys, [In(None, b"3", timestamp=20)])
    spec = SourceSpec(
        inputs=(
            SourceInput("one", ones, "id", "updated_at", loose),
            SourceInput("many", manys, "author_id", None, codec, keyed_tombstones=False),
        ),
        client_conf=conf,
        max_records_per_batch=100_000,
    )

    rows, _ = run_source(spark, tmp_path / "checkpoint", spec, "dlq_rows")

    one = {r.offset: r for r in rows if r.input == 0}  # the spec's inputs, in order
    (many,) = [r for r in rows if r.input == 1]
    assert sorted(one) == list(range(7))
    assert (one[0].key, one[0].error, one[0].event_time) == ("1", None, 1001)
    assert (one[4].key, one[4].error, one[4].event_time) == ("7", None, 14)
    expected = {
        1: "UndecodableRecord: ",
        2: "MissingKey: ",
        3: "MissingEventTime: ",
        5: "UnroutableTombstone: ",
        6: "UndecodableRecord: ",
    }
    for offset, prefix in expected.items():
        row = one[offset]
        assert row.error is not None and row.error.startswith(prefix), (offset, row.error)
        assert row.key == DEAD_LETTER_ROUTE
        assert row.value == sent[offset].value  # the original bytes travel on
        assert row.kafka_key == sent[offset].key
    assert "'id'" in (one[2].error or "")
    assert "'updated_at'" in (one[3].error or "")
    assert many.key == DEAD_LETTER_ROUTE
    assert (many.error or "").startswith("UnroutableTombstone: ")
    assert "'author_id'" in (many.error or "")


def test_unknown_topic_fails_the_query_naming_it(
    broker: EmbeddedBroker, spark: Any, fresh_topic: Callable[[str], str], tmp_path: Path
) -> None:
    missing = fresh_topic("missing")
    spec = SourceSpec(
        inputs=(SourceInput("one", missing, "id", None, AvroCodec(USER)),),
        client_conf=client_conf(broker.bootstrap_servers),
        max_records_per_batch=10,
    )
    query = (
        spark.readStream.format("enrichd-kafka")
        .option("spec", spec.encode())
        .load()
        .writeStream.format("memory")
        .queryName("missing_rows")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .start()
    )
    try:
        with pytest.raises(Exception, match=missing):
            process_all(query)
    finally:
        query.stop()


def test_missing_input_topic_at_start_up_is_a_one_line_error_naming_it(
    tweet_views: Callable[..., TweetViews],
) -> None:
    from daemon.errors import KafkaUnavailableError
    from daemon.pipeline.plan import plan_pipeline

    views = tweet_views("missing", create=False)
    conf, users, tweets = views.conf, views.users, views.tweets
    create_topic(conf, users, 1)  # the tweets' topic is missing
    file = views.file()
    with pytest.raises(KafkaUnavailableError) as caught:
        plan_pipeline(file, file.pipeline[0], conf)
    message = str(caught.value)
    assert "\n" not in message
    assert repr(tweets) in message and "'many'" in message
    assert users not in message


def test_a_partition_the_client_cannot_read_fails_with_one_line_and_nothing_is_passed_over(
    broker: EmbeddedBroker, spark: Any, fresh_topic: Callable[[str], str], tmp_path: Path
) -> None:
    """A proxy answers the partition's Fetch requests with an authorization error, then with
    its record batch corrupted on the way: each read ends at once with one line naming the
    partition, the offset and what to do, rather than waiting out a stall or reading past the
    batch; once the proxy answers right, every record is read. Through the engine, the
    refusal fails the micro-batch with that line."""
    conf = client_conf(broker.bootstrap_servers)
    topic = fresh_topic("faults")
    create_topic(conf, topic, 1)
    produce(conf, topic, [In(b"first %d" % i) for i in range(10)])
    produce(conf, topic, [In(b"second %d" % i) for i in range(10)])
    with faulty(broker) as proxy:
        spec = SourceSpec(
            inputs=(SourceInput("one", topic, "id", None, AvroCodec(USER)),),
            client_conf=client_conf(proxy.bootstrap_servers),
            max_records_per_batch=100,
        )

        def read() -> list[int]:
            consumer = connect.consumer(spec.reader_conf())
            try:
                chunks = read_partition(consumer, TopicPartition(topic, 0, 0), 20, stall_s=60)
                return [m.offset() for chunk in chunks for m in chunk]
            finally:
                consumer.close()

        proxy.errors[(topic, 0)] = TOPIC_AUTHORIZATION_FAILED
        with pytest.raises(KafkaReadError) as refused:
            read()
        line = str(refused.value)
        assert line.startswith(
            f"cannot read topic '{topic}' partition 0 at offset 0 (TOPIC_AUTHORIZATION_FAILED: "
        )
        assert line.endswith(
            "; allow the principal Read and Describe on the topic (docs/connecting.md, what a "
            "pipeline may do on the cluster)"
        )

        with pytest.raises(Exception) as failed:  # noqa: PT011 - Spark's, checked below
            run_source(spark, tmp_path / "checkpoint", spec, "refused_rows")
        assert failure_reason(str(failed.value)) == line

        proxy.errors.clear()
        proxy.corrupt.add((topic, 0))
        with pytest.raises(KafkaReadError) as corrupt:
            read()
        assert f"cannot read topic '{topic}' partition 0 at offset " in str(corrupt.value)
        assert "; its record batch is corrupt, on the broker or on the way" in str(corrupt.value)
        assert proxy.faults > 0

        proxy.corrupt.clear()
        assert read() == list(range(20))


def test_an_idle_plan_waits_for_a_record_and_plans_it_at_once(
    broker: EmbeddedBroker,
    fresh_topic: Callable[[str], str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A plan that would read nothing waits on the probe for a record (a long poll, not
    Spark's 10 ms polling): with nothing produced it returns its start, so Spark runs no
    batch; a record produced while it waits is in the plan it returns."""
    conf = client_conf(broker.bootstrap_servers)
    topic = fresh_topic("idle")
    create_topic(conf, topic, 1)
    produce(conf, topic, [In(b"first")])
    spec = SourceSpec(
        inputs=(SourceInput("one", topic, "id", None, AvroCodec(USER)),),
        client_conf=conf,
        max_records_per_batch=100,
    )
    planner = SourcePlanner(spec)
    waits: list[bool] = []
    waiting = threading.Event()
    await_record = long_poll.await_record

    def noted(probe: Any, timeout_s: float) -> bool:
        waiting.set()
        waits.append(await_record(probe, timeout_s))
        return waits[-1]

    monkeypatch.setattr(long_poll, "await_record", noted)
    try:
        first = planner.latest_offsets(planner.initial_offsets(), ReadAllAvailable())
        assert first[f"{topic}/0"] == 1
        assert waits == []  # a plan with a record to read returns at once

        assert planner.latest_offsets(first, ReadAllAvailable()) == first
        assert waits == [False]  # it waited, nothing came, and it plans what it started from

        # A bound far past the produce: a wait that a record did not end would show as False.
        monkeypatch.setattr(long_poll, "IDLE_WAIT_S", 300.0)
        waiting.clear()

        def produce_while_waiting() -> None:
            waiting.wait(300)
            produce(conf, topic, [In(b"second")])

        producer = threading.Thread(target=produce_while_waiting, daemon=True)
        producer.start()
        second = planner.latest_offsets(first, ReadAllAvailable())
        producer.join(60)
        assert waits == [False, True]
        assert second[f"{topic}/0"] == 2
        assert planner.partitions(first, second) == [KafkaPartition((KafkaRange(topic, 0, 1, 2),))]
    finally:
        planner.stop()
