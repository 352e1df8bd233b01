"""A key's versioned history and the events answered from it, shared by ``asof`` and ``lookup``.

How it works: one side of the join is a history of versions, each valid from its event time
until the next (``asof``'s right records, a versioned ``lookup``'s table rows, where a
tombstone is a version whose value is None). :class:`Versions` keeps them in event-time
order and answers "which version was current at time t". The other side's events (``asof``'s
left events, ``lookup``'s stream records) are answered from it and, while a late version can
still change their answer, kept as :class:`Kept` with the answer and its revision number.
When versions have been added, :func:`rejoin` joins a kept event again, and says whether
its answer changed, so the joiner emits the next revision.

Example:
    >>> versions = Versions([], [])
    >>> versions.add(10, "calm")
    >>> kept = Kept(20, {"pick": "tea"}, versions.at(20, inclusive=True), 0)
    >>> versions.add(15, "grumpy")  # a late version, valid from 15
    >>> rejoin(kept, versions, changed_from=15, inclusive=True), kept.answer, kept.revision
    (True, 'grumpy', 1)
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from dataclasses import dataclass
from typing import Any

from daemon.plugin import DeadLetter, Headers, InputRecord, JoinerContext, pickled_fields


@dataclass(slots=True)
class Versions:
    """A view over a key's history: parallel lists of event times and values, by event time.

    The lists belong to the joiner's state (the view is made when needed and not stored), so
    the state pickles as plain lists. Versions with equal event times stay in arrival order,
    so the last to arrive is the one a lookup at that time finds.

    ``headers``, under ``headers_from = "inputs"`` only: a third parallel list, each version's
    record's carried headers (None: none), which an answer joined with it carries; None
    otherwise, so a state that does not carry them keeps its bytes.
    """

    times: list[int]
    values: list[Any]
    headers: list[Headers | None] | None = None

    def add(self, time: int, value: Any, headers: Headers | None = None) -> None:
        """Add the version valid from ``time``, after any version of the same time."""
        at = bisect_right(self.times, time)
        self.times.insert(at, time)
        self.values.insert(at, value)
        if self.headers is not None:
            self.headers.insert(at, headers)

    def headers_at(self, time: int, *, inclusive: bool) -> Headers | None:
        """The carried headers of the version :meth:`at` finds (None: none, or not kept)."""
        if self.headers is None:
            return None
        find = bisect_right if inclusive else bisect_left
        before = find(self.times, time)
        return self.headers[before - 1] if before else None

    def at(self, time: int, *, inclusive: bool) -> Any:
        """The value current at ``time``.

        That is the value of the latest version before it (or at it, if ``inclusive``), or
        None when there is none.
        """
        find = bisect_right if inclusive else bisect_left
        before = find(self.times, time)
        return self.values[before - 1] if before else None

    def forget_before(self, cutoff: int) -> None:
        """Drop versions older than ``cutoff`` but the one current at it.

        A lookup at any time from ``cutoff`` on gives the same answer as before.
        """
        first_kept = bisect_left(self.times, cutoff)
        if first_kept > 1:
            del self.times[: first_kept - 1]
            del self.values[: first_kept - 1]
            if self.headers is not None:
                del self.headers[: first_kept - 1]

    def drop_first(self) -> None:
        """Forget the oldest version."""
        del self.times[0], self.values[0]
        if self.headers is not None:
            del self.headers[0]


def headers_of(times: list[int], headers: list[Headers | None] | None) -> list[Headers | None]:
    """A history's list of headers, to keep them from now on (``headers_from = "inputs"``).

    ``headers``: the list the state holds, or None when it kept none so far (a new state, or
    one written before the pipeline opted in): then one made for the versions it has, which
    have none.
    """
    return [None] * len(times) if headers is None else headers


@dataclass(slots=True)
class Kept:
    """An event kept after its answer, so that a late version can revise it.

    Attributes:
        event_time: the event's time, at which its answer is looked up.
        value: the event's record.
        answer: the version's value its latest revision was joined with (None: none).
        revision: the number of its latest revision (0: the first answer).
        key: the output key its revisions are written under, where the joiner keeps it here
            (``lookup``: the stream record's Kafka key); None for ``asof``, which keys its
            kept events by identity.
        headers: the event's headers, which its revisions carry (``InputRecord.headers``).
    """

    event_time: int
    value: dict[str, Any]
    answer: Any
    revision: int
    key: bytes | None = None
    headers: Headers | None = None

    def __reduce__(self) -> tuple[Any, ...]:
        # Pickled with the key's state every micro-batch: as its fields, not through a
        # slotted dataclass's Python-level __getstate__ (see InputRecord.__reduce__). The
        # headers only when there are some: a state without them keeps its bytes, and one
        # kept before events had headers loads with none.
        fields = (self.event_time, self.value, self.answer, self.revision, self.key)
        return (Kept, pickled_fields(fields, self.headers))


def rejoin(kept: Kept, versions: Versions, *, changed_from: int, inclusive: bool) -> bool:
    """Join a kept event again after versions from ``changed_from`` on were added.

    An event before ``changed_from`` (or at it, unless ``inclusive``) cannot have a new
    answer and is skipped without a lookup. A changed answer (compared by value) becomes the
    event's answer, with the next revision number.

    Returns:
        Whether the answer changed.
    """
    if kept.event_time < changed_from or (kept.event_time == changed_from and not inclusive):
        return False
    answer = versions.at(kept.event_time, inclusive=inclusive)
    if answer == kept.answer:
        return False
    kept.answer, kept.revision = answer, kept.revision + 1
    return True


def too_old(
    record: InputRecord,
    key: str,
    stream_time: int | None,
    retention: int,
    history: str,
    ctx: JoinerContext,
) -> DeadLetter | None:
    """A ``LateRecord`` dead letter for a record older than the history kept, else None.

    A record before ``stream_time - retention`` needs, or would change, history that is gone;
    it is counted as ``late_ROLE``. ``history`` names that history in the reason (``right``,
    ``table``).
    """
    if stream_time is None or record.event_time >= stream_time - retention:
        return None
    cutoff = stream_time - retention
    ctx.count(f"late_{record.role}")
    return DeadLetter(
        record,
        f"{record.role} record of key {key!r} at event time {record.event_time} is older than "
        f"the {history} history kept (stream time {stream_time} - history_retention "
        f"{retention} ms = {cutoff})",
        "LateRecord",
    )
