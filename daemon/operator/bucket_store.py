"""A state bucket in Spark's state store: its state variables, loading it, writing it back.

Why buckets: every state-store call is a round trip between the Python worker and the JVM,
and per-key calls (set the key, read, write) cost about a millisecond per key and
micro-batch, more than the joining. A bucket is one value holding its keys' states, each
pickled on its own, so a micro-batch reads and writes each touched bucket once and unpickles
only the keys it has rows for; the bucket is stored as plain data in enrichd's state format
(:mod:`daemon.operator.state_format`), compressed (:mod:`daemon.operator.state_compression`).
Values a joiner keeps in a :class:`~daemon.plugin.stash.Stash` are not in the bucket: they are
appended to the bucket's stash log once, and read only when looked at
(:mod:`daemon.operator.stash_log`).

A :class:`BucketStore` is the joiner processor's (:mod:`daemon.operator.processor`) keeper of
its buckets: it holds the state variables (the bucket, its stash chunks, its deltas, its
stamp, declared by :mod:`daemon.operator.state_vars`), loads a call's bucket (from the worker
cache, :mod:`daemon.operator.bucket_cache`, while the store's stamp says the cached copy is the
committed one, else from the store with its deltas, :mod:`daemon.operator.bucket_delta`), and
writes it back once per call: nothing
when nothing changed, a delta of the keys that did, or the bucket whole, with the one
processing-time timer the bucket holds.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Protocol

from pyspark.sql.streaming import StatefulProcessorHandle

from daemon.operator import bucket_delta, state_compression
from daemon.operator.bucket_cache import (
    DECODED_FACTOR,
    BucketCache,
    CachedBucket,
    new_stamp,
    worker_cache,
)
from daemon.operator.bucket_delta import Pending
from daemon.operator.spec import OperatorPlan
from daemon.operator.stash_log import StashLog
from daemon.operator.state_format import Bucket, encode_bucket
from daemon.operator.state_vars import StateVariables
from daemon.sink.task_output import running_task


@dataclass(frozen=True)
class Stored:
    """What the state store holds for a call's bucket, as its load found it."""

    blob: bytes | None
    """The stored, compressed bucket (None: none stored)."""
    stamp: int | None
    """The stored stamp (None: none, or the cache is off)."""
    size: int
    """The decoded bucket's estimated memory (:mod:`.bucket_cache`)."""
    pending: Pending
    """The deltas the store holds after ``blob`` (:mod:`.bucket_delta`)."""


class Buckets(Protocol):
    """Where a processor's calls load their bucket from and write it back to."""

    loads: dict[str, int]
    """Loads since the counts last took them, by the worker cache's outcome."""

    def load(self, key: Any) -> tuple[Bucket, StashLog, Stored]:
        """The bucket, its stash log for this call, and what the store holds for it."""

    def save(self, key: Any, bucket: Bucket, log: StashLog, stored: Stored) -> None:
        """Write the bucket back after the call; keep one timer (``bucket.timer_ms``)."""


