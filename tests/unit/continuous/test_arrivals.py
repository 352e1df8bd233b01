"""A sub-batch takes what arrived, or, past the cap, the earliest across partitions."""

from __future__ import annotations

from dataclasses import dataclass

from daemon.continuous.arrivals import STREAM_RUN, Arrivals
from daemon.model.wire import END_OF_INPUT_HEADERS


@dataclass
class Message:
    """What a confluent-kafka message gives the task (only that)."""

    topic_: str
    partition_: int
    offset_: int
    timestamp_: int
    value_: bytes | None = b"v"
    headers_: list[tuple[str, bytes]] | None = None

    def topic(self) -> str:
        return self.topic_

    def partition(self) -> int:
        return self.partition_

    def offset(self) -> int:
        return self.offset_

    def timestamp(self) -> tuple[int, int]:
        return (1, self.timestamp_)

    def value(self) -> bytes | None:
        return self.value_

    def headers(self) -> list[tuple[str, bytes]] | None:
        return self.headers_


def _taken(arrivals: Arrivals) -> list[tuple[str, int]]:
    return [(m.topic(), m.offset()) for m in arrivals.take()]


def test_under_the_cap_a_sub_batch_takes_everything_that_arrived() -> None:
    arrivals = Arrivals({"users": 0, "tweets": 1}, cap=10)
    arrivals.add([Message("tweets", 0, 5, 300), Message("users", 0, 0, 100)])
    assert arrivals.first_waiting() == {"tweets/0": 5, "users/0": 0}
    assert _taken(arrivals) == [("tweets", 5), ("users", 0)]
    assert not arrivals
    assert arrivals.first_waiting() == {}
    assert arrivals.take() == []


def test_past_the_cap_the_earliest_go_first_and_the_rest_waits_in_order() -> None:
    arrivals = Arrivals({"users": 0, "tweets": 1}, cap=2)
    # The consumer brought all of tweets/0 before users/0: a user record is older.
    arrivals.add([Message("tweets", 0, n, 100 + 10 * n) for n in range(3)])
    arrivals.add([Message("users", 0, 7, 105), Message("users", 0, 8, 200)])
    assert _taken(arrivals) == [("tweets", 0), ("users", 7)]
    assert arrivals.first_waiting() == {"tweets/0": 1, "users/0": 8}
    assert _taken(arrivals) == [("tweets", 1), ("tweets", 2)]
    assert _taken(arrivals) == [("users", 8)]
    assert not arrivals


def test_a_tie_goes_to_the_earlier_role_and_end_of_input_markers_ride_along() -> None:
    arrivals = Arrivals({"users": 0, "tweets": 1}, cap=1)
    end = Message("tweets", 1, 4, 100, None, list(END_OF_INPUT_HEADERS))
    arrivals.add([Message("tweets", 1, 3, 100), end, Message("users", 0, 0, 100)])
    assert _taken(arrivals) == [("users", 0)]
    assert _taken(arrivals) == [("tweets", 3), ("tweets", 4)]


def test_a_partition_behind_its_backlog_holds_back_what_it_may_still_precede() -> None:
    arrivals = Arrivals({"orders": 0, "customers": 1}, cap=100)
    # The consumer brought orders first; customers/0 has older rows in Kafka, none read yet.
    arrivals.add([Message("orders", 0, n, 200 + n) for n in range(3)])
    assert arrivals.take(frozenset({"customers/0"})) == []
    # Its first rows: what comes before the last of them goes (an order at its timestamp
    # too: the stream ranks first), the rest waits for more.
    arrivals.add([Message("customers", 0, 0, 100), Message("customers", 0, 1, 201)])
    assert _taken_behind(arrivals, "customers/0") == [
        ("orders", 0), ("orders", 1), ("customers", 0)
    ]  # fmt: skip
    assert arrivals.first_waiting() == {"orders/0": 2, "customers/0": 1}
    # Read to its end: nothing is behind any more, and everything goes.
    assert _taken(arrivals) == [("orders", 2), ("customers", 1)]
    assert not arrivals


def test_behind_and_past_the_cap_the_earliest_before_the_horizon_go() -> None:
    arrivals = Arrivals({"orders": 0, "customers": 1}, cap=2)
    arrivals.add([Message("orders", 0, n, 100 + n) for n in range(5)])
    arrivals.add([Message("customers", 0, 0, 103)])
    assert _taken_behind(arrivals, "customers/0") == [("orders", 0), ("orders", 1)]
    assert _taken_behind(arrivals, "customers/0") == [("orders", 2), ("orders", 3)]
    assert _taken_behind(arrivals, "customers/0") == []
    assert arrivals.first_waiting() == {"orders/0": 4, "customers/0": 0}


def test_a_long_run_of_stream_records_after_the_tables_rows_goes_in_a_sub_batch_of_its_own() -> (
    None
):
    # The tables' backlog, then the orders after it, as a new lookup of several tables reads
    # them: the rows go first, with the orders that come before the last of them.
    ranks = {"orders": 0, "customers": 1, "products": 2}
    arrivals = Arrivals(ranks, cap=10 * STREAM_RUN, stream="orders")
    arrivals.add([Message("customers", 0, n, 10 + 2 * n) for n in range(3)])
    arrivals.add([Message("products", 0, 0, 13)])
    arrivals.add(
        [Message("orders", 0, 0, 14), *(Message("orders", 1, n, 15 + n) for n in range(STREAM_RUN))]
    )
    assert _taken(arrivals) == [
        ("customers", 0), ("customers", 1), ("customers", 2), ("products", 0), ("orders", 0)
    ]  # fmt: skip
    assert arrivals.first_waiting() == {"orders/1": 0}
    assert len(arrivals.take()) == STREAM_RUN
    assert not arrivals


def test_a_short_run_or_less_than_half_stays_in_the_sub_batch() -> None:
    ranks = {"orders": 0, "customers": 1}
    # A run shorter than STREAM_RUN: not worth a transaction more.
    arrivals = Arrivals(ranks, cap=10 * STREAM_RUN, stream="orders")
    arrivals.add([Message("customers", 0, 0, 10)])
    arrivals.add([Message("orders", 0, n, 11 + n) for n in range(STREAM_RUN - 1)])
    assert len(arrivals.take()) == STREAM_RUN
    # A long run, but less than half of the sub-batch: live traffic with a table row in it.
    arrivals.add([Message("orders", 1, n, 100_000 + n) for n in range(STREAM_RUN + 2)])
    arrivals.add([Message("customers", 0, 1, 100_000 + STREAM_RUN + 1)])
    arrivals.add([Message("orders", 0, STREAM_RUN - 1 + n, 200_000 + n) for n in range(STREAM_RUN)])
    assert len(arrivals.take()) == 2 * STREAM_RUN + 3
    # Without a stream to answer (any other joiner), no run waits.
    arrivals = Arrivals(ranks, cap=10 * STREAM_RUN)
    arrivals.add([Message("customers", 0, 0, 10)])
    arrivals.add([Message("orders", 0, n, 11 + n) for n in range(STREAM_RUN)])
    assert len(arrivals.take()) == STREAM_RUN + 1


def _taken_behind(arrivals: Arrivals, behind: str) -> list[tuple[str, int]]:
    return [(m.topic(), m.offset()) for m in arrivals.take(frozenset({behind}))]
