"""Replay: run a pipeline end to end over recorded inputs and collect what it wrote.

The records of every input file are produced to fresh topics in timestamp order across all
inputs (ties keep the order of the inputs as given, then file order), followed by one
end-of-input marker per join key (:data:`daemon.model.wire.CONTROL_INPUT`), which advances
that key's event time past every window and horizon so that everything a joiner holds back
comes out. The pipeline runs through the real engine until every record and marker is
consumed; a joiner's second stage (:class:`daemon.plugin.joiner.Downstream`) then runs over
the first stage's output the same way. The output, secondary output and dead-letter topics
are read back. Fresh topics and a fresh checkpoint make every replay
independent of the last, also on a shared broker.
"""

from __future__ import annotations

import json
import tempfile
import time
import uuid
from collections.abc import Callable
from contextlib import ExitStack, closing
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from daemon.broker import EmbeddedBroker
from daemon.consumed import Consumed, TaskReports, reached, spark_progress
from daemon.errors import (
    ConfigError,
    EnrichdError,
    PipelineFailedError,
    ReplayInputError,
    failure_reason,
    task_traceback,
)
from daemon.formats.avro.codec import AvroCodec
from daemon.formats.kafka_keys import KafkaKeyCodec
from daemon.formats.serdes import codec_for, key_codec_for
from daemon.formats.subjects import pinned_subjects
from daemon.kafka import connect
from daemon.kafka.admin import create_topics
from daemon.kafka.clients import Deliveries, produce, read_partition
from daemon.kafka.connect import client_conf
from daemon.kafka.names import reader_group
from daemon.model.config import PipelineConfig, PipelineFile, pick_pipeline
from daemon.model.headers import Headers
from daemon.model.wire import END_OF_INPUT_HEADERS, partition_name
from daemon.spark.session import spark_session

MAIN_OUTPUT = "output"
"""The name of a pipeline's main output, as metrics and ``daemon replay`` call it."""

REPLAY_PARTITIONS = 2
"""Partitions of each fresh input topic: more than one, so partitioning is exercised."""


@dataclass(frozen=True)
class ReplayRecord:
    """One line of a replay input file."""

    role: str
    key: Any
    value: dict[str, Any] | None
    timestamp: int
    line: int
    headers: Headers | None = None
    """The line's ``"headers"``, as Kafka headers; None: it gives none."""


@dataclass
class ReplayResult:
    """What the pipeline wrote: output records and dead letters, as JSON-ready dicts.

    ``extra`` holds the records of each secondary output (``[pipeline.outputs.NAME]``, and
    an output the engine makes, such as a versioned lookup's ``retractions``).
    """

    outputs: list[dict[str, Any]]
    dead_letters: list[dict[str, Any]]
    input_records: int
    batches: int
    extra: dict[str, list[dict[str, Any]]] = field(default_factory=dict)

    def by_output(self) -> dict[str, list[dict[str, Any]]]:
        """Every output's records by its name: ``output`` (the main one) first, then the rest."""
        return {MAIN_OUTPUT: self.outputs, **self.extra}


def key_bytes(key: Any) -> bytes | None:
    """A replay key as a text Kafka key: strings as UTF-8, other JSON values as their text."""
    return KafkaKeyCodec().encode_value(key)


