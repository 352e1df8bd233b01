"""``read_partition``'s stall error says where the read stopped and what the client said;
an error that waiting does not mend ends the read at once, with one line.

A fake consumer stands in for the client: this pins the messages and the sorting of errors,
not Kafka's behaviour (the real path is read by every test that reads an output topic, and
tests/delivery/test_kafka_source.py meets a refused and a corrupt partition through a proxy).
"""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import KafkaError, TopicPartition

from daemon.errors import KafkaReadError
from daemon.kafka.clients import OffsetNotAvailableError, read_partition


class _Message:
    def __init__(self, error: KafkaError) -> None:
        self._error = error

    def error(self) -> KafkaError:
        return self._error

    def offset(self) -> int:
        return -1


class _StuckConsumer:
    """Holds the position at 50 below a high watermark of 53, as an open transaction would."""

    def assign(self, partitions: list[Any]) -> None:
        pass

    def get_watermark_offsets(self, tp: Any, cached: bool = False) -> tuple[int, int]:
        return 0, 53

    error = KafkaError(KafkaError.NOT_LEADER_FOR_PARTITION, "Broker: Not leader for partition")

    def consume(self, num_messages: int, timeout: float) -> list[_Message]:
        return [_Message(self.error)]

    def position(self, partitions: list[Any]) -> list[Any]:
        return [TopicPartition(partitions[0].topic, partitions[0].partition, 50)]


def test_a_stalled_read_names_its_end_and_the_clients_last_error() -> None:
    tp = TopicPartition("out", 0, 50)
    with pytest.raises(TimeoutError) as raised:
        list(read_partition(_StuckConsumer(), tp, stall_s=0.1))
    assert str(raised.value) == (
        "out/0: no progress past offset 50 in 0.1 s, short of offset 53; "
        "last client error: Broker: Not leader for partition"
    )


def test_an_offset_the_broker_no_longer_has_ends_the_read_at_once() -> None:
    """With ``auto.offset.reset = error`` the client says so instead of jumping elsewhere."""

    class Gone(_StuckConsumer):
        def consume(self, num_messages: int, timeout: float) -> list[Any]:
            error = KafkaError(KafkaError._AUTO_OFFSET_RESET, "offset 50 is out of range")
            return [type("M", (), {"error": lambda self: error, "offset": lambda self: -1})()]

    with pytest.raises(OffsetNotAvailableError) as raised:
        list(read_partition(Gone(), TopicPartition("in", 3, 50), stall_s=60))
    gone = raised.value
    assert (gone.topic, gone.partition, gone.offset) == ("in", 3, 50)
    assert "offset 50 is out of range" in str(gone)


@pytest.mark.parametrize(
    "error",
    [
        KafkaError(KafkaError._TRANSPORT, "Connection refused"),
        KafkaError(KafkaError._ALL_BROKERS_DOWN, "1/1 brokers are down"),
        KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART, "Broker: Unknown topic or partition"),
        KafkaError(KafkaError.REQUEST_TIMED_OUT, "Broker: Request timed out", retriable=True),
    ],
)
def test_an_error_that_waiting_mends_is_waited_out_up_to_the_stall_bound(
    error: KafkaError,
) -> None:
    class Waiting(_StuckConsumer):
        pass

    Waiting.error = error
    with pytest.raises(TimeoutError, match=f"last client error: {error.str()}"):
        list(read_partition(Waiting(), TopicPartition("in", 0, 50), stall_s=0.1))


@pytest.mark.parametrize(
    ("error", "fix"),
    [
        (
            KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED, "Broker: Topic authorization failed"),
            "; allow the principal Read and Describe on the topic",
        ),
        (
            KafkaError(KafkaError._BAD_MSG, "MessageSet at offset 50 failed CRC32C check"),
            "; its record batch is corrupt, on the broker or on the way",
        ),
        (
            KafkaError(KafkaError._FATAL, "Fatal error", fatal=True),
            "; the Kafka client cannot go on",
        ),
    ],
)
def test_an_error_that_waiting_does_not_mend_ends_the_read_with_one_line(
    error: KafkaError, fix: str
) -> None:
    class Failing(_StuckConsumer):
        pass

    Failing.error = error
    with pytest.raises(KafkaReadError) as raised:
        list(read_partition(Failing(), TopicPartition("in", 3, 50), stall_s=60))
    line = str(raised.value)
    assert line.startswith(
        f"cannot read topic 'in' partition 3 at offset 50 ({error.name()}: {error.str()}){fix}"
    )
    assert "\n" not in line
