"""Spark's Python worker daemon, with what enrichd's workers run imported before it forks them.

Spark starts one daemon process per kind of Python worker and forks a worker from it for each
task that finds no idle one; PySpark's own daemon imports nothing before it forks, so every
new worker imported PySpark's worker, pyarrow, numpy, fastavro and enrichd's operator, source
and sink again, whenever Spark forks one (after a failed task, for a query's first tasks, when
more tasks run at once). This daemon imports them once (``spark.python.daemon.module``, set
in :mod:`daemon.spark.session`) and then runs PySpark's, so every worker starts with them
loaded: a start costs a little less CPU, and a running pipeline's batches, whose workers are
reused, are the same (BENCHMARKS.md has the figures).

PySpark imports a worker's modules after the fork because a module that starts a thread on
import leaves a forked child whose locks that thread may hold. What is imported here starts
one native thread, jemalloc's background thread (pyarrow's allocator), which jemalloc makes
safe across ``fork()`` itself; numpy's OpenBLAS pool is kept to the calling thread, and no
module starts a Python thread (``tests/unit/pipeline/test_worker_daemon.py`` checks both).
"""

from __future__ import annotations

import gc
import os


def preload() -> None:
    """Import what enrichd's Python workers run, and keep it out of every later collection."""
    # Before numpy loads: its OpenBLAS would start a thread pool that no forked worker has.
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    import pyspark.worker  # noqa: F401 - PySpark's task worker, which every fork runs

    import daemon.operator.processor  # noqa: F401 - the joiner's stateful tasks
    import daemon.sink.spark_sink  # noqa: F401
    import daemon.source.spark_source  # noqa: F401

    # Frozen objects are never scanned, so the forked workers' collections leave their
    # pages shared with the daemon instead of copying them.
    gc.freeze()


if __name__ == "__main__":
    preload()
    from pyspark.daemon import manager

    manager()
