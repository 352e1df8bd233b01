"""The strict check: what a pipeline wrote, against the answer, record by record.

Every record a ``read_committed`` reader got from an output or dead-letter topic is named as
the answer names its records (:mod:`daemon.verify.answer`): by key, value and the workload
record that made it, which its ``enrichd.source.*`` headers give. Where the partition's raw
batches were read (:mod:`daemon.verify.batches`), a record whose transaction aborted or is
still open is set aside as the broker's fault: a ``read_committed`` reader must never get
it, and enrichd cannot keep a broker from handing it out. The rest is compared with the
answer as multisets:

- *lost*: expected more often than it was written (usually: not at all);
- *duplicated*: written more often than expected;
- *unexpected*: written but not in the answer at all (a wrong value, or a record from
  nowhere).

Each is counted under the scenario of the workload record it came from.

Example:
    >>> from collections import Counter
    >>> expected = Counter({("k", "1", 0): 1, ("k", "2", 1): 1})
    >>> written = Counter({("k", "1", 0): 2, ("k", "3", 1): 1})
    >>> tally = compare(expected, written)
    >>> (tally.lost, tally.duplicated, tally.unexpected)
    (Counter({('k', '2', 1): 1}), Counter({('k', '1', 0): 1}), Counter({('k', '3', 1): 1}))
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from daemon.verify.answer import Answer, Identity, canonical
from daemon.verify.workload import Workload

END_OF_INPUT = "end of input"
"""The scenario of records no workload record made (flushed at the end of input)."""
TOTALS = "running totals"
"""The scenario row of a second stage's totals."""


@dataclass(frozen=True)
class Received:
    """One record a ``read_committed`` reader got, and what the raw log says of it."""

    topic: str
    partition: int
    offset: int
    key: str | None
    value: Any
    """The decoded value (None: a tombstone); the raw bytes of a dead letter."""
    timestamp: int
    headers: dict[str, str]
    status: str | None = None
    """``committed``, ``aborted``, ``open``, ``plain``, or None where batches were not read."""

    @property
    def leaked(self) -> bool:
        """Whether the reader should never have got it: its transaction aborted or is open."""
        return self.status in ("aborted", "open")

    @property
    def source(self) -> tuple[str, int, int] | None:
        """The topic, partition and offset its ``enrichd.source.*`` headers name, if any."""
        headers = self.headers
        try:
            return (
                headers["enrichd.source.topic"],
                int(headers["enrichd.source.partition"]),
                int(headers["enrichd.source.offset"]),
            )
        except (KeyError, ValueError):
            return None


@dataclass
class Tally:
    """Lost, duplicated and unexpected records of one comparison."""

    lost: Counter[Identity] = field(default_factory=Counter)
    duplicated: Counter[Identity] = field(default_factory=Counter)
    unexpected: Counter[Identity] = field(default_factory=Counter)


def compare(expected: Counter[Identity], written: Counter[Identity]) -> Tally:
    """Compare two multisets of identities (see the module docstring)."""
    extra = written - expected
    return Tally(
        lost=expected - written,
        duplicated=Counter({name: n for name, n in extra.items() if name in expected}),
        unexpected=Counter({name: n for name, n in extra.items() if name not in expected}),
    )


@dataclass
class Row:
    """One line of a joiner's table."""

    scenario: str
    expected: int = 0
    observed: int = 0
    lost: int = 0
    duplicated: int = 0
    unexpected: int = 0

    @property
    def ok(self) -> bool:
        """Nothing lost, duplicated or unexpected."""
        return not (self.lost or self.duplicated or self.unexpected)

    @property
    def verdict(self) -> str:
        """``ok``, or what went wrong."""
        if self.ok:
            return "ok"
        wrong = [
            f"{name} {count}"
            for name, count in (
                ("lost", self.lost),
                ("duplicated", self.duplicated),
                ("unexpected", self.unexpected),
            )
            if count
        ]
        return ", ".join(wrong)


