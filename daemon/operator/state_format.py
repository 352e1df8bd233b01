"""The state format: what the joiner operator keeps in Spark's state store, version by version.

Every version holds plain data: dicts, tuples, numbers, strings and bytes, pickled (protocol
5) and stored compressed (:mod:`daemon.operator.state_compression`). It names no class of
enrichd's, so moving or renaming one breaks no checkpoint. The versions:

1. A bucket's one value per state bucket, its stash log beside it.
2. (:data:`STATE_FORMAT`) The same, plus a list of **deltas** after each bucket's value
   (:mod:`daemon.operator.bucket_delta`): an enrichd of format 1 would read the value alone
   and miss every key a delta holds.

The pieces, as format 2 writes them:

- A **bucket** (the value state ``state_bucket``, one per state bucket):
  ``{"format": 2, "keys": {join key: entry}, "due": {join key: ms}, "timer_ms": ms or None,
  "stash": (next sequence number, values written, values live, chunks)}``, where an entry
  is ``(stream_time, last_ms, updated_ms, event_time, state)`` (see :class:`Bucket`).
- A **delta** of a bucket (the list state ``bucket_delta``, a list per state bucket): what
  one write changed, appended instead of writing the bucket whole, ``{"format": 2, "delta":
  sequence number, "keys": {join key: (entry or None, due ms or None)}, "timer_ms": ms or
  None, "stash": (...)}``, stored compressed. The bucket is its value with its deltas
  applied by sequence number; a key's None entry means it went.
- A **chunk** of the bucket's stash log (the list state ``stash_chunks``):
  ``{"format": 2, "values": {sequence number: value}}``.
- A key's **state** and each stashed **value**: the joiner's own objects, pickled. The joiner
  owns them, so the names of its classes are its to keep stable (docs/plugins.md). The two
  objects of enrichd's that a joiner's state holds are written without a name: an
  :class:`~daemon.plugin.joiner.InputRecord` as its nine fields (ten, with its headers:
  :data:`RECORD_WITH_HEADERS`), and a :class:`~daemon.plugin.stash.Stash` as its index (which
  key's value is under which sequence number in the log). A pickle calls them by an
  extension code (:data:`EXTENSION_CODE`, registered with :mod:`copyreg`) and a small number
  (:data:`RECORD`, :data:`STASH`, :data:`PORTABLE_STASH`, :data:`RECORD_WITH_HEADERS`); only
  this module maps those to code.

A **portable** key state (:func:`dump_portable`) carries its stashes' values inline: it moves
a key's state between checkpoints (``daemon reset --keep-state``, ``daemon rescale``), where
the values must be written to another bucket's log.

Format 1 upgrades without a rewrite: its buckets, chunks and moved keys have format 2's
shapes, and a bucket without deltas is read as it was. (Checkpoints that an enrichd of the
weeks between the deltas and format 2 wrote record format 1 and may hold deltas: they read
the same way.) The checkpoint records its format (``daemon.pipeline.checkpoint_shape``),
which ``daemon run`` takes up to :data:`STATE_FORMAT` when it starts, so that an older
enrichd refuses it with one line instead of misreading it.

How a new format version comes about: a change to any of the shapes above, or to the state
variables that hold them, gets a new :data:`STATE_FORMAT` and a line in the list above; this
module keeps reading every older version it knows (:data:`OLDEST_FORMAT` on), or says here
why not.
"""

from __future__ import annotations

import copyreg
import functools
import io
import pickle  # noqa: S403 - the state store holds only what the processor wrote
from collections.abc import Callable, Hashable, Iterable
from contextvars import ContextVar
from dataclasses import dataclass, field
from operator import itemgetter
from typing import Any, Final

from daemon.errors import EnrichdError
from daemon.operator import state_compression
from daemon.plugin.joiner import InputRecord, input_record
from daemon.plugin.stash import Stash

STATE_FORMAT: Final = 2
"""The version of the state format this enrichd writes (and the newest it reads)."""
OLDEST_FORMAT: Final = 1
"""The oldest version of the state format this enrichd reads."""
PROTOCOL: Final = 5
"""The pickle protocol: fixed, so that a newer Python's default does not change the bytes."""

KeyEntry = tuple[int, int, int, int, bytes]
"""A join key's entry in its bucket: ``(stream_time, last_ms, updated_ms, event_time, state)``."""
STREAM_TIME: Final = 0
"""Positions in a :data:`KeyEntry`: the key's latest event time (for joiners that wake up)."""
LAST_MS: Final = 1
UPDATED_MS: Final = 2
EVENT_TIME: Final = 3
STATE: Final = 4

