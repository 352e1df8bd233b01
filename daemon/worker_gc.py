"""Keep PySpark's per-task garbage collection cheap in the Python workers enrichd runs in.

A reused PySpark worker runs a full ``gc.collect()`` after every task. With pandas, pyarrow,
PySpark, fastavro and confluent-kafka loaded that scans about 90,000 long-lived objects, some
50 ms per task, and a micro-batch runs several Python tasks (source, joiner, sink) on each
core: at small batches that was a fifth of the workers' CPU. :func:`freeze_loaded` moves
everything a worker holds when an enrichd task starts (modules, schemas, the plan) into the
permanent generation, which collections skip; what the task creates is collected as before.
It freezes at every task, not once: a worker runs source, joiner and sink tasks in turn, and
each kind imports modules of its own on first use (the joiner's pandas and state API).
Freezing is cheap (it moves the collector's lists), and what it keeps alive was alive.
"""

from __future__ import annotations

import gc


def freeze_loaded() -> None:
    """Exempt what this process holds now from garbage collection."""
    gc.freeze()
