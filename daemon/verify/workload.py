"""Workloads with a known answer, one per built-in joiner, made from a seed.

Each workload is a list of input records in arrival order, for the joiner's example pipeline
(``examples/``): joins, updates that fan out or revise, tombstones, records late by event
time, and poison (bytes that are no Avro record, tombstones that cannot be routed, records
without a join key). Kafka timestamps are distinct and increasing, one millisecond apart, so
the arrival order is the production order and the whole output, not only its latest record
per key, is the same for every cut into micro-batches (docs/semantics.md, Apply order): the
answer computed from the workload in one pass is the answer a pipeline killed and restarted
anywhere must give. Every record carries a *scenario*, the reason it is in the workload, and
the report counts each output and dead letter under the scenario of the record that made it.

Example:
    >>> work = build("comap", records=40, seed=7, start_ms=1_000)
    >>> len(work.items), work.items[0].timestamp, work.items[-1].timestamp
    (40, 1000, 1039)
    >>> sorted({item.scenario for item in work.items})[:3]
    ['poison record', 'tweet joins its user', 'tweet updated']
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

POISON = b"\xff" * 12
"""Bytes no record of the example schemas decodes from: its first field (a long, or a string's
length) is a varint that never ends."""

EXAMPLES = {
    "comap": "tweet-views.toml",
    "lookup": "clicks-per-region.toml",
    "window": "window-join.toml",
    "asof": "recommendations.toml",
}
"""The example pipeline each joiner's workload runs through."""

OPTIONS = {"window": {"idle_timeout": "7d"}}
"""Options that differ from the example's: processing-time wake-ups would make the window
joiner's answer depend on how long a restart took, so its quiet keys are never woken within a
run; the end of input closes every window instead."""


@dataclass(frozen=True)
class Item:
    """One input record of a workload.

    Attributes:
        role: the joiner's role of the input it goes to.
        scenario: why it is in the workload, as the report names it.
        key: its Kafka key, as in replay files (a string or number; None for no key).
        value: its value (None: a tombstone) unless ``poison`` is set.
        timestamp: its Kafka timestamp, epoch milliseconds.
        poison: bytes produced instead of an encoded value.
    """

    role: str
    scenario: str
    key: Any
    value: dict[str, Any] | None
    timestamp: int
    poison: bytes | None = None

    def line(self) -> dict[str, Any]:
        """The record as a replay input line."""
        return {"key": self.key, "value": self.value, "timestamp": self.timestamp}


@dataclass
class Workload:
    """A joiner's workload: its records in arrival order, and where each sits per role."""

    joiner: str
    items: list[Item] = field(default_factory=list)

    def inputs(self) -> tuple[dict[str, list[dict[str, Any]]], dict[tuple[str, int], int]]:
        """The decodable records per role as replay lines, and each line's item index.

        Returns:
            Lines per role (what :func:`daemon.testing.run_joiner` takes), and a map from
            ``(role, position in its role's lines)`` to the index in :attr:`items`.
        """
        lines: dict[str, list[dict[str, Any]]] = {}
        where: dict[tuple[str, int], int] = {}
        for index, item in enumerate(self.items):
            if item.poison is not None:
                continue
            role_lines = lines.setdefault(item.role, [])
            where[(item.role, len(role_lines))] = index
            role_lines.append(item.line())
        return lines, where


class _Maker:
    """Appends items one millisecond apart."""

    def __init__(self, joiner: str, start_ms: int, seed: int) -> None:
        self.work = Workload(joiner)
        self.now = start_ms
        self.rng = random.Random(f"{joiner}/{seed}")  # noqa: S311 - a workload, not a secret

    def add(self, role: str, scenario: str, key: Any, value: dict[str, Any] | None) -> None:
        self.work.items.append(Item(role, scenario, key, value, self.now))
        self.now += 1

    def poison(self, role: str) -> None:
        self.work.items.append(Item(role, "poison record", None, None, self.now, POISON))
        self.now += 1


