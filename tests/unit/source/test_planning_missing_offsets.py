"""The planner checks each batch's start against what the broker still has, and does what
``on_missing_offsets`` says: the plan, the ranges read, and a batch Spark runs again."""

from __future__ import annotations

from typing import Any

import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable

from daemon.errors import MissingOffsetsError
from daemon.formats.avro.codec import AvroCodec, load_schema_file
from daemon.model.wire import RESETS, TOPIC_IDS, split_partition_name
from daemon.source import planning
from daemon.source.planning import KafkaRange, SourcePlanner
from daemon.source.spec import SourceInput, SourceSpec
from tests.kafka_helpers import SCHEMAS

EARLIEST = {"clicks/0": 100, "users/0": 0}
"""clicks/0 lost its records before 100; users/0 was created again and has 30."""
ENDS = {"clicks/0": 150, "users/0": 30}
START = {"clicks/0": 40, "users/0": 500}


def planner(policy: str, earliest: dict[str, int] | None = None) -> SourcePlanner:
    """A planner whose broker has :data:`EARLIEST` to :data:`ENDS` (no broker)."""
    spec = SourceSpec(
        inputs=(),
        client_conf={},
        max_records_per_batch=10_000,
        pipeline="p",
        on_missing_offsets=policy,
    )
    found = SourcePlanner(spec)
    lows = EARLIEST if earliest is None else earliest
    found._log_ends = lambda start: dict(ENDS)  # type: ignore[method-assign]
    found._earliest = lambda names: {n: lows[n] for n in names}  # type: ignore[method-assign]
    found._partitions = lambda: []  # type: ignore[method-assign]
    return found


def ranges(source: SourcePlanner, start: dict[str, int], end: dict[str, object]) -> set[KafkaRange]:
    return {r for task in source.partitions(start, end) for r in task.ranges}


def test_fail_raises_on_the_first_partition_that_lacks_its_offset() -> None:
    with pytest.raises(MissingOffsetsError) as raised:
        planner("fail").latest_offsets(START, ReadAllAvailable())
    assert "input topic 'clicks' partition 0 no longer has offset 40" in str(raised.value)
    assert "the earliest it has is 100" in str(raised.value)


def test_earliest_reads_from_the_earliest_offset_each_partition_has(
    caplog: pytest.LogCaptureFixture,
) -> None:
    source = planner("earliest")
    with caplog.at_level("WARNING", logger="enrichd.source"):
        end = source.latest_offsets(START, ReadAllAvailable())
    assert end == {"clicks/0": 150, "users/0": 30, RESETS: {"clicks/0": 100, "users/0": 0}}
    assert ranges(source, START, end) == {
        KafkaRange("clicks", 0, 100, 150),
        KafkaRange("users", 0, 0, 30),
    }
    assert len(caplog.records) == 2  # one WARN line per partition
    assert "60 offsets skipped" in caplog.records[0].getMessage()


def test_latest_reads_on_from_the_log_end() -> None:
    source = planner("latest")
    end = source.latest_offsets(START, ReadAllAvailable())
    assert end == {"clicks/0": 150, "users/0": 30, RESETS: {"clicks/0": 150, "users/0": 30}}
    assert ranges(source, START, end) == set()


def test_the_next_plan_carries_no_resets() -> None:
    source = planner("earliest")
    end = source.latest_offsets(START, ReadAllAvailable())
    assert RESETS not in source.latest_offsets(end, ReadAllAvailable())


def test_a_start_the_broker_has_plans_as_before() -> None:
    source = planner("fail")
    start = {"clicks/0": 120, "users/0": 10}
    end = source.latest_offsets(start, ReadAllAvailable())
    assert end == {"clicks/0": 150, "users/0": 30}
    assert ranges(source, start, end) == {
        KafkaRange("clicks", 0, 120, 150),
        KafkaRange("users", 0, 10, 30),
    }


def test_a_batch_planned_before_a_restart_is_checked_again() -> None:
    """Records removed after Spark logged the batch's plan: its ranges move by the policy."""
    start, end = {"clicks/0": 40, "users/0": 10}, {"clicks/0": 120, "users/0": 20}
    assert ranges(planner("earliest"), start, end) == {
        KafkaRange("clicks", 0, 100, 120),
        KafkaRange("users", 0, 10, 20),
    }
    assert ranges(planner("latest"), start, end) == {KafkaRange("users", 0, 10, 20)}
    with pytest.raises(MissingOffsetsError):
        planner("fail").partitions(start, end)


