"""The output rows a task holds until it commits: in memory up to a byte budget, the rest on disk.

A task produces its records when it commits, so that its transaction is open only while
they go out (:mod:`daemon.sink.task_output`), and keeps them until the commit is through,
to write them again if the broker refuses one. What it holds is bounded by bytes, not by
rows: a hundred thousand rows of a megabyte each are a hundred gigabytes. Past the budget
(``[kafka]``'s :data:`~daemon.sink.spec.DEFAULT_HELD_BYTES` unless set otherwise) the rows
held so far are pickled to a file of the runtime folder
(:func:`daemon.private_paths.runtime_folder`), unlinked as it is opened, so that it is the
task's alone and goes with the task however it ends.

Example:
    >>> log = RowLog(budget=100)
    >>> for n in range(5):
    ...     log.append(("views", b"k", b"v" * 40, n), 42)
    >>> log.spilled > 0, len(log), [row[3] for row in log]
    (True, 5, [0, 1, 2, 3, 4])
    >>> log.close()
"""

from __future__ import annotations

import pickle  # noqa: S403 - the task's own rows, in its own unlinked file
import tempfile
from collections.abc import Iterator
from typing import IO, Any

from daemon.private_paths import runtime_folder

ROW_OVERHEAD = 240
"""Bytes a held row takes beside its key and value: the tuple, its numbers, the bytes
objects' headers (measured with ``sys.getsizeof``; topics and source topics are shared)."""


class RowLog:
    """A task's rows, in order: the newest in memory, up to ``budget`` bytes, the rest on disk."""

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self._rows: list[tuple[Any, ...]] = []
        self._bytes = 0
        self._file: IO[bytes] | None = None
        self.spilled = 0
        """Rows written to the file so far."""

    def append(self, row: tuple[Any, ...], size: int) -> None:
        """Hold ``row``, which takes ``size`` bytes (see :func:`row_size`)."""
        self._rows.append(row)
        self._bytes += size
        if self._bytes > self.budget:
            self._spill()

    def _spill(self) -> None:
        if self._file is None:
            # Unlinked at once (O_TMPFILE where the system has it), mode 0600.
            self._file = tempfile.TemporaryFile(prefix="rows-", dir=runtime_folder())
        self._file.seek(0, 2)  # at the end, whatever a reading left the position at
        pickle.dump(self._rows, self._file, protocol=pickle.HIGHEST_PROTOCOL)
        self.spilled += len(self._rows)
        self._rows, self._bytes = [], 0

    def __len__(self) -> int:
        return self.spilled + len(self._rows)

    def __bool__(self) -> bool:
        return bool(self._rows) or self.spilled > 0

    def __iter__(self) -> Iterator[tuple[Any, ...]]:
        """Every row, in the order held (the file's first, a chunk in memory at a time).

        One reading at a time: a second would move the first's place in the file.
        """
        if self._file is not None:
            self._file.flush()
            self._file.seek(0)
            read = 0
            while read < self.spilled:
                chunk = pickle.load(self._file)  # noqa: S301 - written just above
                read += len(chunk)
                yield from chunk
        yield from self._rows

    def close(self) -> None:
        """Let go of the rows and the file."""
        if self._file is not None:
            self._file.close()
            self._file = None
        self._rows, self._bytes, self.spilled = [], 0, 0


def row_size(key: bytes | None, value: bytes | None) -> int:
    """What a row of ``key`` and ``value`` takes in memory, near enough."""
    return ROW_OVERHEAD + (len(key) if key is not None else 0) + (len(value) if value else 0)
