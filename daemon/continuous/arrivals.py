"""What a long batch's task has read and not yet joined: the next sub-batch comes from here.

A sub-batch joins what arrived since the last one, unless more waits than the pipeline's
``max_records_per_batch``: then it takes that many, the earliest across partitions, as a
capped micro-batch admits them (:func:`~daemon.source.admission.admit_earliest`), and the
rest waits for the next sub-batch, which comes at once. So a backlog is joined in bounded
transactions, and a cap splits the input in time order in either mode, which keeps the
results the same however it is split (docs/semantics.md). Earliest among what the task has
read so far: the micro-batch planner, too, admits from what it has looked at.

What the task has read is not all there is: the consumer fetches partitions in its own order,
so while a backlog is read, a partition may have older records in Kafka than some already
read from another. A sub-batch then takes only what comes before every record such a
partition may still bring (:meth:`Arrivals.take`'s ``behind``): each partition's timestamps
do not go back (docs/semantics.md), so its next record comes no earlier in the arrival order
than the last one read from it, and a partition not read at all yet holds everything back.

A lookup of several tables answers a stream record at once from its tables' state where no
row of the sub-batch changes its keys (:mod:`daemon.continuous.operators`), and through the
whole apply loop where one does. When a sub-batch would end with a long run of stream records
after the last table row it takes (a backlog: the tables read up, the orders after them),
it ends at that row instead, and the run follows at once in a sub-batch of its own, answered
the fast way (:data:`STREAM_RUN`). How records fall into sub-batches does not change the
results, only what they cost.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from daemon.model.wire import is_end_of_input, partition_name
from daemon.source.admission import Heads, admit_earliest

STREAM_RUN = 1_000
"""The fewest stream records after a sub-batch's last table row that go on in a sub-batch of
their own, when they are also at least half of it (:meth:`Arrivals.take`). Answered the
fast way a record costs tens of microseconds less; a sub-batch more costs a transaction, some
milliseconds. The half keeps live traffic, with table rows here and there among the stream's,
from paying a second transaction per commit interval."""


class Arrivals:
    """Messages read and not yet joined, by partition, in offset order.

    Args:
        ranks: each input topic's rank, the joiner's role order: it orders records of equal
            timestamps across inputs.
        cap: the most records one sub-batch takes.
        stream: the topic of the stream a lookup of several tables answers (see the module
            docstring); None for any other joiner.
    """

    def __init__(self, ranks: dict[str, int], cap: int, stream: str | None = None) -> None:
        self.ranks = ranks
        self.cap = cap
        self.stream = stream
        """The topic of the stream a lookup of several tables answers, whose long run after
        the tables' rows goes in a sub-batch of its own (None: not a split)."""
        self._waiting: dict[str, list[Any]] = {}
        self._levels = max(ranks.values(), default=0) + 2
        """Ranks a timestamp spans in an order key (:meth:`_order`): the inputs', and a
        marker's after them."""
        self._last: dict[str, int] = {}
        """Each partition's greatest order key read so far: no record it brings next comes
        before it."""

    def __bool__(self) -> bool:
        return any(self._waiting.values())

    def __len__(self) -> int:
        return sum(len(found) for found in self._waiting.values())

    def add(self, messages: Iterable[Any]) -> None:
        """Messages a poll read, in the order the consumer gave them."""
        last = self._last
        for message in messages:
            name = partition_name(message.topic(), message.partition())
            self._waiting.setdefault(name, []).append(message)
            last[name] = max(last.get(name, -1), self._order(message))

    def clear(self) -> None:
        """Forget what waits: the consumer reads it again (it was assigned anew)."""
        self._waiting = {}
        self._last = {}

    def take(self, behind: frozenset[str] = frozenset()) -> list[Any]:
        """The next sub-batch's messages: all that wait, or the ``cap`` earliest.

        ``behind``: partitions that may still bring records older than some read (a backlog
        not read to its end): only what comes before the last record read from each of them
        is taken, nothing while one of them has not been read at all. A long run of stream
        records after the last table row taken waits for the next sub-batch (the module
        docstring).
        """
        waiting = {name: found for name, found in self._waiting.items() if found}
        if behind:
            horizon = min(self._last.get(name, -1) for name in behind)
            before = {name: self._before(found, horizon) for name, found in waiting.items()}
            waiting = {name: found for name, found in before.items() if found}
        if sum(len(found) for found in waiting.values()) > self.cap:
            heads = {name: _heads(found) for name, found in waiting.items()}
            ranks = {name: self.ranks[found[0].topic()] for name, found in waiting.items()}
            ends = admit_earliest(heads, ranks, self.cap)
            waiting = {
                name: [message for message in found if message.offset() < ends.get(name, -1)]
                for name, found in waiting.items()
            }
        if self.stream is not None:
            waiting = self._tables_first(waiting)
        taken = []
        for name, found in waiting.items():
            taken.extend(found)
            self._waiting[name] = self._waiting[name][len(found) :]
        return taken

    def _tables_first(self, chosen: dict[str, list[Any]]) -> dict[str, list[Any]]:
        """``chosen`` less the stream's records after its last table row, if a long run.

        Long: :data:`STREAM_RUN` records or more, and half of ``chosen`` or more.
        """
        chosen = {name: found for name, found in chosen.items() if found}
        stream = [name for name, found in chosen.items() if found[0].topic() == self.stream]
        tables = [found for name, found in chosen.items() if name not in stream]
        if not tables or not stream:
            return chosen
        last = max(self._order(message) for found in tables for message in found)
        kept = {name: self._before(chosen[name], last) for name in stream}
        run = sum(len(chosen[name]) - len(kept[name]) for name in stream)
        if run < STREAM_RUN or 2 * run < sum(map(len, chosen.values())):
            return chosen
        return {**chosen, **kept}

    def _order(self, message: Any) -> int:
        """A message's place in the arrival order, as one number.

        Its timestamp, then its input's rank (an end-of-input marker's after every input's),
        as the planner orders them (:func:`~daemon.source.admission.admit_earliest`).
        """
        marker = message.value() is None and is_end_of_input(message.headers())
        rank = self._levels - 1 if marker else self.ranks[message.topic()]
        return int(message.timestamp()[1]) * self._levels + rank

    def _before(self, messages: list[Any], horizon: int) -> list[Any]:
        """The leading ``messages`` that come before ``horizon`` in the arrival order."""
        highest, cut = -1, 0
        for message in messages:
            highest = max(highest, self._order(message))
            if highest >= horizon:
                break
            cut += 1
        return messages[:cut]

    def first_waiting(self) -> dict[str, int]:
        """The offset of the first message still waiting, by partition."""
        return {name: found[0].offset() for name, found in self._waiting.items() if found}


def _heads(messages: list[Any]) -> Heads:
    return Heads(
        messages[0].offset(),
        messages[-1].offset() + 1,
        [message.timestamp()[1] for message in messages],
        [message.offset() for message in messages],
        [message.value() is None and is_end_of_input(message.headers()) for message in messages],
    )