def read_input_file(
    path: Path, role: str, codec: AvroCodec, keys: KafkaKeyCodec | None = None
) -> list[ReplayRecord]:
    """Read and check one input file: every line an object with key, value and timestamp.

    The key follows the input's ``key_format`` (``keys``; text when None): see
    :meth:`daemon.formats.kafka_keys.KafkaKeyCodec.encode_value`. A line may give the
    record's Kafka headers, ``"headers": {"traceparent": "00-..."}`` (values as UTF-8 text;
    null: a header without a value), as replay prints them.

    Raises:
        ReplayInputError: naming the file and line, when a line is not such an object, or its
            value does not match the input's schema, or its key the key format.
    """
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise ReplayInputError(f"{path}: cannot read ({exc.strerror})") from None
    records = []
    for number, text in enumerate(lines, start=1):
        if not text.strip():
            continue
        where = f"{path}:{number}"
        try:
            item = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ReplayInputError(f"{where}: not JSON ({exc.msg})") from None
        if not isinstance(item, dict) or "value" not in item or "timestamp" not in item:
            raise ReplayInputError(
                f'{where}: expected an object with "key", "value" and "timestamp"'
            )
        timestamp = item["timestamp"]
        if not isinstance(timestamp, int) or isinstance(timestamp, bool) or timestamp < 1:
            # Kafka clients read a timestamp of 0 as "now", so it cannot be replayed.
            raise ReplayInputError(f'{where}: "timestamp" must be epoch milliseconds, at least 1')
        value = item["value"]
        if value is not None:
            try:
                codec.encode(value)
            except Exception as exc:
                raise ReplayInputError(
                    f"{where}: value does not match the {role!r} schema: {exc}"
                ) from None
        if keys is not None:
            try:
                keys.encode_value(item.get("key"))
            except Exception as exc:
                raise ReplayInputError(
                    f'{where}: "key" does not fit the {role!r} key_format '
                    f"{keys.key_format!r}: {exc}"
                ) from None
        headers = item.get("headers")
        try:
            carried = headers_of_line(headers)
        except ValueError as exc:
            raise ReplayInputError(f'{where}: "headers" {exc}') from None
        records.append(ReplayRecord(role, item.get("key"), value, timestamp, number, carried))
    return records


def headers_of_line(headers: Any) -> Headers | None:
    """A replay line's ``"headers"`` object as Kafka headers (None: no headers).

    Raises:
        ValueError: it is not an object of texts (or nulls).
    """
    if headers is None:
        return None
    if not isinstance(headers, dict) or not all(
        isinstance(value, str | None) for value in headers.values()
    ):
        raise ValueError('must be an object of header names and texts: {"traceparent": "00-..."}')
    return (
        tuple(
            (name, None if value is None else value.encode("utf-8"))
            for name, value in headers.items()
        )
        or None
    )


def arrival_order(inputs: dict[str, list[ReplayRecord]]) -> list[ReplayRecord]:
    """All records in timestamp order; ties keep the inputs' order, then file order."""
    tagged = [
        (record.timestamp, rank, index, record)
        for rank, records in enumerate(inputs.values())
        for index, record in enumerate(records)
    ]
    return [record for *_, record in sorted(tagged, key=lambda t: t[:3])]


Progress = Callable[[int, int], None]
"""Called with (input records read so far, in total) while the pipeline runs; the inputs'
end-of-input markers (and a later stage's transaction markers) count as records."""


