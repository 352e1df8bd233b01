"""On the embedded broker, transactions on one machine end one at a time.

Why: every task of a micro-batch writes its share in a Kafka transaction that reaches every
output partition, and the tasks finish together, so their commits (EndTxn) meet at the
broker. Apache Kafka resolves such commits one after the other itself. Tansu 0.6, the
embedded development broker, can leave one of two transactions that end at the same moment
marked committed while it still holds its offsets: ``read_committed`` readers then stop
there for good, every later commit answered with success (docs/contributing.md).

So on that broker the tasks take turns: an advisory lock (``flock``) on
``transactions.lock`` in the runtime folder (:func:`daemon.private_paths.runtime_folder`),
one per user and host, held while a transaction ends: a commit, an abort, or a producer's
initialisation, which aborts what a predecessor left open. Spark's Python workers are
processes, so the lock is the operating system's; it is released when its holder exits,
even by a crash. On any other cluster the turn is not taken: it would queue every task of
every pipeline on the host behind each other, and one slow initialisation (fencing a zombie
producer) would hold every commit for up to 30 s.

Which: :func:`turn_needed`, on the driver, from ``[kafka] commit_turn`` or else from the
cluster's id (the embedded broker starts with
:data:`~daemon.kafka.admin.EMBEDDED_CLUSTER_ID`); the answer rides in the output's spec to
the tasks. BENCHMARKS.md ("The commit turn's cost") has what the turn costs where it is on.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager

from daemon.kafka.admin import is_embedded
from daemon.private_paths import open_private, runtime_folder

LOCK_NAME = "transactions.lock"


def turn_needed(setting: bool | None, client_conf: dict[str, str]) -> bool:
    """Whether a pipeline's transactions take turns: as set, else on the embedded broker only.

    Args:
        setting: ``[kafka] commit_turn``; None: decided by the cluster.
        client_conf: the cluster's client settings (asked for its id when needed).
    """
    return setting if setting is not None else is_embedded(client_conf)


@contextmanager
def ending_transaction(taken: bool) -> Iterator[None]:
    """Hold this machine's turn to end a transaction, if ``taken``; else pass straight on.

    Raises:
        SharedFolderError: the runtime folder is another user's, or open to others.
    """
    if not taken:
        yield
        return
    fd = open_private(runtime_folder() / LOCK_NAME)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # which releases the lock