class BucketStore:
    """The state variables of a processor's buckets, and the worker cache's copies of them.

    Made on the executor, with the variables the processor's ``init`` declared.
    """

    def __init__(
        self, handle: StatefulProcessorHandle, variables: StateVariables, plan: OperatorPlan
    ) -> None:
        self.handle = handle
        self.state = variables.state
        self.stash_chunks = variables.stash_chunks
        self.stamps = variables.stamps
        self.deltas = variables.deltas
        self._deltas_on = plan.state_deltas
        self._cache: BucketCache | None = None
        self._cache_space = ""
        self.loads: dict[str, int] = {}
        """Loads of stored buckets since the counts last took them, by the cache's outcome:
        ``hit`` (the worker's copy was current) or ``miss`` (read from the store); a bucket
        the store has no stamp for (none stored yet, or stored with the cache off) is not
        counted."""
        if plan.state_cache:
            self._cache = worker_cache(plan.state_cache_bytes)
            # Cached buckets are kept apart by query; the stamps decide what is current.
            self._cache_space = running_task()[2]

    def load(self, key: Any) -> tuple[Bucket, StashLog, Stored]:
        """The bucket, its stash log for this call, and what the store holds for it.

        With the worker cache on, the bucket comes from the cache when the store's stamp
        says the cached copy is the committed one (:mod:`daemon.operator.bucket_cache`); it
        is taken out of the cache meanwhile, and :meth:`save` puts it back.
        """
        stamp = None
        if self._cache is not None:
            row = self.stamps.get()
            stamp = row[0] if row else None
            cached = self._cache.take((self._cache_space, key), stamp)
            if stamp is not None:
                outcome = "miss" if cached is None else "hit"
                self.loads[outcome] = self.loads.get(outcome, 0) + 1
            if cached is not None:
                stored = Stored(cached.blob, cached.stamp, cached.size, cached.pending)
                return cached.bucket, StashLog(self.stash_chunks, cached.bucket.stash), stored
        row = self.state.get()
        blob = row[0] if row else None
        # Read whether deltas are on or not: a bucket keeps those written while they were.
        deltas = [delta for (delta,) in self.deltas.get()] if blob else []
        loaded = bucket_delta.load(blob, deltas)
        bucket = loaded.bucket
        stored = Stored(blob, stamp, loaded.pickled * DECODED_FACTOR, loaded.pending)
        return bucket, StashLog(self.stash_chunks, bucket.stash), stored

    def save(self, key: Any, bucket: Bucket, log: StashLog, stored: Stored) -> None:
        """Write the bucket back unless the store holds it already; keep one timer.

        The timer kept is ``bucket.timer_ms`` after the call (None: none).

        The timer is at or before the earliest key's due time: it moves only to an earlier
        time. Keys that a batch touches are due later than before (a window key a minute after
        its last record), and moving the timer after them cost two calls to the JVM per
        bucket in nearly every batch, about a fifth of a window task; a timer that fires
        before any key is due costs a read of the bucket and a new timer, once in a while.

        A call that changed a few keys appends them as a delta (:mod:`.bucket_delta`), unless
        the deltas have grown past their share of the bucket: then it writes the bucket whole
        and clears them.

        A call that changed no key (a lookup's stream records read the table value and leave
        it) writes nothing: writing the same bytes again would cost a round trip to the JVM
        with the whole blob, and the state store a changelog entry. Nor does it encode the
        bucket to find that out, which at a million keys cost a seventh of a lookup's call: the
        engine core marks the bucket ``changed`` when it changes a key's entry or due time,
        and the stash log's counts and the timer are compared here.

        With the worker cache on, each write comes with a new stamp, and the bucket goes back
        into the cache with it only after both writes (see :mod:`.bucket_cache`).
        """
        counts = replace(bucket.stash)
        log.flush(bucket.keys)
        timer = bucket.timer_ms
        earliest = min(bucket.due.values(), default=None)
        if bucket.timer_ms is not None and (earliest is None or earliest < bucket.timer_ms):
            self.handle.deleteTimer(bucket.timer_ms)
            bucket.timer_ms = None
        if bucket.timer_ms is None and earliest is not None:
            self.handle.registerTimer(earliest)
            bucket.timer_ms = earliest
        blob, size, pending = stored.blob, stored.size, stored.pending
        if bucket.changed or bucket.timer_ms != timer or bucket.stash != counts:
            bucket.changed = False  # what is kept below is what the store holds
            if not bucket.keys:
                bucket.touched.clear()
                if blob is not None:
                    self.state.clear()
                    if pending.count:
                        self.deltas.clear()
                    if self._cache is not None:
                        self.stamps.clear()
                return  # an empty bucket is not worth a cache entry
            if (
                self._deltas_on
                and blob is not None
                and pending.may_admit(len(bucket.touched), len(bucket.keys))
            ):
                delta, pickled_size = bucket_delta.delta_of(bucket, pending)
                if pending.admits(pickled_size):
                    self.deltas.appendValue((delta,))
                    bucket.touched.clear()
                    if self._cache is not None:
                        size += pickled_size * DECODED_FACTOR
                        self._keep(key, bucket, blob, size, pending.after(pickled_size), None)
                    return
            bucket.touched.clear()
            pickled = encode_bucket(bucket)
            new = state_compression.compress(pickled)
            size = len(pickled) * DECODED_FACTOR
            if new != blob or pending.count:
                self.state.update((new,))
                if pending.count:
                    self.deltas.clear()
                blob, pending = new, Pending(len(pickled))
                if self._cache is not None:
                    self._keep(key, bucket, blob, size, pending, None)
                return
        if self._cache is not None and blob is not None:
            self._keep(key, bucket, blob, size, pending, stored.stamp)

    def _keep(
        self,
        key: Any,
        bucket: Bucket,
        blob: bytes,
        size: int,
        pending: Pending,
        stamp: int | None,
    ) -> None:
        """Put the bucket back into the worker cache, under the stamp the store holds.

        ``stamp`` None: the store's value was just written (or never stamped, as in a
        checkpoint written before the cache or with it off), so a new stamp is written first.
        """
        assert self._cache is not None  # noqa: S101 - only called with the cache on
        if stamp is None:
            stamp = new_stamp()
            self.stamps.update((stamp,))
        self._cache.put((self._cache_space, key), CachedBucket(bucket, blob, stamp, size, pending))
