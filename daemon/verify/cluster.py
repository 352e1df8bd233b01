"""``daemon verify`` on the cluster: its topics made, transactions tried, the workload written.

Each step that the cluster refuses is one line naming the ACL it lacks
(:mod:`~daemon.verify.acl`), before any Spark starts.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from daemon.errors import EnrichdError, KafkaUnavailableError
from daemon.formats.avro.codec import AvroCodec, load_schema_file
from daemon.kafka import connect
from daemon.kafka.admin import create_topics, existing_topics
from daemon.kafka.clients import produce
from daemon.model.wire import END_OF_INPUT_HEADERS, partition_name
from daemon.replay import key_bytes
from daemon.signals import StopRequest
from daemon.verify.acl import acl_line, code_in_text, refusal
from daemon.verify.kills import check_stop
from daemon.verify.plan import VerifiedPipeline, VerifyOptions, join_keys


def make_topics(
    conf: dict[str, str],
    pipelines: list[VerifiedPipeline],
    options: VerifyOptions,
    base: str,
    created: list[str],
) -> None:
    """Create every pipeline's topics; add to ``created`` each that exists afterwards."""
    topics = [topic for pipe in pipelines for topic in pipe.topics()]
    try:
        create_topics(conf, dict.fromkeys(topics, options.partitions), options.replication)
    except KafkaUnavailableError as exc:
        line = refusal(exc.__cause__ or exc, f"create topics under {base}", options.prefix)
        raise EnrichdError(line or str(exc)) from None
    finally:  # the ones that exist now are verify's to delete, even after a refusal
        present = existing_topics(conf)
        created.extend(topic for topic in topics if topic in present)


def probe_transactions(conf: dict[str, str], base: str, prefix: str, topic: str) -> None:
    """Begin and abort a transaction with a batch-marker group, as the child's tasks will.

    A missing ACL on transactional ids or groups then is one line before any Spark starts.
    """
    # Late: confluent_kafka loads with the first client (daemon.model.constants says why).
    from confluent_kafka import KafkaException, TopicPartition

    name = f"enrichd.{base}.probe"
    producer = connect.producer(conf, {"transactional.id": name})
    consumer = connect.consumer(conf, {"group.id": name})
    try:
        producer.init_transactions(30)
        producer.begin_transaction()
        producer.send_offsets_to_transaction(
            [TopicPartition(topic, 0, 0)], consumer.consumer_group_metadata(), 30
        )
        producer.abort_transaction(30)
    except KafkaException as exc:
        line = refusal(exc, "use transactions and batch-marker groups", prefix)
        raise EnrichdError(line or f"transactions do not work on this cluster: {exc}") from None
    finally:
        consumer.close()


class WorkloadFeed:
    """Every workload in arrival order, in parts, then an end-of-input marker per join key.

    The first part goes before the child run starts, the others while it runs
    (:func:`daemon.verify.kills.run_with_kills`), so that the run reads input that arrives
    while it goes on, across its restarts, as in production; the markers go with the last
    part. Each part is flushed before :meth:`next_part` returns: the pipelines' ``ends`` and
    ``items`` then say where every record produced so far landed, and the answer, which
    depends only on the records and their order, stays exact.
    """

    def __init__(
        self, conf: dict[str, str], pipelines: list[VerifiedPipeline], prefix: str, parts: int
    ) -> None:
        self.pipelines, self.prefix, self.parts = pipelines, prefix, parts
        self.producer = connect.producer(
            conf, {"linger.ms": 5, "enable.idempotence": True, "partitioner": "murmur2_random"}
        )
        self.done = 0
        """Parts produced so far."""
        self.failures: list[str] = []
        self.codecs = [
            {
                role: AvroCodec(load_schema_file(spec.schema_file))
                for role, spec in pipe.config.inputs.items()
                if spec.schema_file is not None
            }
            for pipe in pipelines
        ]
        self.keys = [join_keys(pipe) for pipe in pipelines]

    @property
    def total(self) -> int:
        """Records every part together holds: the workloads' and a marker per join key."""
        return sum(
            len(pipe.work.items) + len(keys)
            for pipe, (_, keys) in zip(self.pipelines, self.keys, strict=True)
        )

    @property
    def finished(self) -> bool:
        """Whether every part was produced."""
        return self.done >= self.parts

    def next_part(self, stop: StopRequest) -> None:
        """Produce the next part (nothing once :attr:`finished`), and wait for its delivery."""
        if self.finished:
            return
        part, self.done = self.done, self.done + 1
        for pipe, codecs, (marker_topic, keys) in zip(
            self.pipelines, self.codecs, self.keys, strict=True
        ):
            check_stop(stop, f"{pipe.joiner}'s workload was produced")
            items = pipe.work.items
            first, end = len(items) * part // self.parts, len(items) * (part + 1) // self.parts
            for index in range(first, end):
                item = items[index]
                value = item.poison
                if value is None and item.value is not None:
                    value = codecs[item.role].encode(item.value)
                produce(
                    self.producer,
                    pipe.config.inputs[item.role].topic,
                    value=value,
                    key=key_bytes(item.key),
                    timestamp=item.timestamp,
                    on_delivery=self._delivered(pipe, index),
                )
                self.producer.poll(0)
            if not self.finished:
                continue
            last = max((item.timestamp for item in items), default=1)
            for key in keys:
                produce(
                    self.producer,
                    marker_topic,
                    value=None,
                    key=key.encode("utf-8"),
                    timestamp=last,
                    headers=END_OF_INPUT_HEADERS,
                    on_delivery=self._delivered(pipe, None),
                )
                self.producer.poll(0)
        self.producer.flush(60)
        if self.failures:
            failure = self.failures[0]
            line = acl_line(code_in_text(failure) or 0, "write to its topics", self.prefix)
            raise EnrichdError(line or f"could not produce the workload: {failure}")

    def _delivered(self, pipe: VerifiedPipeline, index: int | None) -> Callable[[Any, Any], None]:
        def report(err: Any, msg: Any) -> None:
            if err is not None:
                self.failures.append(str(err))
                return
            where = (msg.topic(), msg.partition(), msg.offset())
            name = partition_name(where[0], where[1])
            pipe.ends[name] = max(pipe.ends.get(name, 0), where[2] + 1)
            if index is not None:
                pipe.items[where] = index

        return report