EXTENSION_CODE: Final = 0x6564
"""The :mod:`copyreg` extension code of :func:`_maker`, the one callable a key state's
pickle names: by this number, not by a module and a name."""
RECORD, STASH, PORTABLE_STASH, RECORD_WITH_HEADERS = 1, 2, 3, 4
"""What :func:`_maker` makes: an input record from its fields, a stash from its index (its
values in the bucket's log), a stash from its items (portable), an input record with headers.

A record with headers has a maker of its own, and one without keeps :data:`RECORD` and its
nine fields: so the state of a pipeline that carries no headers stays as an enrichd before
headers wrote it, such state loads (its records get no headers: there were none to keep),
and an enrichd before headers refuses a record with headers with one line (a maker it does
not know) instead of misreading it."""


class UnknownStateFormatError(EnrichdError):
    """State written in a format this enrichd does not know: a newer enrichd wrote it."""


@dataclass
class StashCounts:
    """A bucket's stash log's bookkeeping, stored with the bucket.

    Only :class:`~daemon.operator.stash_log.StashLog` changes it: the processor and the engine
    core hand it over with the bucket and never read it.
    """

    seq: int = 0
    """The sequence number the next stashed value is stored under."""
    entries: int = 0
    """Values in the bucket's stash log, live or dead."""
    live: int = 0
    """Values in the bucket's stash log that some key's stash still holds."""
    chunks: int = 0
    """Chunks in the bucket's stash log."""


@dataclass
class Bucket:
    """One state bucket of join keys, as the processor works on it.

    ``keys`` holds each key's :data:`KeyEntry`: its clock (the latest event time and the
    processing time of its last record, kept for joiners that wake up; the processing time
    of its last state change, for ``state_ttl``), ``event_time``, the newest event time of a
    record that changed the key's state (0: none known), and the state, pickled on its own
    so that a key the call leaves alone costs a copy.
    """

    keys: dict[str, KeyEntry] = field(default_factory=dict)
    due: dict[str, int] = field(default_factory=dict)
    """When each key that waits for time wants waking (wake-up or TTL), processing time."""
    timer_ms: int | None = None
    """The bucket's registered timer: at or before the earliest ``due``."""
    stash: StashCounts = field(default_factory=StashCounts)
    """Its stash log's counts (:mod:`daemon.operator.stash_log`)."""
    changed: bool = field(default=False, compare=False)
    """Whether a key's entry or due time changed since the bucket was loaded (not stored):
    whoever changes ``keys`` or ``due`` sets it (:meth:`touch`), so that a call that changed
    neither (a lookup's stream records) need not encode the bucket to find that out."""
    touched: set[str] = field(default_factory=set, compare=False)
    """The keys whose entry or due time changed (or went) since the bucket was last stored
    (not stored): what a :func:`encode_delta` of the bucket holds."""
    grown: int = field(default=0, compare=False)
    """How many bytes its keys' pickled entries grew by since whoever holds it last looked
    (:func:`entry_bytes`; negative: shrank; not stored): whoever changes ``keys`` adds to it,
    so that a long batch knows what it holds without measuring every key
    (:mod:`daemon.continuous.held_buckets`)."""

    def touch(self, key: str) -> None:
        """Note that ``key``'s entry or due time changed, or went."""
        self.changed = True
        self.touched.add(key)


ENTRY_OVERHEAD: Final = 48
"""The bytes a key's entry adds to its bucket's pickle beside its key's and its state's own:
the tuple's four clocks and the pickle's framing (measured: 51 to 54 for one entry, 93 to 99
for two)."""


def entry_bytes(key: str, entry: KeyEntry | None) -> int:
    """About what ``key``'s ``entry`` adds to its bucket's pickle (None: nothing).

    Read from lengths alone, so that the engine can add it up as it changes keys.
    """
    return 0 if entry is None else len(key) + len(entry[STATE]) + ENTRY_OVERHEAD


def encode_bucket(bucket: Bucket) -> bytes:
    """The bucket as plain data, pickled; :func:`state_compression.compress` makes its blob."""
    counts = bucket.stash
    stash = (counts.seq, counts.entries, counts.live, counts.chunks)
    data = {
        "format": STATE_FORMAT,
        "keys": bucket.keys,
        "due": bucket.due,
        "timer_ms": bucket.timer_ms,
        "stash": stash,
    }
    return pickle.dumps(data, protocol=PROTOCOL)


def decode_bucket(pickled: bytes) -> Bucket:
    """A bucket from :func:`encode_bucket`'s bytes.

    Raises:
        UnknownStateFormatError: it was written in a format this enrichd does not know.
    """
    data = _plain(pickled, "bucket")
    return Bucket(data["keys"], data["due"], data["timer_ms"], StashCounts(*data["stash"]))