def test_a_batch_just_planned_is_not_checked_again() -> None:
    source = planner("earliest")
    end = source.latest_offsets(START, ReadAllAvailable())
    source._earliest = lambda names: {n: 10**9 for n in names}  # type: ignore[method-assign]
    assert KafkaRange("clicks", 0, 100, 150) in ranges(source, START, end)


def test_the_earliest_offset_is_the_log_start_fetches_report_else_asked_every_10_s(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """ListOffsets only while no Fetch answered: a round trip per partition and batch."""
    asked: list[str] = []

    class Probe:
        fetched = {"t/0": 7}  # the log start of a Fetch response; t/1 has none yet

        def get_watermark_offsets(
            self, tp: Any, timeout: float = 0, cached: bool = False
        ) -> tuple[int, int]:
            name = f"{tp.topic}/{tp.partition}"
            if cached:
                return self.fetched.get(name, -1), -1
            asked.append(name)
            return 5, -1

    clock = [100.0]
    monkeypatch.setattr(planning.time, "monotonic", lambda: clock[0])
    source = SourcePlanner(SourceSpec(inputs=(), client_conf={}, max_records_per_batch=1))
    source._probe = Probe()
    assert source._earliest(["t/0", "t/1"]) == {"t/0": 7, "t/1": 5}
    clock[0] = 109.9
    source._earliest(["t/0", "t/1"])
    assert asked == ["t/1"]
    clock[0] = 110.0
    source._earliest(["t/1"])
    assert asked == ["t/1", "t/1"]


CLICKS = AvroCodec(load_schema_file(SCHEMAS / "user_region.avsc"))


def clicks_planner(
    policy: str,
    ends: dict[str, int],
    *,
    ids: dict[str, str] | None = None,
    start: dict[str, Any] | None = None,
) -> SourcePlanner:
    """A planner of input topic ``clicks`` whose partitions end at ``ends`` (no broker).

    ``ids``: the topic ids the cluster gives now; ``start``: a seed's start.
    """
    spec = SourceSpec(
        inputs=(SourceInput("clicks", "clicks", "user", None, CLICKS),),
        client_conf={},
        max_records_per_batch=10_000,
        pipeline="p",
        on_missing_offsets=policy,
        start=start,
    )
    found = SourcePlanner(spec)

    def partitions() -> list[tuple[str, int]]:
        found._topic_ids = dict(ids or {})
        return [split_partition_name(name) for name in ends]

    def log_ends(start: dict[str, Any]) -> dict[str, int]:
        partitions()  # as the real one does: the partitions and ids, then their ends
        return dict(ends)

    found._partitions = partitions  # type: ignore[method-assign]
    found._log_ends = log_ends  # type: ignore[method-assign]
    found._earliest = lambda names: dict.fromkeys(names, 0)  # type: ignore[method-assign]
    found._log_starts = lambda partitions: dict.fromkeys(ends, 10)  # type: ignore[method-assign]
    return found


def test_a_topic_created_again_is_told_by_its_id_however_many_records_it_has(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The new topic holds more records than the offset needed: by offsets alone, nothing
    would look amiss, and its records before that offset would be skipped."""
    start = {"clicks/0": 120, TOPIC_IDS: {"clicks": "old-id"}}
    with pytest.raises(MissingOffsetsError) as raised:
        clicks_planner("fail", {"clicks/0": 150}, ids={"clicks": "new-id"}).latest_offsets(
            start, ReadAllAvailable()
        )
    assert str(raised.value) == (
        "pipeline 'p': input topic 'clicks' partition 0 no longer has offset 120: the topic was "
        "deleted and created again (its topic id changed), and the new one's earliest offset "
        'is 0 and its log ends at 150; set on_missing_offsets = "earliest" or "latest" to read '
        "on from there, or move its start with `daemon reset`"
    )
    source = clicks_planner("earliest", {"clicks/0": 150}, ids={"clicks": "new-id"})
    with caplog.at_level("WARNING", logger="enrichd.source"):
        end = source.latest_offsets(start, ReadAllAvailable())
    assert end == {"clicks/0": 150, RESETS: {"clicks/0": 0}, TOPIC_IDS: {"clicks": "new-id"}}
    assert ranges(source, start, end) == {KafkaRange("clicks", 0, 0, 150)}
    assert "reading on from offset 0, 0 offsets skipped" in caplog.records[0].getMessage()
    # The next plan starts from the new id: nothing is missing any more.
    assert RESETS not in source.latest_offsets(end, ReadAllAvailable())


def test_without_ids_on_either_side_only_the_offsets_tell() -> None:
    for ids, named in (({}, {"clicks": "old-id"}), ({"clicks": "new-id"}, {})):
        source = clicks_planner("fail", {"clicks/0": 150}, ids=ids)
        start = {"clicks/0": 120, TOPIC_IDS: named}
        assert source.latest_offsets(start, ReadAllAvailable())["clicks/0"] == 150


def test_a_partition_gone_stops_the_pipeline_or_is_read_no_more(
    caplog: pytest.LogCaptureFixture,
) -> None:
    start = {"clicks/0": 5, "clicks/1": 7}
    with pytest.raises(MissingOffsetsError) as raised:
        clicks_planner("fail", {"clicks/0": 9}).latest_offsets(start, ReadAllAvailable())
    assert str(raised.value).startswith(
        "pipeline 'p': input topic 'clicks' partition 1 no longer exists (offset 7 was to be "
        "read next): the topic was deleted and created again with fewer partitions; "
    )
    source = clicks_planner("latest", {"clicks/0": 9})
    with caplog.at_level("WARNING", logger="enrichd.source"):
        end = source.latest_offsets(start, ReadAllAvailable())
    assert end == {"clicks/0": 9}
    (line,) = [r.getMessage() for r in caplog.records]
    assert line.endswith("on_missing_offsets = 'latest': reading on without it")


def test_a_partition_of_a_topic_no_longer_read_is_not_missing() -> None:
    """An input taken out of the pipeline leaves its partitions in the checkpoint's start."""
    end = clicks_planner("fail", {"clicks/0": 9}).latest_offsets(
        {"clicks/0": 5, "views/0": 3}, ReadAllAvailable()
    )
    assert end == {"clicks/0": 9}


def test_a_batch_planned_before_the_topic_was_created_again_reads_none_of_it() -> None:
    """Its range is the old topic's; the next plan, from its end, moves and reports it."""
    start, end = {"clicks/0": 40}, {"clicks/0": 60, TOPIC_IDS: {"clicks": "old-id"}}
    with pytest.raises(MissingOffsetsError):
        clicks_planner("fail", {"clicks/0": 150}, ids={"clicks": "new-id"}).partitions(start, end)
    source = clicks_planner("earliest", {"clicks/0": 150}, ids={"clicks": "new-id"})
    assert ranges(source, start, end) == set()
    assert source.latest_offsets(end, ReadAllAvailable())[RESETS] == {"clicks/0": 0}


def test_a_seeded_start_below_the_earliest_offset_is_missing_too(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A start seeded by `daemon reset` or `rescale` is checked as a batch's start is."""
    seed = {"clicks/0": 3, "clicks/1": 12}  # the log starts at 10
    ends = {"clicks/0": 20, "clicks/1": 20, "clicks/2": 20}
    with pytest.raises(MissingOffsetsError) as raised:
        clicks_planner("fail", ends, start=seed).initial_offsets()
    assert "partition 0 no longer has offset 3: the earliest it has is 10" in str(raised.value)
    with caplog.at_level("WARNING", logger="enrichd.source"):
        offsets = clicks_planner(
            "earliest", ends, start=seed, ids={"clicks": "x"}
        ).initial_offsets()
    # The one below goes on from the earliest; the one above starts where seeded; the one
    # the seed does not name (a partition added since), from the earliest.
    assert offsets == {"clicks/0": 10, "clicks/1": 12, "clicks/2": 10, TOPIC_IDS: {"clicks": "x"}}
    assert "reading on from offset 10, 7 offsets skipped" in caplog.records[0].getMessage()


def test_a_seed_of_a_topic_created_again_since_is_missing_by_its_id() -> None:
    seed = {"clicks/0": 12, TOPIC_IDS: {"clicks": "old-id"}}
    source = clicks_planner("fail", {"clicks/0": 20}, start=seed, ids={"clicks": "new-id"})
    with pytest.raises(MissingOffsetsError, match="its topic id changed"):
        source.initial_offsets()
