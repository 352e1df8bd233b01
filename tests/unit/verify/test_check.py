"""The strict check: lost, duplicated and unexpected records, and the broker's leaks set aside."""

from __future__ import annotations

from collections import Counter
from typing import Any

from daemon.verify.answer import Answer, canonical
from daemon.verify.check import END_OF_INPUT, TOTALS, Received, check, compare
from daemon.verify.workload import Item, Workload

WORK = Workload(
    "comap",
    [
        Item("one", "user arrives", 1, {"id": 1}, 10),
        Item("many", "tweet joins its user", 7, {"id": 7}, 11),
        Item("many", "tweet joins its user", 8, {"id": 8}, 12),
        Item("many", "poison record", None, None, 13, b"\xff"),
    ],
)


def out(
    key: str, value: Any, item: int | None, offset: int, status: str | None = "committed"
) -> Received:
    headers = {} if item is None else {"item": str(item)}
    return Received("t.out", 0, offset, key, value, 10 + offset, headers, status)


def letter(kind: str, item: int, offset: int, status: str | None = "committed") -> Received:
    headers = {"enrichd.error.class": kind, "item": str(item)}
    return Received("t.dlq", 0, offset, None, b"\xff", 13, headers, status)


def source_item(record: Received) -> int | None:
    return int(record.headers["item"]) if "item" in record.headers else None


def answer() -> Answer:
    return Answer(
        outputs=Counter(
            {
                ("7", canonical({"v": 7}), 1): 1,
                ("8", canonical({"v": 8}), 2): 1,
                ("9", canonical(None), None): 1,
            }
        ),
        dead_letters=Counter({("UndecodableRecord", 3): 1}),
    )


def test_exactly_the_answer_passes_and_counts_each_scenario() -> None:
    written = [out("7", {"v": 7}, 1, 0), out("8", {"v": 8}, 2, 1), out("9", None, None, 2)]
    result = check(
        "comap", WORK, answer(), written, [letter("UndecodableRecord", 3, 0)], None, source_item
    )
    assert result.ok
    assert [(r.scenario, r.expected, r.observed, r.verdict) for r in result.rows] == [
        (END_OF_INPUT, 1, 1, "ok"),
        ("tweet joins its user", 2, 2, "ok"),
    ]
    assert [(r.scenario, r.verdict) for r in result.dead_letters] == [("UndecodableRecord", "ok")]


def test_lost_duplicated_and_unexpected_records_fail_their_scenario() -> None:
    written = [
        out("7", {"v": 7}, 1, 0),
        out("7", {"v": 7}, 1, 1),  # written twice
        out("8", {"v": "wrong"}, 2, 2),  # 8's answer lost, a wrong one in its place
        out("9", None, None, 3),
    ]
    result = check("comap", WORK, answer(), written, [], None, source_item)
    assert not result.ok
    row = next(r for r in result.rows if r.scenario == "tweet joins its user")
    assert (row.lost, row.duplicated, row.unexpected) == (1, 1, 1)
    assert row.verdict == "lost 1, duplicated 1, unexpected 1"
    assert [(r.scenario, r.lost) for r in result.dead_letters] == [("UndecodableRecord", 1)]
    assert result.totals().lost == 2


def test_aborted_records_a_reader_got_are_the_brokers_fault_not_duplicates() -> None:
    written = [
        out("7", {"v": 7}, 1, 0, "aborted"),  # an attempt the broker should have hidden
        out("7", {"v": 7}, 1, 2),
        out("8", {"v": 8}, 2, 3),
        out("9", None, None, 4),
    ]
    dead = [letter("UndecodableRecord", 3, 0, "open"), letter("UndecodableRecord", 3, 1)]
    result = check("comap", WORK, answer(), written, dead, None, source_item)
    assert result.ok
    assert result.broker_leaked == {"t.out": 1, "t.dlq": 1}


def test_without_raw_batches_every_record_counts() -> None:
    written = [out("7", {"v": 7}, 1, 0, None), out("7", {"v": 7}, 1, 1, None)]
    result = check("comap", WORK, answer(), written, [], None, source_item)
    assert result.totals().duplicated == 1 and result.broker_leaked == {}


def test_totals_are_checked_by_group_and_time_and_by_their_final_values() -> None:
    expected = answer()
    expected.dead_letters = Counter()
    expected.totals = Counter({("north", 11): 1, ("north", 12): 1})
    expected.final_totals = {"north": canonical({"region": "north", "clicks": 5})}
    written = [out("7", {"v": 7}, 1, 0), out("8", {"v": 8}, 2, 1), out("9", None, None, 2)]

    def total(offset: int, stamp: int, clicks: int) -> Received:
        return Received(
            "t.totals",
            0,
            offset,
            "north",
            {"region": "north", "clicks": clicks},
            stamp,
            {},
            "committed",
        )

    # Another micro-batching may give other intermediate totals: only the final one counts.
    good = check(
        "lookup", WORK, expected, written, [], [total(0, 12, 3), total(1, 11, 5)], source_item
    )
    assert good.ok
    assert [r for r in good.rows if r.scenario == TOTALS][0].observed == 2
    twice = check(
        "lookup",
        WORK,
        expected,
        written,
        [],
        [total(0, 11, 2), total(1, 11, 4), total(2, 12, 9)],
        source_item,
    )
    row = next(r for r in twice.rows if r.scenario == TOTALS)
    assert (row.lost, row.duplicated) == (0, 1)
    assert twice.final_totals_wrong == ["north"] and not twice.ok


def test_totals_made_from_an_output_record_the_broker_leaked_are_its_fault_too() -> None:
    """The second stage reads the output with read_committed: given an aborted record, it
    counts it, in that total and in every later total of its group."""
    expected = answer()
    expected.dead_letters = Counter()
    expected.totals = Counter({("north", 11): 1, ("north", 12): 1})
    expected.final_totals = {"north": canonical({"region": "north", "clicks": 2})}
    written = [
        out("7", {"v": 7}, 1, 0),
        out("7", {"v": 7}, 1, 1, "aborted"),  # a zombie's attempt, handed out all the same
        out("8", {"v": 8}, 2, 2),
        out("9", None, None, 3),
    ]

    def total(offset: int, stamp: int, clicks: int, source: int) -> Received:
        made_from = {"enrichd.source.topic": "t.out", "enrichd.source.partition": "0"}
        headers = {**made_from, "enrichd.source.offset": str(source)}
        value = {"region": "north", "clicks": clicks}
        return Received("t.totals", 0, offset, "north", value, stamp, headers, "committed")

    totals = [total(0, 11, 1, 0), total(1, 99, 2, 1), total(2, 12, 3, 2)]
    result = check("lookup", WORK, expected, written, [], totals, source_item)
    assert result.ok
    assert result.broker_leaked == {"t.out": 1}
    assert result.broker_leaked_totals == {"north": "t.totals"}
    # Made from a committed record instead, the same extra total is enrichd's duplicate.
    totals[1] = total(1, 11, 2, 0)
    result = check("lookup", WORK, expected, written, [], totals, source_item)
    row = next(r for r in result.rows if r.scenario == TOTALS)
    assert row.duplicated == 1 and result.final_totals_wrong == ["north"] and not result.ok


def test_compare_counts_multisets() -> None:
    tally = compare(Counter({"a": 2, "b": 1}), Counter({"a": 3, "c": 1}))
    assert (tally.lost, tally.duplicated, tally.unexpected) == (
        Counter({"b": 1}),
        Counter({"a": 1}),
        Counter({"c": 1}),
    )
