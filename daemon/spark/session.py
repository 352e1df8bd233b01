"""One Spark session per process, with the settings enrichd's operators need."""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

from daemon.model.config import SparkConfig
from daemon.spark import spark_log
from daemon.spark.class_archive import ClassArchive
from daemon.spark.jvm import launch_gateway
from daemon.spark.scratch import LOCAL_DIR, local_dir, run_folder

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

TRACK_STATE_ROWS = "spark.sql.streaming.stateStore.rocksdb.trackTotalNumberOfRows"
JAVA_OPTIONS = "spark.driver.extraJavaOptions"

_DEFAULTS = {
    # transformWithState keeps its state in RocksDB; the in-memory store runs out of heap.
    "spark.sql.streaming.stateStore.providerClass": (
        "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
    ),
    # Commit each batch's state changes as a changelog and snapshot RocksDB in the background:
    # uploading a snapshot every batch cost each stateful task a large part of its time.
    "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
    # Counting the state's rows makes each write read the key's old value first; a state
    # bucket is one value of up to a megabyte, so batches are faster without it. Spark then
    # reports numRowsTotal as 0: see daemon.service.observability.
    TRACK_STATE_ROWS: "false",
    # Hadoop's FileContext API renames a file by first asking for its link status, which on
    # the local file system runs `readlink` in a child process: about 20 forks of the JVM
    # per micro-batch (offset log, commit log, each task's state changelog, and their .crc
    # files). The FileSystem API renames without them, atomically on local disks and HDFS.
    "spark.sql.streaming.checkpointFileManagerClass": (
        "org.apache.spark.sql.execution.streaming.checkpointing."
        "FileSystemBasedCheckpointFileManager"
    ),
    # The JIT's optimising compiler (C2) was still compiling a minute into a run, taking most
    # of the JVM's CPU from the batches on a 2-core machine; stopping at the quick compiler
    # (C1) made batches faster. In local mode this JVM is the executor too.
    JAVA_OPTIONS: "-XX:TieredStopAtLevel=1",
    "spark.sql.shuffle.partitions": "2",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.session.timeZone": "UTC",
    "spark.python.worker.reuse": "true",
    # Workers forked with enrichd's modules already imported (daemon.pipeline.worker_daemon).
    "spark.python.daemon.module": "daemon.pipeline.worker_daemon",
    "spark.sql.streaming.noDataMicroBatches.enabled": "false",
    # Spark's own masking, in its logs, plans and errors: the settings whose names
    # daemon.secrets.is_secret_key takes for secrets (Spark's default misses "credential",
    # "passphrase" and most keys).
    "spark.redaction.regex": (
        r"(?i)secret|password|token|credential|passphrase|access[._-]?key|account[._]key"
        r"|private[._-]?key|api[._-]?key|key[._-]?password"
    ),
    # Spark prints a data source's options with the plans that read it (a streaming
    # DataFrame's explain(), analysis errors) and masks only those this names: enrichd's
    # source carries its Kafka settings, secrets too, pickled in the option "spec".
    "spark.sql.redaction.options.regex": r"(?i)url|^spec$",
    # The checkpoint's files are made through Hadoop's file system API, which sets their
    # modes itself from this umask (022 by default: readable by everyone), whatever the
    # process's: the join state holds the records joined.
    "spark.hadoop.fs.permissions.umask-mode": "077",
}


def default_setting(key: str) -> str | None:
    """The default enrichd gives a Spark setting, if any (``[spark.conf]`` overrides it)."""
    return _DEFAULTS.get(key)


def spark_session(config: SparkConfig) -> SparkSession:
    """The process's Spark session, started on first use.

    A session that is already running is reused as it is: its master cannot change
    in-process, and its settings, applied when it started, are not set again under the
    queries it may be running (a replay in a test session or a notebook).
    """
    # Late: Spark loads when a session starts, not in commands that start none.
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    if SparkContext._active_spark_context is None:
        # Python workers must run the interpreter that has enrichd installed, not the first
        # python3 on PATH.
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
        settings = {**_DEFAULTS, **config.conf}
        scratch = local_dir(config)
        if scratch is not None:  # the state's working copy where its size is planned
            settings[LOCAL_DIR] = str(run_folder(scratch))
        # A JVM of our own starts: it maps Spark's archived classes, or records them.
        archive = ClassArchive() if SparkContext._gateway is None else None
        if archive is not None and archive.options:
            settings[JAVA_OPTIONS] = f"{settings.get(JAVA_OPTIONS, '')} {archive.options}".strip()
        ours = SparkContext._gateway is None
        quiet = ours and not spark_log.verbose()
        if ours:
            # Started here rather than by getOrCreate(), which would put every setting on the
            # JVM's command line (daemon.spark.jvm says why not).
            launch = {**settings, "spark.master": config.master, "spark.app.name": "enrichd"}
            if quiet:  # its output into a file or the log (a running JVM keeps its own)
                where = spark_log.destination()
                options = f"{settings.get(JAVA_OPTIONS, '')} {spark_log.java_options(where)}"
                launch[JAVA_OPTIONS] = options.strip()
                gateway = spark_log.launch_jvm(launch, where)
            else:
                gateway = launch_gateway(launch)
            settings[JAVA_OPTIONS] = launch.get(JAVA_OPTIONS, "")
            SparkContext._ensure_initialized(gateway=gateway)
        builder = SparkSession.builder.master(config.master).appName("enrichd")
        for key, value in settings.items():
            builder = builder.config(key, value)
        session = builder.getOrCreate()
        if archive is not None:
            archive.started(getattr(SparkContext._gateway, "proc", None))
        if not quiet:
            session.sparkContext.setLogLevel("ERROR")
    else:
        session = SparkSession.builder.getOrCreate()
    # getOrCreate() makes the session active only in the thread that first created it, and
    # Spark finds a Python data sink through the calling thread's active session: started
    # in a thread of a program whose session already ran, the service's queries failed
    # with DATA_SOURCE_NOT_FOUND for enrichd-kafka-sink. PySpark's createDataFrame sets it
    # the same way.
    SparkSession._get_j_spark_session_class(session._jvm).setActiveSession(session._jsparkSession)
    return session