def replay(
    file: PipelineFile,
    files: dict[str, Path],
    *,
    pipeline: str | None = None,
    max_batch: int | None = None,
    bootstrap_servers: str | None = None,
    progress: Progress | None = None,
    timeout_s: float = 600.0,
) -> ReplayResult:
    """Run one pipeline over recorded inputs and return what it wrote.

    Runs on the process's Spark session if one is running, and leaves it running; otherwise
    it starts one and stops it before returning.

    Args:
        file: the pipeline file.
        files: an input file per role.
        pipeline: which pipeline of the file; needed when it has several.
        max_batch: cap on records per micro-batch; the results must not depend on it.
        bootstrap_servers: a broker to use instead of the file's or the embedded one.
        progress: called as records are consumed.
        timeout_s: give up when the pipeline has not consumed everything by then.

    Raises:
        ConfigError: an unknown role, or a problem with the pipeline.
        ReplayInputError: a malformed input file (naming file and line).
    """
    # Spark: daemon.testing imports this module, and its run_joiner runs without Spark.
    from daemon.pipeline.plan import plan_pipeline, start_query

    pipe = pick_pipeline(file, pipeline)
    unknown = sorted(set(files) - set(pipe.inputs))
    if unknown:
        raise ConfigError(
            f"--input {unknown[0]}=...: pipeline {pipe.name!r} has no input role "
            f"{unknown[0]!r}; its roles: {', '.join(pipe.inputs)}"
        )
    # Fresh topics keep their input's schema, so one codec per role serves checking the
    # files and producing them (as a writer: with a registry, records carry the schema id).
    codecs = {role: codec_for(file, spec, writing=True) for role, spec in pipe.inputs.items()}
    keys = {role: key_codec_for(file, spec, writing=True) for role, spec in pipe.inputs.items()}
    inputs = {
        role: read_input_file(files[role], role, codecs[role], keys[role])
        for role in pipe.inputs
        if role in files
    }
    with ExitStack() as stack:
        servers = bootstrap_servers or file.kafka.bootstrap_servers
        if servers is None:
            servers = stack.enter_context(EmbeddedBroker()).bootstrap_servers
        checkpoint = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="enrichd-")))
        fresh = _fresh_pipeline(pipe, checkpoint / "checkpoint", max_batch)
        conf = client_conf(file, servers)
        reader = {**_READER, "group.id": reader_group(file.kafka.id_prefix)}
        topics = {spec.topic: REPLAY_PARTITIONS for spec in fresh.inputs.values()}
        create_topics(conf, topics, file.kafka.replication_factor)
        records = arrival_order(inputs)
        plan = plan_pipeline(file, fresh, conf)
        ends = _produce(conf, plan, codecs, keys, records, _join_keys(plan, keys, records))
        spark = _session_until_done(file, stack)
        batches = 0
        for stage in plan.stages():
            if stage is not plan:  # a later stage reads everything the one before wrote
                ends = {
                    name: end
                    for spec in stage.source.inputs
                    for name, end in committed_ends(conf, spec.topic, reader).items()
                }
                if not ends:
                    continue
            tasks = None
            if stage.config.continuous:  # its task reports where it read to, not Spark
                tasks = stack.enter_context(closing(TaskReports(stage.config.leases)))
                output = replace(stage.output, metrics_address=tasks.address)
                stage = replace(stage, output=output)
            query = start_query(spark, stage)
            plugin = stage.operator.plugin
            of = f" of plugin {plugin}" if plugin != pipe.joiner else ""  # as daemon run says it
            joiner = f"joiner {pipe.joiner}{of}"
            consumed = tasks.consumed if tasks is not None else spark_progress(query)
            try:
                batches += _await_consumed(
                    query, ends, consumed, progress, timeout_s, (pipe.name, joiner)
                )
            finally:
                query.stop()
        output_keys = plan.operator.output_keys or {}
        outputs = _read_topic(
            conf, reader, fresh.output.topic, plan.operator.output_codec, output_keys.get(None)
        )
        dead = _read_topic(conf, reader, fresh.dead_letters, None)
        extra = {
            name: _read_topic(conf, reader, topic, codec, output_keys.get(name))
            for name, (topic, codec) in (plan.operator.outputs or {}).items()
        }
    return ReplayResult(outputs, dead, len(records), batches, extra)


def _session_until_done(file: PipelineFile, stack: ExitStack) -> Any:
    """The process's Spark session; one that replay starts is stopped when it is done.

    Stopped before the embedded broker (``stack`` unwinds in reverse): Spark's Python
    workers keep Kafka clients between micro-batches, and with the broker gone they printed
    a "Connection refused" line each until the process ended, after ``daemon demo``'s
    results. A session that already ran (a test suite's, a notebook's) is left running.
    """
    # Spark: daemon.testing imports this module, and its run_joiner runs without Spark.
    from pyspark import SparkContext

    # The context, not SparkSession.getActiveSession(): that one is per thread.
    running = SparkContext._active_spark_context is not None
    spark = spark_session(file.spark)
    if not running:
        stack.callback(spark.stop)
    return spark


