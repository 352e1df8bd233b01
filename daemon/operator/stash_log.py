"""Where a state bucket's stashed values live (see :class:`daemon.plugin.stash.Stash`).

Beside its blob, each bucket has a list state of chunks: a chunk holds the pickled values its
keys' stashes were given in one micro-batch, by sequence number, appended in one call, and
stored compressed like the bucket (:func:`daemon.operator.state_format.encode_chunk`). A key's
state carries only each stash's index (key to sequence number): the log pickles key states
with a :class:`~daemon.operator.state_format.StatePickler` that writes a stash as its index,
which on loading gives back a stash that fetches its values from the log on demand.

Nothing reads the chunks unless a joiner looks at a stashed value (or the log is compacted),
and then once per bucket and call. A replaced or deleted value stays in its chunk, dead,
until the dead outnumber the live: then the live values are rewritten as one chunk. The
log counts both (:class:`~daemon.operator.state_format.StashCounts`, stored with the bucket,
changed by nothing else), so compaction costs at most a constant per value ever written.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping
from typing import Any, Protocol

from daemon.operator.state_format import (
    STATE,
    KeyEntry,
    StashCounts,
    StatePickler,
    decode_chunk,
    encode_chunk,
    load_state,
    load_value,
    stash_index,
)
from daemon.plugin.stash import Stash

COMPACT_SLACK = 1024
"""Dead values a bucket's log may hold beyond as many as it has live ones."""
MAX_CHUNKS = 512
"""Chunks a bucket's log may grow to before they are merged (each adds a little per read)."""


class ChunkList(Protocol):
    """The part of Spark's ``ListState`` the log uses."""

    def get(self) -> Any:
        """Every element, as tuples."""

    def put(self, new_state: list[tuple[bytes]]) -> None:
        """Replace the elements."""

    def appendList(self, new_state: list[tuple[bytes]]) -> None:  # noqa: N802
        """Append elements in one call."""

    def clear(self) -> None:
        """Remove every element."""


class MemoryChunks:
    """A bucket's chunks in a list, for a log kept in memory (``daemon.testing``, tests)."""

    def __init__(self, items: Iterable[tuple[bytes]] = ()) -> None:
        self.items = list(items)
        self.size = _bytes_of(self.items)
        """The chunks' bytes, together."""

    def get(self) -> list[tuple[bytes]]:
        """Every chunk, as one-field tuples like Spark's rows."""
        return list(self.items)

    def put(self, new_state: list[tuple[bytes]]) -> None:
        """Replace the chunks."""
        self.items = list(new_state)
        self.size = _bytes_of(self.items)

    def appendList(self, new_state: list[tuple[bytes]]) -> None:  # noqa: N802 - Spark's name
        """Append chunks."""
        self.items.extend(new_state)
        self.size += _bytes_of(new_state)

    def clear(self) -> None:
        """Remove every chunk."""
        self.items = []
        self.size = 0


def _bytes_of(chunks: Iterable[tuple[bytes]]) -> int:
    return sum(len(chunk) for (chunk,) in chunks)


class StashLog:
    """One bucket's stashed values during one call of the engine (a micro-batch or a tick).

    Args:
        chunks: the bucket's stored chunks (Spark's list state, or a list in memory).
        counts: the bucket's counts of them, which only the log changes.
    """

    def __init__(self, chunks: ChunkList, counts: StashCounts) -> None:
        self._chunks = chunks
        self._counts = counts
        self._written: dict[int, bytes] = {}
        """Values stored during this call, by sequence number: the chunk to append."""
        self._read: dict[int, bytes] | None = None
        """The stored chunks, merged, once something needed them."""
        self._loaded: dict[str, list[Stash]] = {}
        """The stashes each key's loaded state holds, to count them out if it is dropped."""
        self._loading = ""
        """The key whose state is being loaded."""
        self._states = StatePickler(self._reduce)
        self._values = StatePickler()

    def dumps(self, state: Any) -> bytes:
        """Pickle a key's state; each stash in it is written as its index, its new values here."""
        return self._states.dumps(state)

    def loads(self, group: str, blob: bytes) -> Any:
        """Unpickle a key's state; each stash reads its values from this log when asked."""
        self._loading = group
        return load_state(blob, self._restore)

    def _restore(self, index: dict[Hashable, int | None]) -> Stash:
        stash = Stash._restore(index, self._fetch)
        self._loaded.setdefault(self._loading, []).append(stash)
        return stash

    def forget(self, group: str) -> None:
        """The key's stored state is dropped: its stashed values are dead."""
        for stash in self._loaded.pop(group, ()):
            self._counts.live -= stash._stored_values

    def flush(self, entries: Mapping[str, KeyEntry]) -> None:
        """Store this call's values: append them as one chunk, or compact the log.

        Args:
            entries: every key's entry the bucket keeps after the call (a compaction keeps
                the values their states' stashes hold).
        """
        counts = self._counts
        counts.entries += len(self._written)
        if not entries:
            if counts.chunks:
                self._chunks.clear()
            counts.entries = counts.live = counts.chunks = 0
            return
        dead = counts.entries - counts.live
        if dead > counts.live + COMPACT_SLACK or counts.chunks >= MAX_CHUNKS:
            self._compact(entries)
        elif self._written:
            self._chunks.appendList([(encode_chunk(self._written),)])
            counts.chunks += 1

    def _reduce(self, stash: Stash) -> tuple[Any, ...]:
        """How the pickler writes a stash: its index, once its new values are in the log."""
        index, grown = stash._persist(self._write)
        self._counts.live += grown
        return stash_index(index)

    def _write(self, value: Any) -> int:
        seq = self._counts.seq
        self._counts.seq += 1
        self._written[seq] = self._values.dumps(value)
        return seq

    def _fetch(self, seq: int) -> Any:
        blob = self._written.get(seq)
        if blob is None:
            blob = self._stored().get(seq)
        if blob is None:
            raise LookupError(f"stashed value {seq} is missing from its bucket's state")
        return load_value(blob)

    def _stored(self) -> dict[int, bytes]:
        if self._read is None:
            self._read = {}
            for (chunk,) in self._chunks.get():
                self._read.update(decode_chunk(chunk))
        return self._read

    def _compact(self, entries: Mapping[str, KeyEntry]) -> None:
        """Rewrite the live values of ``entries``' states as one chunk."""
        live: set[int] = set()

        def collect(index: dict[Hashable, int | None]) -> Stash:
            live.update(seq for seq in index.values() if seq is not None)
            return Stash._restore(index, None)

        for entry in entries.values():
            load_state(entry[STATE], collect)
        values = {**self._stored(), **self._written}
        kept = {seq: values[seq] for seq in sorted(live)}
        if kept:
            self._chunks.put([(encode_chunk(kept),)])
        else:
            self._chunks.clear()
        counts = self._counts
        counts.entries = counts.live = len(kept)
        counts.chunks = 1 if kept else 0
