"""Keep PySpark's per-task garbage collection cheap in the Python workers enrichd runs in.

A reused PySpark worker runs a full ``gc.collect()`` after every task. With pandas, pyarrow,
PySpark, fastavro and confluent-kafka loaded that scans tens of thousands of long-lived
objects per task, and a micro-batch runs several Python tasks (source, joiner, sink) on each
core: at small batches that was a large share of the workers' CPU. :func:`freeze_loaded` moves
everything a worker holds when its first enrichd task starts (modules, schemas, the plan)
into the permanent generation, which collections skip; what tasks create later is collected
as before.

It also raises the allocation thresholds of the automatic collections. A task allocates
mostly short-lived, acyclic objects (decoded records, rows, pickles), and with the default
of a collection per 700 net allocations the joiner spent much of its time in them
(``BENCHMARKS.md``, "Measurements behind the code", has the figures). Cyclic garbage waits
longer, but never past the end of the task, when PySpark collects it all.
"""

from __future__ import annotations

import gc

_frozen = False
_THRESHOLDS = (20_000, 20, 100)
"""Net allocations before a collection of the young generation, then how many of those before
one of the middle generation, and how many of these before a full one; Python's defaults
are (700, 10, 10)."""


def freeze_loaded() -> None:
    """Exempt what this process holds now from garbage collection, and raise the thresholds.

    Once per process.
    """
    global _frozen
    if not _frozen:
        _frozen = True
        gc.freeze()
        gc.set_threshold(*_THRESHOLDS)