def encode_delta(bucket: Bucket, seq: int) -> bytes:
    """What changed in the bucket since it was last stored, pickled; the ``seq``-th delta.

    Holds each :attr:`Bucket.touched` key's entry and due time as the bucket holds them now
    (None: gone), and the bucket's timer and stash counts, which are small.
    """
    keys, due = bucket.keys, bucket.due
    counts = bucket.stash
    data = {
        "format": STATE_FORMAT,
        "delta": seq,
        "keys": {key: (keys.get(key), due.get(key)) for key in bucket.touched},
        "timer_ms": bucket.timer_ms,
        "stash": (counts.seq, counts.entries, counts.live, counts.chunks),
    }
    return pickle.dumps(data, protocol=PROTOCOL)


def decode_delta(pickled: bytes) -> dict[str, Any]:
    """A delta from :func:`encode_delta`'s bytes, as plain data, for :func:`apply_deltas`.

    Raises:
        UnknownStateFormatError: it was written in a format this enrichd does not know.
    """
    return _plain(pickled, "bucket delta")


def apply_deltas(bucket: Bucket, deltas: Iterable[dict[str, Any]]) -> Bucket:
    """The bucket with ``deltas`` (from :func:`decode_delta`) applied, in their order.

    Applied by their sequence numbers, not by how they came: a delta is the whole truth about
    the keys it names, so the last one written for a key wins.
    """
    keys, due = bucket.keys, bucket.due
    for delta in sorted(deltas, key=itemgetter("delta")):
        for key, (entry, at) in delta["keys"].items():
            if entry is None:
                keys.pop(key, None)
            else:
                keys[key] = entry
            if at is None:
                due.pop(key, None)
            else:
                due[key] = at
        bucket.timer_ms = delta["timer_ms"]
        bucket.stash = StashCounts(*delta["stash"])
    return bucket


def encode_chunk(values: dict[int, bytes]) -> bytes:
    """A chunk of a stash log as stored: pickled values by sequence number, compressed."""
    data = {"format": STATE_FORMAT, "values": values}
    return state_compression.compress(pickle.dumps(data, protocol=PROTOCOL))


def decode_chunk(blob: bytes) -> dict[int, bytes]:
    """The pickled values of a stored chunk, by sequence number.

    Raises:
        UnknownStateFormatError: it was written in a format this enrichd does not know.
    """
    values: dict[int, bytes] = _plain(state_compression.decompress(blob), "stash chunk")["values"]
    return values


def readable(version: object) -> bool:
    """Whether this enrichd reads state of format ``version``."""
    return isinstance(version, int) and OLDEST_FORMAT <= version <= STATE_FORMAT


def _refuse(version: object, what: str) -> None:
    if not readable(version):
        raise UnknownStateFormatError(
            f"{what} in state format {version!r}, which this enrichd (state formats "
            f"{OLDEST_FORMAT} to {STATE_FORMAT}) cannot read; run the enrichd that wrote it"
        )


def _plain(pickled: bytes, what: str) -> dict[str, Any]:
    data = pickle.loads(pickled)  # noqa: S301 - plain data the processor wrote
    _refuse(data.get("format") if isinstance(data, dict) else None, f"a {what}")
    return data


def load_value(pickled: bytes) -> Any:
    """A stashed value, pickled by a :class:`StatePickler` without a stash reduction."""
    return pickle.loads(pickled)  # noqa: S301 - what the processor wrote


Restore = Callable[[dict[Hashable, int | None]], Stash]
"""Makes a loaded key state's stash from its index (the log's sequence numbers)."""


class StatePickler:
    """Pickles key states: records by their fields, each stash by ``reduce_stash``.

    Without ``reduce_stash`` it pickles stashed values. One per stash log and call: it
    reuses its buffer. Why a dispatch table and not
    ``persistent_id``: the pickler calls ``persistent_id`` (Python) for every object it
    writes, and a subclassed pickler costs a Python ``__init__`` per key, which more than
    doubled the time to pickle a key's state. The dispatch table is consulted in C, and only
    for types the pickler does not know.
    """

    def __init__(self, reduce_stash: Callable[[Stash], tuple[Any, ...]] | None = None) -> None:
        self._buffer = io.BytesIO()
        self._pickler = pickle.Pickler(self._buffer, protocol=PROTOCOL)
        table = dict(_STORED)
        if reduce_stash is not None:
            table[Stash] = reduce_stash
        self._pickler.dispatch_table = table

    def dumps(self, state: Any) -> bytes:
        """The state's pickle."""
        buffer = self._buffer
        buffer.seek(0)
        buffer.truncate()
        self._pickler.clear_memo()
        self._pickler.dump(state)
        return buffer.getvalue()


def stash_index(index: dict[Hashable, int | None]) -> tuple[Any, ...]:
    """How a stash log's :meth:`StatePickler` reduction writes a stash: its index."""
    return (_MAKERS[STASH], (index,))