def _join_keys(plan: Any, keys: dict[str, KafkaKeyCodec], records: list[ReplayRecord]) -> list[str]:
    """Every join key the records route to, in first-seen order (for end-of-input markers).

    Each record is routed as the source will route it, by its value and its Kafka key in the
    input's key format, so a marker's key is the join key's text the source finds.
    """
    found: dict[str, None] = {}
    for spec in plan.source.inputs:
        for record in records:
            if record.role != spec.role:
                continue
            routing = spec.route_decoded(
                record.value, keys[spec.role].encode_value(record.key), record.timestamp
            )
            if routing.error is None and routing.key is not None:
                found[routing.key] = None
    return list(found)


def _fresh_pipeline(
    pipe: PipelineConfig, checkpoint: Path, max_batch: int | None
) -> PipelineConfig:
    # Fresh topics, but the registry subjects of the topics they stand for.
    suffix = uuid.uuid4().hex[:8]
    inputs = {
        role: spec.model_copy(
            update={"topic": f"{spec.topic}.replay-{suffix}", **pinned_subjects(spec)}
        )
        for role, spec in pipe.inputs.items()
    }
    output = pipe.output.model_copy(
        update={"topic": f"{pipe.output.topic}.replay-{suffix}", **pinned_subjects(pipe.output)}
    )
    outputs = {
        name: spec.model_copy(
            update={"topic": f"{spec.topic}.replay-{suffix}", **pinned_subjects(spec)}
        )
        for name, spec in pipe.outputs.items()
    }
    update: dict[str, Any] = {
        "inputs": inputs,
        "output": output,
        "outputs": outputs,
        "dead_letter_topic": f"{pipe.dead_letters}.replay-{suffix}",
        "checkpoint": checkpoint,
        "name": f"{pipe.name}.replay-{suffix}",
    }
    if max_batch is not None:
        update["max_records_per_batch"] = max_batch
    return pipe.model_copy(update=update)


def _produce(
    conf: dict[str, str],
    plan: Any,
    codecs: dict[str, AvroCodec],
    keys: dict[str, KafkaKeyCodec],
    records: list[ReplayRecord],
    join_keys: list[str],
) -> dict[str, int]:
    """Produce the records, then an end-of-input marker per join key; return partition ends.

    A marker's Kafka key is the join key's text as UTF-8, whatever the input's key format
    (a composite key's JSON array): the source reads markers so (docs/semantics.md, Time).
    """
    pipe: PipelineConfig = plan.config

    producer = connect.producer(conf, {"linger.ms": 5, "partitioner": "murmur2_random"})
    deliveries = Deliveries()
    for record in records:
        value = None if record.value is None else codecs[record.role].encode(record.value)
        produce(
            producer,
            pipe.inputs[record.role].topic,
            value=value,
            key=keys[record.role].encode_value(record.key),
            timestamp=record.timestamp,
            headers=list(record.headers or ()) or None,
            on_delivery=deliveries,
        )
        producer.poll(0)
    # Markers go last, with the newest timestamp: the source admits a marker after every
    # record of its timestamp, so each key's end of input comes after all of its records,
    # however the micro-batches fall (daemon.source.admission.admit_earliest).
    marker_time = max((record.timestamp for record in records), default=1)
    # Not on an input that bootstraps: its records, read first, would end every key at once.
    marker_topic = next(
        (spec.topic for spec in plan.source.inputs if not spec.bootstrap),
        plan.source.inputs[0].topic,
    )
    for key in join_keys:
        produce(
            producer,
            marker_topic,
            value=None,
            key=key.encode("utf-8"),
            timestamp=marker_time,
            headers=END_OF_INPUT_HEADERS,
            on_delivery=deliveries,
        )
        producer.poll(0)
    producer.flush(30)
    if deliveries.failures:
        raise EnrichdError(f"could not produce replay input: {deliveries.failures[0]}")
    return deliveries.ends


_READER = {
    "group.id": reader_group(),  # required by the client; never joined or committed
    "enable.auto.commit": False,
    "isolation.level": "read_committed",
    # A fetch of an empty partition (the dead letters, most often) waited the broker's
    # default 500 ms for records that do not come: half a second per replay and topic.
    "fetch.wait.max.ms": 10,
}
"""Settings of replay's consumers, which read committed records by partition."""


