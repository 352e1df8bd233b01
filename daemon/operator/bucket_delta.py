"""Writing a state bucket's changed keys only: deltas after its value, folded now and then.

A bucket is one value in Spark's state store, its keys' entries pickled in it. A call that
changes a few of its keys would otherwise pickle, compress and write all of them: at
1,000,000 keys (31,250 a bucket) a lookup call with one table update cost 58 ms against 3 ms
without. Instead, the call appends one *delta* to the bucket's list state ``bucket_delta``:
the entries of the keys it changed (each key's state pickled on its own, as the bucket holds
it), the keys it removed, the bucket's timer and stash counts
(:func:`~daemon.operator.state_format.encode_delta`). The stored bucket is its value with its
deltas applied in order.

When the deltas grow past :data:`MAX_SHARE` of the value's bytes (or :data:`SMALL`, if
that is more), or past :data:`MAX_DELTAS` of them, the next write *folds*: it writes the
bucket whole and clears the deltas, as a log-structured store compacts. So a load decodes at
most about one and a half times the bucket's bytes, in a bounded number of deltas; a call
whose delta alone would pass the share (most of a bucket changed) writes the bucket whole at
once. Sizes are
compared uncompressed, as pickles: unpickling is what a load spends its time on, and a
delta of a few keys compresses far less than a bucket of many similar ones.

This module decides and does the bookkeeping; the processor makes the state calls. With the
Python worker's cache (:mod:`daemon.operator.bucket_cache`) a call reads neither the value nor
its deltas when its copy is current, only the stamp that every write, delta or whole, renews.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from daemon.operator import state_compression
from daemon.operator.state_format import (
    Bucket,
    apply_deltas,
    decode_bucket,
    decode_delta,
    encode_delta,
)

MAX_SHARE = 0.5
"""Pending deltas may take up to this share of the bucket value's bytes (pickled): a load
then decodes at most one and a half times what the bucket alone would."""
MAX_DELTAS = 32
"""Pending deltas a bucket may have: each is decoded on a load."""
SMALL = 4096
"""Pending deltas may always take this many bytes (pickled), whatever the share: a few
kilobytes cost a load microseconds, so that small buckets (a pipeline of few keys, a test)
take the same path as large ones rather than fold at every write."""


@dataclass(frozen=True)
class Pending:
    """The deltas stored after a bucket's value, as this worker knows them."""

    base: int
    """Bytes of the bucket's stored value, pickled (0: none stored)."""
    size: int = 0
    """Bytes of its deltas, pickled."""
    count: int = 0
    """How many deltas follow the value; the next one's sequence number."""

    def may_admit(self, touched: int, keys: int) -> bool:
        """Whether a delta of ``touched`` of the bucket's ``keys`` keys is worth making.

        A shortcut before :meth:`admits`, which needs the delta made: one naming more than
        :data:`MAX_SHARE` of the keys of a bucket past :data:`SMALL` would, with keys of
        about one size, not be admitted.
        """
        return (
            self.base > 0
            and self.count < MAX_DELTAS
            and (touched <= keys * MAX_SHARE or self.base * MAX_SHARE <= SMALL)
        )

    def admits(self, delta: int) -> bool:
        """Whether a delta of ``delta`` bytes (pickled) may follow, or the bucket must fold."""
        return (
            self.base > 0
            and self.count < MAX_DELTAS
            and self.size + delta <= max(self.base * MAX_SHARE, SMALL)
        )

    def after(self, delta: int) -> Pending:
        """The pending deltas once one of ``delta`` bytes (pickled) is appended."""
        return Pending(self.base, self.size + delta, self.count + 1)


@dataclass(frozen=True)
class Loaded:
    """A bucket as read from the store: value and deltas applied."""

    bucket: Bucket
    pending: Pending
    pickled: int
    """Bytes of the value's and the deltas' pickles: what the cache sizes the bucket by."""


def load(blob: bytes | None, deltas: Iterable[bytes]) -> Loaded:
    """The bucket whose stored value is ``blob`` (None: none) and deltas are ``deltas``.

    Raises:
        UnknownStateFormatError: a part was written in a format this enrichd does not know.
    """
    pickled = state_compression.decompress(blob) if blob else None
    bucket = decode_bucket(pickled) if pickled else Bucket()
    size = len(pickled) if pickled else 0
    base = size
    decoded = []
    for delta in deltas:
        plain = state_compression.decompress(delta)
        decoded.append(decode_delta(plain))
        size += len(plain)
    if decoded:
        apply_deltas(bucket, decoded)
    return Loaded(bucket, Pending(base, size - base, len(decoded)), size)


def delta_of(bucket: Bucket, pending: Pending) -> tuple[bytes, int]:
    """The delta of the bucket's touched keys: its stored bytes, and its pickle's length."""
    pickled = encode_delta(bucket, pending.count)
    return state_compression.compress(pickled), len(pickled)
