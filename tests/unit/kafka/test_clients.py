"""``read_partition``'s stall error says where the read stopped and what the client said.

A fake consumer stands in for the client: this pins the message, not Kafka's behaviour
(the real path is read by every test that reads an output topic).
"""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import TopicPartition

from daemon.kafka.clients import OffsetNotAvailableError, read_partition


class _Message:
    def __init__(self, error: str) -> None:
        self._error = error

    def error(self) -> str:
        return self._error

    def offset(self) -> int:
        return -1


class _StuckConsumer:
    """Holds the position at 50 below a high watermark of 53, as an open transaction would."""

    def assign(self, partitions: list[Any]) -> None:
        pass

    def get_watermark_offsets(self, tp: Any, cached: bool = False) -> tuple[int, int]:
        return 0, 53

    def consume(self, num_messages: int, timeout: float) -> list[_Message]:
        return [_Message("Broker: Not leader for partition")]

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
    from confluent_kafka import KafkaError

    class Gone(_StuckConsumer):
        def consume(self, num_messages: int, timeout: float) -> list[Any]:
            error = KafkaError(KafkaError._AUTO_OFFSET_RESET, "offset 50 is out of range")
            return [type("M", (), {"error": lambda self: error, "offset": lambda self: -1})()]

    with pytest.raises(OffsetNotAvailableError) as raised:
        list(read_partition(Gone(), TopicPartition("in", 3, 50), stall_s=60))
    gone = raised.value
    assert (gone.topic, gone.partition, gone.offset) == ("in", 3, 50)
    assert "offset 50 is out of range" in str(gone)
