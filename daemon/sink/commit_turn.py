"""Transactions on one machine end one at a time.

Why: every task of a micro-batch writes its share in a Kafka transaction that reaches every
output partition, and the tasks finish together, so their commits (EndTxn) meet at the
broker. Apache Kafka resolves such commits one after the other itself. Tansu 0.6, the
development broker, can leave one of two transactions that end at the same moment marked
committed while it still holds its offsets: ``read_committed`` readers then stop there for
good, every later commit answered with success (docs/semantics.md). Taking turns costs a
task at most the commits of the other tasks on its machine that finish with it, a few
milliseconds each, against micro-batches of hundreds.

How: an advisory lock (``flock``) on a file in the temporary folder, one per user, held while
a transaction ends: a commit, an abort, or a producer's initialisation, which aborts what a
predecessor left open. Spark's Python workers are processes, so the lock is the operating
system's; it is released when its holder exits, even by a crash.
"""

from __future__ import annotations

import fcntl
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager

LOCK_FILE = os.path.join(tempfile.gettempdir(), f"enrichd-{os.getuid()}-transactions.lock")


@contextmanager
def ending_transaction() -> Iterator[None]:
    """Hold this machine's turn to end a transaction."""
    fd = os.open(LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # which releases the lock
