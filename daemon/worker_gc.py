"""Keep PySpark's per-task garbage collection cheap in the Python workers enrichd runs in.

A reused PySpark worker runs a full ``gc.collect()`` after every task. With pandas, pyarrow,
PySpark, fastavro and confluent-kafka loaded that scans about 90,000 long-lived objects, some
50 ms per task, and a micro-batch runs several Python tasks (source, joiner, sink) on each
core: at small batches that was a fifth of the workers' CPU. :func:`freeze_loaded` moves
everything a worker holds when its first enrichd task starts (modules, schemas, the plan)
into the permanent generation, which collections skip; what tasks create later is collected
as before.
"""

from __future__ import annotations

import gc

_frozen = False


def freeze_loaded() -> None:
    """Exempt what this process holds now from garbage collection; once per process."""
    global _frozen
    if not _frozen:
        _frozen = True
        gc.freeze()
