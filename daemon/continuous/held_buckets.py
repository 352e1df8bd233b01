"""A long batch's state buckets, held decoded in the task's Python worker.

A micro-batch's call loads its bucket from Spark's state store and writes it back
(:class:`~daemon.operator.bucket_store.BucketStore`); a long batch's sub-batches come ten a
second, so its buckets stay decoded in the worker for the whole long batch, and what changed
is written to the state store once, when it ends. The operator's calls load and save them
through the same interface; a bucket's timer is its earliest due key, which the task checks
at every sub-batch. A bucket the long batch has not loaded is due by the timer the last long
batch left it (:meth:`HeldBuckets.timers`): a key waiting for quiet processing time (a held
record, a state TTL) wakes when it is due, whether a record of its bucket comes or not.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable, Iterator
from typing import Any

from daemon.operator import state_compression
from daemon.operator.bucket_delta import Pending
from daemon.operator.bucket_store import Stored
from daemon.operator.stash_log import MemoryChunks, StashLog
from daemon.operator.state_format import Bucket, decode_bucket, encode_bucket

_NOTHING_STORED = Stored(None, None, 0, Pending(0))
Key = tuple[int, ...]
"""A bucket's grouping key, as Spark hands it to a call: ``(bucket,)``."""


class HeldBuckets:
    """The buckets a long batch's task has loaded, by key (see the module docstring).

    Args:
        stored: a bucket's blob as the state store holds it (:func:`frozen`; None: none),
            read the first time the long batch needs the bucket. None: the long batch
            starts with no state.
        timers: each stored bucket's timer, by label, as the last long batch left it.
    """

    def __init__(
        self,
        stored: Callable[[Key], bytes | None] | None = None,
        timers: dict[int, int] | None = None,
    ) -> None:
        self._held: dict[Key, tuple[Bucket, MemoryChunks]] = {}
        self._stored = stored
        self._timers = {(label,): at for label, at in (timers or {}).items()}
        self.loads: dict[str, int] = {}
        """Always empty: no load goes to the worker cache during the long batch."""

    def load(self, key: Any) -> tuple[Bucket, StashLog, Stored]:
        """The bucket and its stash log, from the store the first time the long batch asks."""
        held = self._held.get(key)
        if held is None:
            blob = None if self._stored is None else self._stored(key)
            held = self._held[key] = (Bucket(), MemoryChunks()) if blob is None else thawed(blob)
        bucket, chunks = held
        return bucket, StashLog(chunks, bucket.stash), _NOTHING_STORED

    def changed(self) -> Iterator[tuple[Key, bytes | None]]:
        """Each bucket the long batch changed, as the store is to hold it (None: empty)."""
        for key, (bucket, chunks) in self._held.items():
            if bucket.changed or bucket.touched:
                yield key, frozen(bucket, chunks) if bucket.keys else None

    def save(self, key: Any, bucket: Bucket, log: StashLog, stored: Stored) -> None:
        """Keep the call's stashed values; the bucket's timer is its earliest due key."""
        log.flush(bucket.keys)
        bucket.timer_ms = min(bucket.due.values(), default=None)

    def due(self, now: int) -> list[Key]:
        """The keys of the buckets with a key due at ``now``, loaded or not, in order."""
        held = self._held
        due = {key for key, (bucket, _) in held.items() if _due(bucket, now)}
        due.update(key for key, at in self._timers.items() if at <= now and key not in held)
        return sorted(due)

    def timers(self) -> dict[int, int]:
        """Each bucket's timer, by label, as the next long batch is to find it."""
        found = {key[0]: at for key, at in self._timers.items() if key not in self._held}
        for key, (bucket, _) in self._held.items():
            if bucket.timer_ms is not None and bucket.keys:
                found[key[0]] = bucket.timer_ms
        return dict(sorted(found.items()))

    def __iter__(self) -> Iterator[Key]:
        return iter(self._held)


def _due(bucket: Bucket, now: int) -> bool:
    return bucket.timer_ms is not None and bucket.timer_ms <= now


def frozen(bucket: Bucket, chunks: MemoryChunks) -> bytes:
    """A held bucket as one blob for the state store: its value and its stash chunks."""
    data = (encode_bucket(bucket), [chunk for (chunk,) in chunks.items])
    return state_compression.compress(pickle.dumps(data, protocol=pickle.HIGHEST_PROTOCOL))


def thawed(blob: bytes) -> tuple[Bucket, MemoryChunks]:
    """A bucket and its stash chunks back from :func:`frozen`'s blob."""
    value, chunks = _opened(blob)
    return decode_bucket(value), MemoryChunks((chunk,) for chunk in chunks)


def stored_parts(blob: bytes) -> tuple[bytes, list[bytes]]:
    """A :func:`frozen` blob's value, as a micro-batch checkpoint stores it, and chunks."""
    value, chunks = _opened(blob)
    return state_compression.compress(value), chunks


def _opened(blob: bytes) -> tuple[bytes, list[bytes]]:
    """A :func:`frozen` blob's parts: the bucket's value, pickled, and its stash chunks."""
    value, chunks = pickle.loads(state_compression.decompress(blob))  # noqa: S301 - our own state
    return value, list(chunks)