def committed_ends(
    conf: dict[str, str], topic: str, reader: dict[str, Any] | None = None
) -> dict[str, int]:
    """Past each partition's last committed record (``"topic/partition"`` -> offset).

    Read rather than asked for: some brokers' ListOffsets under-report the end (planning.py).
    ``reader``: the reading consumer's own settings (its group id: ``[kafka] id_prefix``).
    """
    # Late: confluent_kafka loads with the first client, so daemon.testing's run_joiner does
    # without it.
    from confluent_kafka import TopicPartition

    consumer = connect.consumer(conf, reader or _READER)
    ends: dict[str, int] = {}
    try:
        for partition in consumer.list_topics(topic, timeout=10).topics[topic].partitions:
            for records in read_partition(consumer, TopicPartition(topic, partition, 0)):
                ends[partition_name(topic, partition)] = (records[-1].offset() or 0) + 1
    finally:
        consumer.close()
    return ends


def consumed_to(query: Any, ends: dict[str, int]) -> bool:
    """Whether the query's last micro-batch ended at or past ``ends`` (``"topic/partition"``)."""
    last = query.lastProgress
    return last is not None and reached(last, ends)


def _await_consumed(
    query: Any,
    ends: dict[str, int],
    consumed: Consumed,
    progress: Progress | None,
    timeout_s: float,
    names: tuple[str, str],
) -> int:
    """Wait until ``query`` has read its fresh topics to ``ends``; its batches that read any.

    ``consumed`` tells how far it has read; ``names``: the pipeline's name and its joiner's,
    for the line that says it failed.

    Raises:
        PipelineFailedError: the query failed; the one line names the pipeline, its joiner
            and the error.
    """
    deadline = time.monotonic() + timeout_s
    total = sum(ends.values())  # the topics are fresh: offsets count from 0
    while True:
        if query.exception() is not None:
            text = str(query.exception())
            pipeline, joiner = names
            raise PipelineFailedError(
                f"pipeline {pipeline} ({joiner}) failed: {failure_reason(text)}",
                task_traceback(text),
            )
        at, batches = consumed()
        read = sum(min(at.get(name, 0), stop) for name, stop in ends.items())
        if progress is not None:
            progress(read, total)
        if read >= total:
            return batches
        if time.monotonic() > deadline:
            raise EnrichdError(f"the pipeline read {read} of {total} records in {timeout_s:.0f}s")
        time.sleep(0.1)


def _read_topic(
    conf: dict[str, str],
    reader: dict[str, Any],
    topic: str,
    codec: AvroCodec | None,
    keys: KafkaKeyCodec | None = None,
) -> list[dict[str, Any]]:
    """Every committed record of ``topic``, partition by partition, as JSON-ready dicts.

    Values are decoded with ``codec`` (None: their bytes in hex), keys with ``keys`` (None:
    as text).
    """
    # Late: confluent_kafka loads with the first client, so daemon.testing's run_joiner does
    # without it.
    from confluent_kafka import TopicPartition

    consumer = connect.consumer(conf, reader)
    results: list[dict[str, Any]] = []
    try:
        metadata = consumer.list_topics(topic, timeout=10).topics[topic]
        for partition in sorted(metadata.partitions):
            for records in read_partition(consumer, TopicPartition(topic, partition, 0)):
                results.extend(_as_json(message, codec, keys) for message in records)
    finally:
        consumer.close()
    return results


def _as_json(message: Any, codec: AvroCodec | None, keys: KafkaKeyCodec | None) -> dict[str, Any]:
    key = message.key()
    value = message.value()
    if key is not None:
        key = key.decode("utf-8", "replace") if keys is None else keys.to_json(key)
    record: dict[str, Any] = {
        "key": key,
        "timestamp": message.timestamp()[1],
        "headers": {
            name: (raw or b"").decode("utf-8", "replace") for name, raw in message.headers() or []
        },
    }
    if codec is None:
        record["value"] = None if value is None else value.hex()
    else:
        record["value"] = None if value is None else codec.decode(value)
    return record