def _comap(make: _Maker, records: int) -> None:
    rng = make.rng
    users = max(3, records // 12)
    tweets: list[int] = []
    known: set[int] = set()

    def user(i: int, version: int) -> dict[str, Any]:
        return {"id": i, "name": f"user {i} v{version}", "avatar": None, "updated_at": make.now}

    while len(make.work.items) < records:
        roll = rng.random()
        author = rng.randrange(users)
        if roll < 0.05:
            make.poison(rng.choice(("one", "many")))
        elif roll < 0.07 and tweets:  # a many-side tombstone cannot reach its author's state
            make.add("many", "unroutable tombstone", rng.choice(tweets), None)
        elif roll < 0.17:
            scenario = "user update fans out" if author in known else "user arrives after tweets"
            make.add("one", scenario, author, user(author, len(make.work.items)))
            known.add(author)
        elif roll < 0.21 and known:
            gone = rng.choice(sorted(known))
            make.add("one", "user deleted", gone, None)
            known.discard(gone)
        elif roll < 0.27 and tweets:
            tweet = rng.choice(tweets)
            value = {"id": tweet, "author_id": author, "content": f"edited at {make.now}"}
            make.add("many", "tweet updated", tweet, value)
        else:
            tweet = 1000 + len(make.work.items)
            tweets.append(tweet)
            value = {"id": tweet, "author_id": author, "content": f"tweet {tweet}"}
            make.add("many", "tweet joins its user", tweet, value)


def _lookup(make: _Maker, records: int) -> None:
    rng = make.rng
    users = [f"u{i}" for i in range(max(3, records // 15))]
    regions = ("north", "south", "east", "west")
    placed: set[str] = set()
    while len(make.work.items) < records:
        roll = rng.random()
        user = rng.choice(users)
        if roll < 0.04:
            make.poison(rng.choice(("stream", "table")))
        elif roll < 0.06:  # a click tombstone: only table tombstones route by key
            make.add("stream", "unroutable tombstone", f"c{len(make.work.items)}", None)
        elif roll < 0.08:
            click = {"id": f"c{len(make.work.items)}", "user": None, "clicks": 1}
            make.add("stream", "click without a user", click["id"], click)
        elif roll < 0.18:
            scenario = "region moved" if user in placed else "region set"
            make.add("table", scenario, user, {"user": user, "region": rng.choice(regions)})
            placed.add(user)
        elif roll < 0.21 and placed:
            gone = rng.choice(sorted(placed))
            make.add("table", "region deleted", gone, None)
            placed.discard(gone)
        else:
            click = {"id": f"c{len(make.work.items)}", "user": user, "clicks": rng.randint(1, 5)}
            make.add("stream", "click enriched", click["id"], click)


def _window(make: _Maker, records: int) -> None:
    rng = make.rng
    keys = max(2, records // 25)
    at = make.now  # event time, moving on by 0-3 s a record
    while len(make.work.items) < records:
        roll = rng.random()
        k = rng.randrange(keys)
        side = rng.choice(("left", "right"))
        at += rng.randrange(3000)
        if roll < 0.04:
            make.poison(side)
        elif roll < 0.06:
            make.add(side, "unroutable tombstone", k, None)
        elif roll < 0.12:  # past window (10 s) and grace (2 s) behind the key
            value = {"k": k, "v": f"late {make.now}", "at": at - 60_000}
            make.add(side, "record later than the grace", k, value)
        elif roll < 0.20:
            value = {"k": k, "v": f"slightly late {make.now}", "at": at - 4_000}
            make.add(side, "record late within the window", k, value)
        else:
            make.add(side, "pair within the window", k, {"k": k, "v": f"e{make.now}", "at": at})


def _asof(make: _Maker, records: int) -> None:
    rng = make.rng
    people = [f"c{i}" for i in range(max(2, records // 25))]
    moods = ("calm", "busy", "happy", "tired")
    at = make.now  # event time, moving on by 0-4 s a record
    while len(make.work.items) < records:
        roll = rng.random()
        who = rng.choice(people)
        at += rng.randrange(4000)
        if roll < 0.04:
            make.poison(rng.choice(("left", "right")))
        elif roll < 0.06:
            make.add(rng.choice(("left", "right")), "unroutable tombstone", who, None)
        elif roll < 0.25:
            mood = {"name": who, "event_time": at, "ingestion_time": make.now}
            make.add("right", "mood changes", who, {**mood, "mood": rng.choice(moods)})
        elif roll < 0.32:  # within the re-join horizon (10 min): revises earlier answers
            mood = {"name": who, "event_time": at - 90_000, "ingestion_time": make.now}
            make.add("right", "late mood revises", who, {**mood, "mood": rng.choice(moods)})
        elif roll < 0.35:  # past the history retention (1 h): a dead letter
            value = {"consultant": who, "event_time": at - 7_200_000, "ingestion_time": make.now}
            make.add("left", "recommendation past retention", who, {**value, "recommendation": "x"})
        else:
            value = {"consultant": who, "event_time": at, "ingestion_time": make.now}
            value["recommendation"] = f"r{make.now}"
            make.add("left", "recommendation joins mood", who, value)


_BUILDERS: dict[str, Callable[[_Maker, int], None]] = {
    "comap": _comap,
    "lookup": _lookup,
    "window": _window,
    "asof": _asof,
}


def build(joiner: str, *, records: int, seed: int, start_ms: int) -> Workload:
    """The workload of ``joiner``: ``records`` input records from ``start_ms`` on.

    Args:
        joiner: one of :data:`EXAMPLES`.
        records: how many input records (the end-of-input markers come on top).
        seed: the same seed gives the same workload.
        start_ms: the Kafka timestamp of the first record.
    """
    make = _Maker(joiner, start_ms, seed)
    _BUILDERS[joiner](make, records)
    return make.work