def load_state(pickled: bytes, restore: Restore | None) -> Any:
    """A key state from its pickle; each stash in it is made by ``restore`` from its index.

    ``restore`` may be None for a portable state, whose stashes carry their values.
    """
    token = _RESTORE.set(restore or _no_log)
    try:
        return pickle.loads(pickled)  # noqa: S301 - what the processor wrote
    finally:
        _RESTORE.reset(token)


def dump_portable(state: Any) -> bytes:
    """A loaded key state with each stash's values inline (read through the stash)."""
    return _dumps(state, _PORTABLE)


def encode_portable(entry: KeyEntry, due: int | None, state: Any) -> bytes:
    """A key's entry, its due time and its loaded state, to move to another checkpoint.

    ``(format, stream_time, last_ms, updated_ms, event_time, due, portable state)``.
    """
    clock = entry[STREAM_TIME], entry[LAST_MS], entry[UPDATED_MS], entry[EVENT_TIME]
    return pickle.dumps((STATE_FORMAT, *clock, due, dump_portable(state)), protocol=PROTOCOL)


def decode_portable(pickled: bytes) -> tuple[tuple[int, int, int, int], int | None, Any]:
    """The clock fields, due time and state of :func:`encode_portable`'s bytes.

    Raises:
        UnknownStateFormatError: they were written in a format this enrichd does not know.
    """
    version, stream_time, last_ms, updated_ms, event_time, due, state = pickle.loads(pickled)  # noqa: S301
    _refuse(version, "a moved key state")
    return (stream_time, last_ms, updated_ms, event_time), due, load_state(state, None)


def portable_due(pickled: bytes) -> int | None:
    """The due time in :func:`encode_portable`'s bytes (the rest is not loaded into objects).

    Raises:
        UnknownStateFormatError: they were written in a format this enrichd does not know.
    """
    version, *_, due, _state = pickle.loads(pickled)  # noqa: S301 - enrichd's own state
    _refuse(version, "a moved key state")
    return due  # type: ignore[no-any-return]


def _dumps(value: Any, table: dict[type, Callable[[Any], tuple[Any, ...]]]) -> bytes:
    buffer = io.BytesIO()
    pickler = pickle.Pickler(buffer, protocol=PROTOCOL)
    pickler.dispatch_table = table
    pickler.dump(value)
    return buffer.getvalue()


class _Maker(functools.partial):  # type: ignore[type-arg]
    """A callable a key state's pickle names by number (see the module docstring).

    A partial, so that calling one is a call in C; pickled once per key state (memoized),
    through :func:`_maker` and :data:`EXTENSION_CODE`.
    """


def _stashed(index: dict[Hashable, int | None]) -> Stash:
    """A stash pickled by its index, loaded back (only inside :func:`load_state`)."""
    return _RESTORE.get()(index)


def _no_log(index: dict[Hashable, int | None]) -> Stash:
    raise UnknownStateFormatError("a stash stored in a log, loaded without its log")


def _portable_stash(items: list[tuple[Hashable, Any]]) -> Stash:
    return Stash(items)


_RESTORE: ContextVar[Restore] = ContextVar("enrichd_stash_restore")
_MAKERS: dict[int, _Maker] = {
    RECORD: _Maker(input_record),
    STASH: _Maker(_stashed),
    PORTABLE_STASH: _Maker(_portable_stash),
    RECORD_WITH_HEADERS: _Maker(input_record),
}
_NUMBERS = {id(maker): number for number, maker in _MAKERS.items()}


def _maker(number: int) -> _Maker:
    """What a key state's pickle calls by :data:`EXTENSION_CODE`: the maker ``number``."""
    try:
        return _MAKERS[number]
    except KeyError:
        raise UnknownStateFormatError(
            f"a key state names maker {number}, which this enrichd does not know"
        ) from None


copyreg.add_extension(__name__, _maker.__name__, EXTENSION_CODE)


def _reduce_maker(maker: _Maker) -> tuple[Any, ...]:
    return (_maker, (_NUMBERS[id(maker)],))


def _reduce_record(record: InputRecord) -> tuple[Any, ...]:
    fields = (
        record.role,
        record.key,
        record.value,
        record.event_time,
        record.topic,
        record.partition,
        record.offset,
        record.kafka_key,
        record.timestamp,
    )
    if record.headers is None:
        return (_MAKERS[RECORD], fields)
    return (_MAKERS[RECORD_WITH_HEADERS], (*fields, record.headers))


def _reduce_portable_stash(stash: Stash) -> tuple[Any, ...]:
    return (_MAKERS[PORTABLE_STASH], (list(stash.items()),))


_STORED: dict[type, Callable[[Any], tuple[Any, ...]]] = {
    _Maker: _reduce_maker,
    InputRecord: _reduce_record,
}
_PORTABLE = {**_STORED, Stash: _reduce_portable_stash}
