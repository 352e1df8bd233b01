"""A record its topic or the Kafka client would refuse goes to the dead-letter topic, and the
task goes on.

The task knows the limits (:class:`~daemon.sink.spec.WriteLimits`, here the client's
``message.max.bytes``) and dead-letters a record over them when it is sent. The producer here
refuses as librdkafka does before a record joins the transaction, for what slips past that: a
record whose key, value and headers exceed ``message.max.bytes`` raises ``MSG_SIZE_TOO_LARGE``
from ``produce()`` (one test checks that against the real client).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer

from daemon.sink import task_producer
from daemon.sink.spec import OutputSpec, WriteLimits
from daemon.sink.task_output import (
    CUT_HEADER,
    NEAR_LIMIT_SLACK,
    OUTPUT_REJECTED,
    TaskOutput,
    refusal_of,
)

LIMIT = 200_000
BIG = LIMIT + 1
"""A value the producer refuses; well past the near-limit mark (LIMIT - NEAR_LIMIT_SLACK)."""


class RefusingProducer:
    """Takes records up to ``limit`` bytes of key, value and headers; refuses larger ones."""

    def __init__(self, limit: int, error: int = KafkaError.MSG_SIZE_TOO_LARGE) -> None:
        self.limit = limit
        self.error = error
        self.produced: list[tuple[str, bytes | None, bytes | None, dict[str, bytes]]] = []

    def produce(self, topic: str, **record: Any) -> None:
        key, value, headers = record["key"], record["value"], record["headers"]
        size = len(key or b"") + len(value or b"") + sum(len(n) + len(v) for n, v in headers)
        if size > self.limit:
            raise KafkaException(KafkaError(self.error))
        self.produced.append((topic, key, value, dict(headers)))

    def poll(self, timeout: float) -> int:
        return 0

    def flush(self, timeout: float | None = None) -> int:
        return 0


@pytest.fixture(autouse=True)
def _forget_kept_producers() -> Iterator[None]:
    yield
    task_producer.forget_kept_clients()


def refusing_output(
    producer: RefusingProducer, dead_letter_topic: str | None = "views.dlq"
) -> TaskOutput:
    """An at-least-once task output of pipeline ``views`` whose client is ``producer``."""
    conf = {"message.max.bytes": str(LIMIT)}
    spec = OutputSpec(
        "views",
        conf,
        "at_least_once",
        "views",
        dead_letter_topic=dead_letter_topic,
        limits=WriteLimits.sized(conf, None, []),
    )
    task_producer._PRODUCERS["idempotent.enrichd.views"] = producer
    return TaskOutput(spec, 0, 4, "query")


def view(value: bytes, offset: int) -> tuple[Any, ...]:
    """An output row of topic ``views`` made from offset ``offset`` of tweets/1."""
    return ("views", b"k%d" % offset, value, 1000 + offset, "tweets", 1, offset, None, None, None)


def test_a_refused_output_is_a_dead_letter_and_the_records_around_it_are_written() -> None:
    producer = RefusingProducer(LIMIT)
    output = refusing_output(producer)
    big = b"v" * BIG
    for row in (view(b"first", 1), view(big, 2), view(b"third", 3)):
        output.send_row(row)
    output.commit()
    # The cut dead letter goes out after the records (the order within each topic is kept).
    assert [(topic, key) for topic, key, _, _ in producer.produced] == [
        ("views", b"k1"),
        ("views", b"k3"),
        ("views.dlq", b"k2"),
    ]
    _, _, value, headers = producer.produced[2]
    assert headers["enrichd.source.topic"] == b"tweets"
    assert headers["enrichd.source.partition"] == b"1"
    assert headers["enrichd.source.offset"] == b"2"
    assert headers["enrichd.error.class"] == OUTPUT_REJECTED.encode()
    reason = headers["enrichd.error.message"].decode()
    assert reason.startswith("MSG_SIZE_TOO_LARGE: topic 'views' refused the record")
    assert reason.endswith(f"the client's message.max.bytes is {LIMIT})")
    # As large as the refused record, it is too large for the dead-letter topic too: cut.
    assert headers[CUT_HEADER] == str(BIG).encode()
    assert big.startswith(value) and 0 < len(value) < LIMIT
    assert output.records == {"views": 2, "views.dlq": 1}
    assert output.dead_letters == {OUTPUT_REJECTED: 1}


def test_a_refused_output_that_fits_the_dead_letter_topic_goes_there_whole() -> None:
    """A refusal that is not about size (a broker's invalid record) keeps the value whole."""

    class RefusesViews(RefusingProducer):
        def produce(self, topic: str, **record: Any) -> None:
            if topic == "views" and record["value"] == b"odd":
                raise KafkaException(KafkaError(KafkaError.INVALID_RECORD))
            super().produce(topic, **record)

    producer = RefusesViews(LIMIT)
    output = refusing_output(producer)
    output.send_row(view(b"odd", 5))
    output.commit()
    ((topic, _, value, headers),) = producer.produced
    assert (topic, value) == ("views.dlq", b"odd")
    assert CUT_HEADER not in headers
    assert headers["enrichd.error.message"].startswith(b"INVALID_RECORD: ")
    assert output.dead_letters == {OUTPUT_REJECTED: 1}


def test_a_dead_letter_too_large_for_its_topic_keeps_its_headers_and_the_start_of_its_value() -> (
    None
):
    producer = RefusingProducer(LIMIT)
    output = refusing_output(producer)
    original = bytes(range(256)) * (BIG // 256 + 1)
    output.send("views.dlq", b"7", original, 5, "tweets", 0, 9, "UndecodableRecord", "not Avro")
    output.commit()
    ((topic, key, value, headers),) = producer.produced
    assert (topic, key) == ("views.dlq", b"7")
    assert headers["enrichd.error.class"] == b"UndecodableRecord"
    assert headers["enrichd.error.message"] == b"not Avro"
    assert headers["enrichd.source.offset"] == b"9"
    assert headers[CUT_HEADER] == str(len(original)).encode()
    assert value is not None and original.startswith(value) and len(value) > LIMIT // 2
    assert output.dead_letters == {"UndecodableRecord": 1}


def test_records_are_held_back_until_the_commit_and_keep_their_order() -> None:
    """A value near the limit is measured whole, and goes out in its place if it fits."""
    producer = RefusingProducer(LIMIT)
    output = refusing_output(producer)
    near = b"n" * (LIMIT - NEAR_LIMIT_SLACK + 1)
    output.send_row(view(b"held", 1))
    output.send_row(view(near, 2))
    output.send_row(view(b"after", 3))
    assert producer.produced == []  # held back until the commit
    output.commit()
    assert [value for _, _, value, _ in producer.produced] == [b"held", near, b"after"]
    assert output.records == {"views": 3}


@pytest.mark.parametrize("error", [KafkaError._UNKNOWN_TOPIC, KafkaError._FATAL])
def test_an_error_that_is_not_about_the_record_fails_the_task(error: int) -> None:
    producer = RefusingProducer(0, error=error)
    output = refusing_output(producer)
    output.send_row(view(b"x", 1))
    with pytest.raises(KafkaException):
        output.commit()


def test_without_a_dead_letter_topic_a_refusal_fails_the_task() -> None:
    output = refusing_output(RefusingProducer(LIMIT), dead_letter_topic=None)
    with pytest.raises(RuntimeError, match="refuses a record made from .* no dead-letter topic"):
        output.send_row(view(b"v" * BIG, 1))


def test_the_real_client_refuses_an_oversize_record_when_it_is_produced() -> None:
    """librdkafka checks ``message.max.bytes`` in ``produce()`` (a mock cluster, in process)."""
    producer = Producer({"test.mock.num.brokers": 1, "message.max.bytes": LIMIT})
    with pytest.raises(KafkaException) as raised:
        producer.produce("views", value=b"v" * BIG)
    refusal = refusal_of(raised.value)
    assert refusal is not None and refusal.name() == "MSG_SIZE_TOO_LARGE"
    producer.produce("views", value=b"fits")  # the client goes on
    assert producer.flush(10) == 0
