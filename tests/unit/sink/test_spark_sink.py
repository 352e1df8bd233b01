"""What a micro-batch's counts rows add up to: in the Kafka sink's tasks (records per topic,
dead letters per reason, the operator's counts rows, which are not produced) and what its
commit() relays, or on the driver through ``foreachBatch`` (:class:`BatchCounter`)."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from daemon.checkpoint import due_times
from daemon.checkpoint.due_times import NO_BATCH, DueTimes
from daemon.model.headers import pack
from daemon.model.wire import COUNTS_TOPIC, OUTPUT
from daemon.sink import task_producer
from daemon.sink.spark_sink import (
    BatchCounter,
    KafkaStreamWriter,
    Written,
    keep_due_times,
    write_rows,
)
from daemon.sink.spec import OutputSpec
from daemon.sink.task_output import TaskOutput


class RecordingProducer:
    """Takes what is produced; delivers nothing (no delivery callbacks, no failures)."""

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


@pytest.fixture(autouse=True)
def _forget_kept_producers() -> Iterator[None]:
    yield
    task_producer.forget_kept_clients()


def recording_output() -> tuple[TaskOutput, RecordingProducer]:
    """An at-least-once task output whose producer records what it is given."""
    spec = OutputSpec("views", {}, "at_least_once", "views")
    producer = RecordingProducer()
    task_producer._PRODUCERS["idempotent.enrichd.views"] = producer
    return TaskOutput(spec, 3, 7, "query"), producer


def rows(
    *items: tuple[str, bytes | None, str | None], carried: bytes | None = None
) -> pa.RecordBatch:
    """Sink rows: topic, value and error class; each came from offset 7 of tweets/0.

    ``carried``: each row's packed input headers.
    """
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
            "headers": [carried for _ in items],
        },
        schema=OUTPUT.arrow,
    )


def counts(records: dict[str, int], dead_letters: dict[str, int], joiner: dict[str, int]) -> bytes:
    """The value of an operator's counts row."""
    return json.dumps({"records": records, "dead_letters": dead_letters, "joiner": joiner}).encode()


def test_records_dead_letters_and_counts_rows_are_tallied_and_counts_not_produced() -> None:
    output, producer = recording_output()
    batch = rows(
        ("views", b"v1", None),
        ("views", b"v2", None),
        ("views.dlq", b"x", "LateRecord"),
        (COUNTS_TOPIC, counts({"views": 4}, {}, {"matched": 2, "unmatched": 1}), None),
        (COUNTS_TOPIC, counts({"views.dlq": 1}, {"MissingId": 1}, {"matched": 1}), None),
    )
    written = write_rows(output, iter([batch]))
    assert written.records == {"views": 6, "views.dlq": 2}
    assert written.dead_letters == {"LateRecord": 1, "MissingId": 1}
    assert written.joiner_counts == {"matched": 3, "unmatched": 1}
    assert (written.partition, written.batch_id, written.skipped) == (3, 7, False)
    assert [topic for topic, _ in producer.produced] == ["views", "views", "views.dlq"]


def test_a_task_with_only_counts_rows_opens_no_transaction() -> None:
    """The operator wrote and committed the records; the sink must not touch its id."""
    output, producer = recording_output()
    batch = rows((COUNTS_TOPIC, counts({"views": 2}, {}, {}), None))
    assert write_rows(output, iter([batch])).records == {"views": 2}
    assert not output.opened
    assert producer.produced == []


def test_provenance_and_error_columns_become_the_records_headers() -> None:
    output, producer = recording_output()
    write_rows(output, iter([rows(("views", b"v1", None), ("views.dlq", b"x", "LateRecord"))]))
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


def test_the_headers_a_row_carries_come_before_enrichds_own() -> None:
    output, producer = recording_output()
    carried = [("traceparent", b"00-ab-cd-01"), ("flag", None)]
    write_rows(output, iter([rows(("views", b"v1", None), carried=pack(carried))]))
    (headers,) = producer.headers
    assert headers[:2] == carried
    assert [name for name, _ in headers[2:]] == [
        "enrichd.source.topic",
        "enrichd.source.partition",
        "enrichd.source.offset",
    ]


def daemon_listening(tmp_path: Path) -> tuple[socket.socket, OutputSpec]:
    """The daemon's end of the metrics socket, and an output spec that sends to it."""
    daemon_end = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    address = str(tmp_path / "metrics.sock")
    daemon_end.bind(address)
    daemon_end.settimeout(5)
    return daemon_end, OutputSpec("views", {}, "exactly_once", "views", metrics_address=address)


