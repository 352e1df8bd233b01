"""State buckets kept decoded in a Python worker between micro-batches.

Spark's Python workers outlive their tasks (``spark.python.worker.reuse``), so a bucket the
joiner operator decoded in one micro-batch can serve the next one without crossing from the
JVM again, being decompressed and unpickled. Spark's state store stays the only durable copy
and the source of truth; a cached bucket is used only when it provably equals the store's
committed value.

How that is proven: each write of a bucket to the store also writes a fresh random 64-bit
*stamp* beside it (a small value state of its own, so reading it costs one short call). A
call reads the stamp and uses the cached bucket only when the cached stamp is the same. A
task that Spark retries, a task that ran on the other worker, a restart of the query or of
the daemon, and a state that ``daemon reset`` or ``daemon rescale`` wrote all leave a stamp
this worker's entry does not have (or none), and the bucket is loaded from the store.

A call takes its bucket *out* of the cache (the engine changes it in place) and puts it back
only after its write to the store, with the stamp it wrote. A task that fails during the call
so leaves no entry; one that fails after its write, before Spark commits the state, leaves an
entry whose stamp the committed store does not hold: either way the next call loads.

Why stamps come from ``os.urandom`` and not :mod:`random`: Spark forks the workers from one
daemon process, and forked children share the parent's random state, so two workers would
draw the same stamps.

Memory is bounded by a byte budget per worker; the least recently used buckets go first, and
an evicted bucket costs only a load. A bucket's size is estimated, not measured: the length
of its pickle times :data:`DECODED_FACTOR`, a factor measured on the built-in joiners'
buckets (deep-sizing the objects would cost more than the load the cache saves).
"""

from __future__ import annotations

import os
from collections import OrderedDict
from collections.abc import Hashable
from dataclasses import dataclass

from daemon.operator.bucket_delta import Pending
from daemon.operator.state_format import Bucket

DECODED_FACTOR = 4
"""A decoded bucket's memory over its pickle's length: its keys' entries are tuples of
ints and pickled bytes in a dict, which cost more than their pickle (measured with
:mod:`tracemalloc`: 3.1 for a lookup bucket of 100 keys, 3.3 for one of 3,000), rounded up."""
DEFAULT_SHARE = 128
"""Without a setting, a worker's budget is this fraction of the machine's memory ...

Sized by the whole service's memory at 1,000,000 keys (``examples/tweet-views.toml``,
``daemon run`` alone, two workers on a 24 GiB machine): 3.31 GB without the cache, 4.06 GB
with a 768 MiB budget a worker (a thirty-second), 3.58 GB with 192 MiB (BENCHMARKS.md). A
worker may hold a copy of every bucket, so the budget counts once per worker."""
DEFAULT_CAP = 256 << 20
"""... up to this many bytes."""
EXECUTOR_SHARE = 4
"""With ``spark.executor.pyspark.memory`` set, a worker's budget is this fraction of it."""


def new_stamp() -> int:
    """A fresh stamp for a bucket's write: 64 random bits, as a signed long for Spark."""
    return int.from_bytes(os.urandom(8), "little", signed=True)


@dataclass
class CachedBucket:
    """A decoded bucket and what the store holds for it."""

    bucket: Bucket
    blob: bytes | None
    """The compressed bytes the store holds as the bucket's value (None: none stored): a
    call that changes the bucket writes it whole only when the new bytes differ, or to fold
    its deltas."""
    stamp: int
    """The stamp written with ``blob``."""
    size: int
    """Its estimated memory, bytes."""
    pending: Pending = Pending(0)
    """The deltas the store holds after ``blob`` (:mod:`daemon.operator.bucket_delta`)."""


class BucketCache:
    """Decoded buckets of one worker, least recently used first out (see module docstring).

    Args:
        budget: bytes the cached buckets may take together; a bucket larger than it is
            never kept.
    """

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self._entries: OrderedDict[Hashable, CachedBucket] = OrderedDict()
        self._bytes = 0

    def take(self, key: Hashable, stamp: int | None) -> CachedBucket | None:
        """The bucket cached under ``key`` if its stamp is ``stamp``, taken out of the cache.

        A stale entry is dropped. With ``stamp`` None (the store has none) nothing matches.
        """
        entry = self._entries.pop(key, None)
        if entry is None:
            return None
        self._bytes -= entry.size
        if stamp is None or entry.stamp != stamp:
            return None
        return entry

    def put(self, key: Hashable, entry: CachedBucket) -> None:
        """Keep ``entry`` as the most recently used, evicting the least recently used."""
        old = self._entries.pop(key, None)
        if old is not None:
            self._bytes -= old.size
        if entry.size > self.budget:
            return
        self._entries[key] = entry
        self._bytes += entry.size
        while self._bytes > self.budget:
            _, evicted = self._entries.popitem(last=False)
            self._bytes -= evicted.size

    @property
    def size(self) -> int:
        """Estimated bytes held."""
        return self._bytes

    def __len__(self) -> int:
        return len(self._entries)


def default_budget() -> int:
    """A worker's budget without a setting, from the memory it may use.

    A quarter of ``spark.executor.pyspark.memory`` where it is set (Spark tells its workers in
    ``PYSPARK_EXECUTOR_MEMORY_MB``), else a 128th of the machine's memory, at most
    256 MiB: on a 24 GiB machine with two workers, 192 MiB each.
    """
    limit = os.environ.get("PYSPARK_EXECUTOR_MEMORY_MB")
    if limit and limit.isdigit():
        return int(limit) * (1 << 20) // EXECUTOR_SHARE
    try:
        machine = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return DEFAULT_CAP // 4  # a platform without sysconf: a modest share
    return min(machine // DEFAULT_SHARE, DEFAULT_CAP)


_WORKER_CACHE: BucketCache | None = None


def worker_cache(budget: int | None) -> BucketCache:
    """The cache of the Python worker process, shared by every pipeline it serves.

    Args:
        budget: the pipeline's byte budget; None: :func:`default_budget`. The latest call's
            budget holds.
    """
    global _WORKER_CACHE  # noqa: PLW0603 - the one cache of this process, by design
    wanted = default_budget() if budget is None else budget
    if _WORKER_CACHE is None:
        _WORKER_CACHE = BucketCache(wanted)
    elif _WORKER_CACHE.budget != wanted:
        _WORKER_CACHE.budget = wanted
    return _WORKER_CACHE
