"""What the Kafka sink's tasks count for the metrics: records per topic, dead letters per
reason, the joiner's own counts (rows that are not produced), and what commit() relays."""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

import pyarrow as pa

from daemon.kafka.records import SINK_ARROW
from daemon.kafka.sink import KafkaStreamWriter, SinkSpec, Written, _produce
from daemon.metrics_relay import JOINER_COUNTS_TOPIC


class RecordingProducer:
    """Takes what the sink produces; delivers nothing (no delivery callbacks, no failures)."""

    def __init__(self) -> None:
        self.produced: list[tuple[str, bytes | None]] = []
        self.headers: list[list[tuple[str, bytes]]] = []

    def produce(self, topic: str, **record: Any) -> None:
        self.produced.append((topic, record["value"]))
        self.headers.append(record["headers"])

    def poll(self, timeout: float) -> int:
        return 0

    def flush(self, timeout: float | None = None) -> int:
        return 0


def rows(*items: tuple[str, bytes | None, str | None]) -> pa.RecordBatch:
    """Sink rows: topic, value and error class; each came from offset 7 of tweets/0."""
    return pa.RecordBatch.from_pydict(
        {
            "topic": [topic for topic, _, _ in items],
            "key": [b"k" for _ in items],
            "value": [value for _, value, _ in items],
            "timestamp": [None for _ in items],
            "source_topic": ["tweets" for _ in items],
            "source_partition": [0 for _ in items],
            "source_offset": [7 for _ in items],
            "error_class": [kind for _, _, kind in items],
            "error_message": [kind and f"{kind}: why" for _, _, kind in items],
        },
        schema=SINK_ARROW,
    )


def test_records_dead_letters_and_joiner_counts_are_tallied_and_counts_not_produced() -> None:
    producer = RecordingProducer()
    kinds: dict[str, int] = {}
    joiner: dict[str, int] = {}
    batch = rows(
        ("views", b"v1", None),
        ("views", b"v2", None),
        ("views.dlq", b"x", "LateRecord"),
        (JOINER_COUNTS_TOPIC, json.dumps({"matched": 2, "unmatched": 1}).encode(), None),
        (JOINER_COUNTS_TOPIC, json.dumps({"matched": 1}).encode(), None),
    )
    counts = _produce(producer, iter([batch]), kinds, joiner)
    assert counts == {"views": 2, "views.dlq": 1}
    assert kinds == {"LateRecord": 1}
    assert joiner == {"matched": 3, "unmatched": 1}
    assert [topic for topic, _ in producer.produced] == ["views", "views", "views.dlq"]


def test_provenance_and_error_columns_become_the_records_headers() -> None:
    producer = RecordingProducer()
    _produce(producer, iter([rows(("views", b"v1", None), ("views.dlq", b"x", "LateRecord"))]))
    provenance = [
        ("enrichd.source.topic", b"tweets"),
        ("enrichd.source.partition", b"0"),
        ("enrichd.source.offset", b"7"),
    ]
    assert producer.headers == [
        provenance,
        [
            *provenance,
            ("enrichd.error.class", b"LateRecord"),
            ("enrichd.error.message", b"LateRecord: why"),
        ],
    ]


def test_commit_relays_the_batch_totals_of_every_task(tmp_path: Path) -> None:
    daemon_end = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    address = str(tmp_path / "metrics.sock")
    daemon_end.bind(address)
    daemon_end.settimeout(5)
    spec = SinkSpec("views", {}, "exactly_once", "views", metrics_address=address)
    writer = KafkaStreamWriter(spec)
    writer.commit(
        [
            Written(
                0, 7, {"views": 3}, dead_letters={"LateRecord": 1}, joiner_counts={"matched": 3}
            ),
            Written(1, 7, {}, skipped=True),  # a replay whose output had landed: adds nothing
            Written(2, 7, {"views": 2, "views.dlq": 1}, joiner_counts={"matched": 1}),
            None,
        ],
        7,
    )
    assert json.loads(daemon_end.recv(65536)) == {
        "pipeline": "views",
        "batch": 7,
        "records": {"views": 5, "views.dlq": 1},
        "dead_letters": {"LateRecord": 1},
        "joiner": {"matched": 4},
    }
    daemon_end.close()


def test_commit_without_a_daemon_listening_does_not_fail(tmp_path: Path) -> None:
    spec = SinkSpec("views", {}, "exactly_once", "views", metrics_address=str(tmp_path / "gone"))
    KafkaStreamWriter(spec).commit([Written(0, 1, {"views": 1})], 1)