def test_commit_relays_the_batch_totals_of_every_task(tmp_path: Path) -> None:
    daemon_end, spec = daemon_listening(tmp_path)
    writer = KafkaStreamWriter(spec)
    writer.commit(
        [
            Written(
                0,
                7,
                {"views": 3},
                dead_letters={"LateRecord": 1},
                joiner_counts={"matched": 3},
                failed_calls=2,
                failures=["a", "b"],
            ),
            # A replay whose output had landed: adds nothing but that it replayed.
            Written(1, 7, {}, skipped=True, replayed=1),
            Written(
                2,
                7,
                {"views": 2, "views.dlq": 1},
                joiner_counts={"matched": 1},
                failed_calls=2,
                failures=["c", "d"],
            ),
            None,
        ],
        7,
    )
    assert json.loads(daemon_end.recv(65536)) == {
        "kind": "batch-counts",
        "pipeline": "views",
        "batch": 7,
        "records": {"views": 5, "views.dlq": 1},
        "dead_letters": {"LateRecord": 1},
        "joiner": {"matched": 4},
        "latency": {},
        "event_time": {},
        "state_cache": {},
        "failed_calls": 4,
        "failures": ["a", "b", "c"],  # the first few: the count has them all
        "replayed": 1,
    }
    daemon_end.close()


