"""What a long batch's task has read and not yet joined: the next sub-batch comes from here.

A sub-batch joins what arrived since the last one, unless more waits than the pipeline's
``max_records_per_batch``: then it takes that many, the earliest across partitions, as a
capped micro-batch admits them (:func:`~daemon.source.admission.admit_earliest`), and the
rest waits for the next sub-batch, which comes at once. So a backlog is joined in bounded
transactions, and a cap splits the input in time order in either mode, which keeps the
results the same however it is split (docs/semantics.md). Earliest among what the task has
read so far: the micro-batch planner, too, admits from what it has looked at.
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

    def __bool__(self) -> bool:
        return any(self._waiting.values())

    def add(self, messages: Iterable[Any]) -> None:
        """Messages a poll read, in the order the consumer gave them."""
        for message in messages:
            name = partition_name(message.topic(), message.partition())
            self._waiting.setdefault(name, []).append(message)

    def clear(self) -> None:
        """Forget what waits: the consumer reads it again (it was assigned anew)."""
        self._waiting = {}

    def take(self) -> list[Any]:
        """The next sub-batch's messages: all that wait, or the ``cap`` earliest."""
        waiting = {name: found for name, found in self._waiting.items() if found}
        if sum(len(found) for found in waiting.values()) <= self.cap:
            self._waiting = {}
            return [message for found in waiting.values() for message in found]
        heads = {name: _heads(found) for name, found in waiting.items()}
        ranks = {name: self.ranks[found[0].topic()] for name, found in waiting.items()}
        ends = admit_earliest(heads, ranks, self.cap)
        taken = []
        for name, found in waiting.items():
            cut = sum(1 for message in found if message.offset() < ends.get(name, -1))
            taken.extend(found[:cut])
            self._waiting[name] = found[cut:]
        return taken

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