@dataclass
class JoinerCheck:
    """The check of one joiner's pipeline.

    Attributes:
        joiner: the joiner's name.
        rows: per scenario, output records (dead letters in :attr:`dead_letters`).
        dead_letters: per dead-letter class, expected and observed.
        broker_leaked: records a ``read_committed`` reader got from aborted (or open)
            transactions, by topic: the broker's fault.
        examples: a few lost, duplicated or unexpected records, for the report.
        final_totals_wrong: groups whose last total is not the answer's.
        broker_leaked_totals: groups whose totals the second stage made from an output
            record the broker leaked (set aside, and their final totals not checked), with
            the totals' topic: the broker's fault.
    """

    joiner: str
    rows: list[Row] = field(default_factory=list)
    dead_letters: list[Row] = field(default_factory=list)
    broker_leaked: dict[str, int] = field(default_factory=dict)
    examples: list[str] = field(default_factory=list)
    final_totals_wrong: list[str] = field(default_factory=list)
    broker_leaked_totals: dict[str, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """Nothing lost, duplicated or unexpected anywhere, and every final total right."""
        return all(row.ok for row in self.rows + self.dead_letters) and not self.final_totals_wrong

    def totals(self) -> Row:
        """All rows added up (dead letters included)."""
        total = Row("all")
        for row in self.rows + self.dead_letters:
            total.expected += row.expected
            total.observed += row.observed
            total.lost += row.lost
            total.duplicated += row.duplicated
            total.unexpected += row.unexpected
        return total


def check(
    joiner: str,
    work: Workload,
    answer: Answer,
    outputs: list[Received],
    dead_letters: list[Received],
    totals: list[Received] | None,
    source_item: Callable[[Received], int | None],
) -> JoinerCheck:
    """Compare what a pipeline wrote with its answer.

    Args:
        joiner: the joiner's name.
        work: the workload, for the scenario of each record.
        answer: what it must write.
        outputs: the main output topic's records.
        dead_letters: the dead-letter topic's records.
        totals: the second stage's output, or None for a joiner without one.
        source_item: the workload item a record's ``enrichd.source.*`` headers name.
    """
    result = JoinerCheck(joiner)

    def scenario(item: int | None) -> str:
        return END_OF_INPUT if item is None else work.items[item].scenario

    kept = _set_aside_leaked(result, outputs)
    written = Counter((r.key, canonical(r.value), source_item(r)) for r in kept)
    tally = compare(answer.outputs, written)
    result.rows = _rows(answer.outputs, written, tally, lambda name: scenario(name[2]))
    result.examples += _examples(tally)

    kept = _set_aside_leaked(result, dead_letters)
    dead = Counter((r.headers.get("enrichd.error.class", "?"), source_item(r)) for r in kept)
    dead_tally = compare(answer.dead_letters, dead)
    result.dead_letters = _rows(answer.dead_letters, dead, dead_tally, lambda name: name[0])
    result.examples += _examples(dead_tally)

    if totals is not None:
        # The second stage reads the first's output with read_committed: a total it made
        # from a record the broker should have hidden is the broker's fault too, and so is
        # every later total of that group (each carries it on).
        hidden = {(r.topic, r.partition, r.offset) for r in outputs if r.leaked}
        kept = []
        for record in _set_aside_leaked(result, totals):
            if record.source in hidden:
                result.broker_leaked_totals[str(record.key)] = record.topic
            else:
                kept.append(record)
        moved = Counter((r.key, r.timestamp) for r in kept)
        totals_tally = compare(answer.totals, moved)
        result.rows.append(
            Row(
                TOTALS,
                sum(answer.totals.values()),
                sum(moved.values()),
                sum(totals_tally.lost.values()),
                sum(totals_tally.duplicated.values()),
                sum(totals_tally.unexpected.values()),
            )
        )
        result.examples += _examples(totals_tally)
        final = {str(r.key): canonical(r.value) for r in kept}  # in offset order: the last
        result.final_totals_wrong = sorted(
            group
            for group in set(final) | set(answer.final_totals)
            if final.get(group) != answer.final_totals.get(group)
            and group not in result.broker_leaked_totals
        )
    return result


def _set_aside_leaked(result: JoinerCheck, records: Iterable[Received]) -> list[Received]:
    kept = []
    for record in records:
        if record.leaked:
            result.broker_leaked[record.topic] = result.broker_leaked.get(record.topic, 0) + 1
        else:
            kept.append(record)
    return kept


def _rows(
    expected: Counter[Identity],
    written: Counter[Identity],
    tally: Tally,
    label: Callable[[Identity], str],
) -> list[Row]:
    rows: dict[str, Row] = {}

    def row(name: Identity) -> Row:
        title = label(name)
        return rows.setdefault(title, Row(title))

    for name, n in expected.items():
        row(name).expected += n
    for name, n in written.items():
        row(name).observed += n
    for name, n in tally.lost.items():
        row(name).lost += n
    for name, n in tally.duplicated.items():
        row(name).duplicated += n
    for name, n in tally.unexpected.items():
        row(name).unexpected += n
    return sorted(rows.values(), key=lambda r: r.scenario)


def _examples(tally: Tally, limit: int = 3) -> list[str]:
    found = []
    for what, counter in (
        ("lost", tally.lost),
        ("duplicated", tally.duplicated),
        ("unexpected", tally.unexpected),
    ):
        for name, n in list(counter.items())[:limit]:
            found.append(f"{what} x{n}: {name}")
    return found
