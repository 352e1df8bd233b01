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
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from daemon.model.wire import is_end_of_input, partition_name
from daemon.source.admission import Heads, admit_earliest


class Arrivals:
    """Messages read and not yet joined, by partition, in offset order.

    Args:
        ranks: each input topic's rank, the joiner's role order: it orders records of equal
            timestamps across inputs.
        cap: the most records one sub-batch takes.
    """

    def __init__(self, ranks: dict[str, int], cap: int) -> None:
        self.ranks = ranks
        self.cap = cap
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
        is taken, nothing while one of them has not been read at all.
        """
        waiting = {name: found for name, found in self._waiting.items() if found}
        if behind:
            horizon = min(self._last.get(name, -1) for name in behind)
            before = {name: self._before(found, horizon) for name, found in waiting.items()}
            waiting = {name: found for name, found in before.items() if found}
        if sum(len(found) for found in waiting.values()) <= self.cap:
            taken = [message for found in waiting.values() for message in found]
            for name, found in waiting.items():
                self._waiting[name] = self._waiting[name][len(found) :]
            return taken
        heads = {name: _heads(found) for name, found in waiting.items()}
        ranks = {name: self.ranks[found[0].topic()] for name, found in waiting.items()}
        ends = admit_earliest(heads, ranks, self.cap)
        taken = []
        for name, found in waiting.items():
            cut = sum(1 for message in found if message.offset() < ends.get(name, -1))
            taken.extend(found[:cut])
            self._waiting[name] = self._waiting[name][cut:]
        return taken

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