def test_the_stamps_of_counts_rows_become_a_latency_tally_at_the_end_of_the_task(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Tallied against the time the task has read every row: just after the operator's
    commit. Two records of 0.4 s ago and one of 3 s ago, from two operator calls."""
    from daemon.model import latency

    monkeypatch.setattr("time.time_ns", lambda: 10_000 * 1_000_000)
    output, _ = recording_output()
    first = {"records": {"views": 2}, "stamps": {"views": latency.compact([9_600, 9_600])}}
    second = {"records": {"views": 1}, "stamps": {"views": latency.compact([7_000])}}
    second["event_time"] = {"many": 9_000}
    first["event_time"] = {"many": 9_500, "one": 100}
    batch = rows(
        (COUNTS_TOPIC, json.dumps(first).encode(), None),
        (COUNTS_TOPIC, json.dumps(second).encode(), None),
    )
    written = write_rows(output, iter([batch]))
    counts, total = written.tallies["views"]
    bounds = list(latency.LATENCY_BUCKETS)
    assert counts[bounds.index(0.5)] == 2 and counts[bounds.index(5.0)] == 1 and sum(counts) == 3
    assert total == pytest.approx(0.4 + 0.4 + 3.0)
    assert written.event_time == {"many": 9_500, "one": 100}


def test_the_counts_rows_failures_add_up_per_task() -> None:
    output, _ = recording_output()
    calls = [
        {"failed_calls": 3, "failures": ["a", "b", "c"]},
        {"failed_calls": 1, "failures": ["d"]},
    ]
    batch = rows(*((COUNTS_TOPIC, json.dumps(call).encode(), None) for call in calls))
    written = write_rows(output, iter([batch]))
    assert (written.failed_calls, written.failures) == (4, ["a", "b", "c"])


def test_the_operator_tasks_that_replayed_a_committed_batch_add_up() -> None:
    output, _ = recording_output()
    calls = [{"replayed": 1}, {"timers": {"3": None}}, {"replayed": 1}]
    batch = rows(*((COUNTS_TOPIC, json.dumps(call).encode(), None) for call in calls))
    assert write_rows(output, iter([batch])).replayed == 2


def test_commit_adds_up_the_tasks_latency_tallies(tmp_path: Path) -> None:
    daemon_end, spec = daemon_listening(tmp_path)
    zeros = [0] * 13
    one = [1 if i == 3 else 0 for i in range(13)]
    KafkaStreamWriter(spec).commit(
        [
            Written(0, 2, {"views": 1}, tallies={"views": (one, 0.7)}, event_time={"one": 5}),
            Written(1, 2, {"views": 1}, tallies={"views": (one, 0.9)}, event_time={"one": 9}),
            Written(2, 2, {}, tallies={"totals": (zeros, 0.0)}),
        ],
        2,
    )
    message = json.loads(daemon_end.recv(65536))
    assert message["latency"] == {"views": [[2 * n for n in one], 1.6], "totals": [zeros, 0.0]}
    assert message["event_time"] == {"one": 9}
    daemon_end.close()


def test_commit_without_a_daemon_listening_does_not_fail(tmp_path: Path) -> None:
    spec = OutputSpec("views", {}, "exactly_once", "views", metrics_address=str(tmp_path / "gone"))
    KafkaStreamWriter(spec).commit([Written(0, 1, {"views": 1})], 1)


def test_a_tasks_counts_rows_hand_on_each_buckets_last_reported_timer() -> None:
    output, _ = recording_output()
    batch = rows(
        (COUNTS_TOPIC, json.dumps({"timers": {"3": 1_000, "4": 2_000}}).encode(), None),
        (COUNTS_TOPIC, json.dumps({"timers": {"3": None}}).encode(), None),  # its timer fired
    )
    assert write_rows(output, iter([batch])).timers == {3: None, 4: 2_000}


def test_commit_merges_the_tasks_timers_into_the_checkpoints_map(tmp_path: Path) -> None:
    due_times.write(tmp_path, DueTimes(4, {1: 500, 3: 900}))
    spec = OutputSpec("views", {}, "exactly_once", "views", checkpoint=str(tmp_path))
    messages: list[Any] = [
        Written(0, 5, {}, skipped=True, timers={1: None, 2: 700}),  # a replay reports them too
        Written(1, 5, {}, timers={3: 1_200}),
        None,
    ]
    KafkaStreamWriter(spec).commit(messages, 5)
    assert due_times.read(tmp_path) == DueTimes(5, {2: 700, 3: 1_200})


def test_commit_leaves_a_map_it_cannot_carry_on_as_it_was(tmp_path: Path) -> None:
    """No map (an older enrichd's checkpoint) stays none; one behind the batch stays behind,
    which the planner does not trust: both make the clock tick every period."""
    keep_due_times(str(tmp_path), [Written(0, 3, {}, timers={1: 5})], 3)
    assert due_times.read(tmp_path) is None
    due_times.write(tmp_path, DueTimes(NO_BATCH, {}))
    keep_due_times(str(tmp_path), [Written(0, 3, {}, timers={1: 5})], 3)
    assert due_times.read(tmp_path) == DueTimes(NO_BATCH, {})


def test_commit_does_not_fail_when_the_map_cannot_be_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    due_times.write(tmp_path, DueTimes(0, {}))

    def disk_full(checkpoint: Any, due: DueTimes) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(due_times, "write", disk_full)
    keep_due_times(str(tmp_path), [Written(0, 1, {}, timers={1: 5})], 1)
    assert due_times.read(tmp_path) == DueTimes(0, {})  # behind batch 1: not trusted


class CollectedFrame:
    """A micro-batch's frame as ``foreachBatch`` hands it over: rows of topic and value."""

    def __init__(self, *rows: tuple[str, bytes]) -> None:
        self.rows = list(rows)
        self.selected: tuple[str, ...] = ()

    def select(self, *columns: str) -> CollectedFrame:
        self.selected = columns
        return self

    def collect(self) -> list[tuple[str, bytes]]:
        return self.rows


def test_a_batch_counted_on_the_driver_keeps_its_timers_then_reports_its_totals(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """foreachBatch's counting does what the sink's tasks and commit() did together: the
    timers into the due-time map, then one report of the batch's totals and latencies."""
    from daemon.model import latency

    monkeypatch.setattr("time.time_ns", lambda: 10_000 * 1_000_000)
    daemon_end, spec = daemon_listening(tmp_path)
    checkpoint = tmp_path / "checkpoint"
    checkpoint.mkdir()
    due_times.write(checkpoint, DueTimes(4, {1: 500}))
    spec = OutputSpec(
        "views",
        {},
        "exactly_once",
        "views",
        metrics_address=spec.metrics_address,
        checkpoint=str(checkpoint),
    )
    first = {
        "records": {"views": 2},
        "joiner": {"matched": 2},
        "stamps": {"views": latency.compact([9_600, 9_600])},
        "timers": {"1": None, "2": 700},
    }
    first["cache"] = {"hit": 3, "miss": 1}
    second = {"records": {"views.dlq": 1}, "dead_letters": {"LateRecord": 1}, "timers": {"2": 800}}
    second["cache"] = {"hit": 2}
    frame = CollectedFrame(
        (COUNTS_TOPIC, json.dumps(first).encode()), (COUNTS_TOPIC, json.dumps(second).encode())
    )
    BatchCounter(spec)(frame, 5)  # type: ignore[arg-type]
    assert frame.selected == ("topic", "value")
    assert due_times.read(checkpoint) == DueTimes(5, {2: 800})
    message = json.loads(daemon_end.recv(65536))
    assert {k: message[k] for k in ("batch", "records", "dead_letters", "joiner")} == {
        "batch": 5,
        "records": {"views": 2, "views.dlq": 1},
        "dead_letters": {"LateRecord": 1},
        "joiner": {"matched": 2},
    }
    assert message["state_cache"] == {"hit": 5, "miss": 1}
    counts, total = message["latency"]["views"]
    assert sum(counts) == 2 and total == pytest.approx(0.8)
    daemon_end.close()


def test_a_record_reaching_the_driver_fails_the_batch_rather_than_being_dropped() -> None:
    """The operator writes its records itself: one handed on instead would be lost unwritten."""
    spec = OutputSpec("views", {}, "exactly_once", "views")
    with pytest.raises(RuntimeError, match="handed on a record for 'views'"):
        BatchCounter(spec)(CollectedFrame(("views", b"v1")), 1)  # type: ignore[arg-type]
