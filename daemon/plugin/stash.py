"""``Stash``: a mapping in a key's state whose values the engine stores apart from the state.

The engine reads and writes a key's whole state in every micro-batch that has records of the
key. A joiner that keeps a growing collection per key (comap's many side: every tweet of an
author) would pay for all of it each time. Values put in a :class:`Stash` are written to the
state store once, when they are set, and read back only when the joiner looks at one; the
state itself carries just the stash's keys. So adding, replacing, deleting, counting and
membership tests cost nothing per stored value, and only reading values (a fan-out) does.

Outside the engine (tests, ``daemon.testing``) a stash is an ordinary mapping that pickles
with its values, each as it was when last set, as the engine stores them.
"""

from __future__ import annotations

import pickle  # noqa: S403 - a joiner's own state
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping, MutableMapping
from typing import Any

Fetch = Callable[[int], Any]
"""Reads the stored value written under a sequence number (given by the engine)."""


class Stash(MutableMapping[Hashable, Any]):
    """A mapping whose values live outside the key's state blob; see the module docstring.

    Keys keep insertion order, as a dict's do; replacing a value keeps its key's place. A
    value is stored as it is when the key's state is stored after being set: to change a value
    read back from an earlier micro-batch, set it again (``stash[k] = changed``), since a
    change made only in place is not written.
    """

    __slots__ = ("_blobs", "_fetch", "_index", "_stored", "_values")

    def __init__(self, items: Iterable[tuple[Hashable, Any]] = ()) -> None:
        self._index: dict[Hashable, int | None] = {}
        """Every key, with the sequence number its value is stored under (None: not yet)."""
        self._values: dict[Hashable, Any] = {}
        """Values in memory: set since the last store, or read back."""
        self._fetch: Fetch | None = None
        self._blobs: dict[int, bytes] | None = None
        """Outside the engine, after plain pickling: the stored values, pickled."""
        self._stored = 0
        """How many of the keys had a stored value when the stash was loaded."""
        for key, value in items:
            self[key] = value

    def __len__(self) -> int:
        return len(self._index)

    def __iter__(self) -> Iterator[Hashable]:
        return iter(self._index)

    def __contains__(self, key: object) -> bool:
        return key in self._index

    def __eq__(self, other: object) -> bool:
        """Equal mappings; stashes of different sizes differ without a value read.

        :meth:`daemon.plugin.joiner.Joiner.is_empty` compares a state with a new key's, whose
        stashes are empty: the mixin's comparison would read every stored value first.
        """
        if isinstance(other, Mapping) and len(other) != len(self):
            return False
        return super().__eq__(other)

    def __getitem__(self, key: Hashable) -> Any:
        if key in self._values:
            return self._values[key]
        seq = self._index[key]
        if seq is None or self._fetch is None:  # cannot happen: a set value is in _values
            raise KeyError(key)
        value = self._values[key] = self._fetch(seq)
        return value

    def __setitem__(self, key: Hashable, value: Any) -> None:
        self._index[key] = None
        self._values[key] = value

    def __delitem__(self, key: Hashable) -> None:
        del self._index[key]
        self._values.pop(key, None)

    def clear(self) -> None:
        """Forget every key without reading a value (the mixin's clear reads each)."""
        self._index.clear()
        self._values.clear()

    def __reduce__(self) -> tuple[Any, ...]:
        """Plain pickling keeps the values as the engine would have stored them.

        A value set since the stash was last pickled is pickled now; one from before is
        kept as it was pickled then, so a change made only in place is lost here as it is in
        the engine. (The engine pickles a stash its own way: see ``daemon.operator.stash_log``.)
        """
        index: dict[Hashable, int | None] = {}
        blobs: dict[int, bytes] = {}
        for n, (key, seq) in enumerate(self._index.items()):
            if seq is None or self._blobs is None:
                blobs[n] = pickle.dumps(self[key], protocol=pickle.HIGHEST_PROTOCOL)
            else:
                blobs[n] = self._blobs[seq]
            index[key] = n
        return (Stash._unpickled, (index, blobs))

    @classmethod
    def _unpickled(cls, index: dict[Hashable, int | None], blobs: dict[int, bytes]) -> Stash:
        stash = cls._restore(index, lambda seq: pickle.loads(blobs[seq]))  # noqa: S301
        stash._blobs = blobs
        return stash

    def __repr__(self) -> str:
        return f"Stash({len(self)} keys)"

    # The engine's side: how a stash is written to and read from the state store.

    def _persist(self, write: Callable[[Any], int]) -> tuple[dict[Hashable, int | None], int]:
        """Write each value set since the last store (``write`` gives its sequence number).

        Returns the index the key's state carries in place of the values, and how many more
        stored values the stash has than before (negative after deletes).
        """
        for key, seq in self._index.items():
            if seq is None:
                self._index[key] = write(self._values[key])
        grown, self._stored = len(self._index) - self._stored, len(self._index)
        return self._index, grown

    @classmethod
    def _restore(cls, index: dict[Hashable, int | None], fetch: Fetch | None) -> Stash:
        """A stash loaded from its index; ``fetch`` reads a value when one is looked at."""
        stash = cls.__new__(cls)
        stash._index = index
        stash._values = {}
        stash._fetch = fetch
        stash._blobs = None
        stash._stored = len(index)
        return stash

    @property
    def _stored_values(self) -> int:
        """How many values the state store holds for this stash (as of its last store)."""
        return self._stored
