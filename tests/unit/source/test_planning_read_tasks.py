"""A micro-batch's Kafka ranges are dealt out to at most as many read tasks as there are cores.

:func:`daemon.source.planning.deal` decides which Spark task reads which partition's range:
every range exactly once, no more tasks than asked for, records spread evenly, and the same
plan for the same ranges (a replayed batch is read the same way).
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from daemon.source.planning import KafkaRange, SourcePlanner, deal
from daemon.source.spec import SourceSpec

ranges_strategy = st.lists(
    st.tuples(st.sampled_from(["clicks", "users"]), st.integers(0, 7), st.integers(1, 500)),
    unique_by=lambda r: (r[0], r[1]),
    max_size=12,
).map(lambda rs: [KafkaRange(topic, p, 100, 100 + size) for topic, p, size in rs])


def records(task: list[KafkaRange]) -> int:
    return sum(r.end - r.start for r in task)


@settings(max_examples=300, deadline=None)
@given(ranges_strategy, st.integers(0, 6))
def test_every_range_is_read_once_by_at_most_the_tasks_asked(
    ranges: list[KafkaRange], tasks: int
) -> None:
    dealt = deal(ranges, tasks)
    by_name = lambda r: (r.topic, r.partition)  # noqa: E731
    assert sorted((r for task in dealt for r in task), key=by_name) == sorted(ranges, key=by_name)
    assert all(dealt)  # no empty task
    expected = len(ranges) if tasks == 0 else min(tasks, len(ranges))
    assert len(dealt) == expected
    if dealt:
        largest = max(r.end - r.start for r in ranges)
        loads = [records(task) for task in dealt]
        assert max(loads) - min(loads) <= largest


def no_broker(planner: SourcePlanner, ends: dict[str, int]) -> SourcePlanner:
    """``planner`` on a broker that has every offset up to ``ends`` (and no broker at all)."""
    planner._partitions = lambda: []  # type: ignore[method-assign]
    planner._log_ends = lambda start: dict(ends)  # type: ignore[method-assign]
    planner._earliest = lambda names: dict.fromkeys(names, 0)  # type: ignore[method-assign]
    return planner


def test_two_topics_of_two_partitions_on_two_cores_make_two_tasks() -> None:
    """The case that ran in two waves; the smaller ranges go where the records are fewer."""
    spec = SourceSpec(inputs=(), client_conf={}, max_records_per_batch=10, read_tasks=2)
    end = {"clicks/0": 1_000, "clicks/1": 900, "users/0": 30, "users/1": 200}
    planned = no_broker(SourcePlanner(spec), end).partitions({}, end)
    names = [[(r.topic, r.partition) for r in p.ranges] for p in planned]  # type: ignore[attr-defined]
    assert names == [[("clicks", 0), ("users", 0)], [("clicks", 1), ("users", 1)]]


def test_without_a_task_count_each_partition_is_a_task() -> None:
    reader = SourcePlanner(SourceSpec(inputs=(), client_conf={}, max_records_per_batch=10))
    end = {"t/0": 9, "t/1": 3, "t/2": 0}
    planned = no_broker(reader, end).partitions({"t/0": 5}, end)
    assert [p.ranges for p in planned] == [  # type: ignore[attr-defined]
        (KafkaRange("t", 0, 5, 9),),
        (KafkaRange("t", 1, 0, 3),),
    ]
