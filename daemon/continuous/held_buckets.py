"""A long batch's state buckets, held decoded in the task's Python worker.

A micro-batch's call loads its bucket from Spark's state store and writes it back
(:class:`~daemon.operator.bucket_store.BucketStore`); a long batch's sub-batches come ten a
second, so its buckets stay decoded in the worker for the whole long batch, and what changed
is written to the state store once, when it ends. The operator's calls load and save them
through the same interface; a bucket's timer is its earliest due key, which the task checks
at every sub-batch. A bucket the long batch has not loaded is due by the timer the last long
batch left it (:meth:`HeldBuckets.timers`): a key waiting for quiet processing time (a held
record, a state TTL) wakes when it is due, whether a record of its bucket comes or not.

What the buckets hold is estimated as they change (:attr:`HeldBuckets.held_bytes`), so that
the task can end its long batch early before the worker holds more than its budget
(``held_state_budget``). The estimate is the bucket cache's (:mod:`daemon.operator.bucket_cache`):
a bucket's decoded keys cost :data:`DECODED_FACTOR` times their pickle's length. A bucket
counts the length of its pickled value when it is loaded; each change of a key then adds
what its entry's pickle grew or shrank by (:attr:`Bucket.grown`, which the engine core keeps
from the lengths of the entries it replaces, so a key updated a thousand times counts once);
its stash chunks, held as the bytes the store holds, count their length. Why not measure:
walking a million keys' objects at every sub-batch would cost more than the sub-batch, and
the lengths are known as the keys change. Not counted: the ``due`` map's small entries, and
what a call holds while it runs (a fan-out's stashed values, read for it and dropped).
"""

from __future__ import annotations

import pickle
from collections.abc import Callable, Iterator
from typing import Any

from daemon.operator import state_compression
from daemon.operator.bucket_cache import DECODED_FACTOR
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
        self.held_bytes = 0
        """About how many bytes of the worker's memory the held buckets take (see the
        module docstring for how it is estimated)."""
        self._chunk_bytes: dict[Key, int] = {}
        """Each held bucket's stash chunks' bytes, as last counted in :attr:`held_bytes`."""

    def load(self, key: Any) -> tuple[Bucket, StashLog, Stored]:
        """The bucket and its stash log, from the store the first time the long batch asks."""
        held = self._held.get(key)
        if held is None:
            blob = None if self._stored is None else self._stored(key)
            if blob is None:
                held = Bucket(), MemoryChunks()
            else:
                value, stored = _opened(blob)
                held = decode_bucket(value), MemoryChunks((chunk,) for chunk in stored)
                self.held_bytes += DECODED_FACTOR * len(value)
            self._held[key] = held
            self._count_chunks(key, held[1])
        bucket, chunks = held
        return bucket, StashLog(chunks, bucket.stash), _NOTHING_STORED

    def changed(self) -> Iterator[tuple[Key, bytes | None]]:
        """Each bucket the long batch changed, as the store is to hold it (None: empty)."""
        for key, (bucket, chunks) in self._held.items():
            if bucket.changed or bucket.touched:
                yield key, frozen(bucket, chunks) if bucket.keys else None

    def save(self, key: Any, bucket: Bucket, log: StashLog, stored: Stored) -> None:
        """Keep the call's stashed values; the bucket's timer is its earliest due key.

        What the call grew or shrank the bucket by goes into :attr:`held_bytes`.
        """
        log.flush(bucket.keys)
        bucket.timer_ms = min(bucket.due.values(), default=None)
        self.held_bytes += DECODED_FACTOR * bucket.grown
        bucket.grown = 0
        self._count_chunks(key, self._held[key][1])

    def _count_chunks(self, key: Key, chunks: MemoryChunks) -> None:
        self.held_bytes += chunks.size - self._chunk_bytes.get(key, 0)
        self._chunk_bytes[key] = chunks.size

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


def stored_parts(blob: bytes) -> tuple[bytes, list[bytes]]:
    """A :func:`frozen` blob's value, as a micro-batch checkpoint stores it, and chunks."""
    value, chunks = _opened(blob)
    return state_compression.compress(value), chunks


def _opened(blob: bytes) -> tuple[bytes, list[bytes]]:
    """A :func:`frozen` blob's parts: the bucket's value, pickled, and its stash chunks."""
    value, chunks = pickle.loads(state_compression.decompress(blob))  # noqa: S301 - our own state
    return value, list(chunks)
