"""What ``daemon state`` prints: one key's state, or a summary of every bucket.

Times: ``event_time`` is the newest event time of a micro-batch's records that changed the
key's state (a record that left the state as it was, such as a lookup's stream record, does
not count); a bucket's oldest and newest event times are the smallest and largest of its
keys'. ``stream_time`` is the key's latest event time as its wake-ups count it (joiners that
wake quiet keys only), ``END_OF_TIME`` once its end of input came. Processing times
(``last_record_ms``, ``updated_ms``, ``due_ms``) are the daemon's clock.

State TTL: with the joiner's ``state_ttl``, a key's state expires that long after
``updated_ms`` (``expires_ms``). A key past it may still be stored until its bucket's timer
fires in a micro-batch; it is shown with ``"expired": true``, since the joiner no longer
sees it: to a later lookup its row is a tombstone.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from daemon.operator.state_format import (
    EVENT_TIME,
    LAST_MS,
    STATE,
    STREAM_TIME,
    UPDATED_MS,
    decode_portable,
)
from daemon.plugin.joiner import END_OF_TIME
from daemon.state.reader import StoredBucket
from daemon.state.render import iso_ms, to_json


@dataclass(frozen=True)
class Expiry:
    """The pipeline's state TTL (None: none) and the time the command looks at the state."""

    ttl_ms: int | None = None
    now_ms: int = 0

    def expires_ms(self, updated_ms: int) -> int | None:
        """When a key last changed at ``updated_ms`` expires; None: never, or not yet known.

        A key stored while the pipeline had no TTL (``updated_ms`` 0) counts its TTL from
        its next change, as the engine does.
        """
        if self.ttl_ms is None or not updated_ms:
            return None
        return updated_ms + self.ttl_ms

    def expired(self, updated_ms: int) -> bool:
        """Whether the joiner no longer sees a key last changed at ``updated_ms``."""
        expires = self.expires_ms(updated_ms)
        return expires is not None and expires <= self.now_ms


def key_view(stored: StoredBucket, key: str, expiry: Expiry) -> dict[str, Any] | None:
    """Everything the bucket holds for ``key``, decoded; None when it holds nothing for it."""
    bucket = stored.bucket
    entry = bucket.keys.get(key)
    if entry is None:
        return None
    state = stored.log().loads(key, entry[STATE])
    clock = entry[STREAM_TIME], entry[LAST_MS], entry[UPDATED_MS], entry[EVENT_TIME]
    return _view(key, stored.label, clock, bucket.due.get(key), state, expiry)


def seeded_key_view(label: int, key: str, entry: bytes, expiry: Expiry) -> dict[str, Any]:
    """:func:`key_view` of a key in a seed, not yet applied (``daemon.state.seed``)."""
    clock, due, state = decode_portable(entry)
    return _view(key, label, clock, due, state, expiry)


def _view(
    key: str,
    label: int,
    clock: tuple[int, int, int, int],
    due: int | None,
    state: Any,
    expiry: Expiry,
) -> dict[str, Any]:
    stream_time, last_ms, updated_ms, event_time = clock
    return {
        "key": key,
        "bucket": label,
        "event_time": iso_ms(event_time or None),
        "ended": stream_time == END_OF_TIME,
        "stream_time": stream_time or None,
        "last_record_ms": last_ms or None,
        "updated_ms": updated_ms or None,
        "expires_ms": expiry.expires_ms(updated_ms),
        "expired": expiry.expired(updated_ms),
        "due_ms": due,
        "state": to_json(state),
    }


def bucket_summary(stored: StoredBucket, chunk_bytes: int, expiry: Expiry) -> dict[str, Any]:
    """A bucket's keys, bytes (its value, deltas and stash log's chunks, as stored) and times."""
    bucket = stored.bucket
    entries = bucket.keys.values()
    clocks = [(e[STREAM_TIME], e[LAST_MS], e[UPDATED_MS], e[EVENT_TIME]) for e in entries]
    return _bucket(stored.label, stored.size + chunk_bytes, bucket.stash.live, clocks, expiry)


def seeded_bucket_summary(label: int, entries: list[bytes], expiry: Expiry) -> dict[str, Any]:
    """:func:`bucket_summary` of a bucket in a seed, not yet applied; bytes are its entries'."""
    clocks = [decode_portable(entry)[0] for entry in entries]
    return _bucket(label, sum(map(len, entries)), None, clocks, expiry)


def _bucket(
    label: int,
    size: int,
    stashed: int | None,
    clocks: list[tuple[int, int, int, int]],
    expiry: Expiry,
) -> dict[str, Any]:
    times = [clock[3] for clock in clocks if clock[3]]
    return {
        "bucket": label,
        "keys": len(clocks),
        "bytes": size,
        "stashed_values": stashed,
        "ended_keys": sum(clock[0] == END_OF_TIME for clock in clocks),
        "expired_keys": sum(expiry.expired(clock[2]) for clock in clocks),
        "oldest_event_time": iso_ms(min(times, default=None)),
        "newest_event_time": iso_ms(max(times, default=None)),
    }


def summary(buckets: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """Totals over :func:`bucket_summary` results, with the buckets in label order."""
    listed = sorted(buckets, key=lambda item: int(item["bucket"]))
    oldest = [b["oldest_event_time"] for b in listed if b["oldest_event_time"]]
    newest = [b["newest_event_time"] for b in listed if b["newest_event_time"]]
    return {
        "keys": sum(b["keys"] for b in listed),
        "expired_keys": sum(b["expired_keys"] for b in listed),
        "bytes": sum(b["bytes"] for b in listed),
        "buckets_in_use": len(listed),
        "oldest_event_time": min(oldest, default=None),
        "newest_event_time": max(newest, default=None),
        "buckets": listed,
    }
