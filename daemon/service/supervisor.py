"""The service behind ``daemon run``: every pipeline of a file, supervised until a signal.

How it works: the file is checked and every pipeline planned (joiner, schemas, topics) before
Spark starts, so a configuration problem ends the process at once with one line and exit code
1; a broker that does not answer yet is waited for, with backoff. Then one Spark session runs
one streaming query per pipeline, started one after another (:func:`settled`). A query that
fails is logged with its pipeline's name and started again from its checkpoint after a delay
that doubles from 1 s to 60 s, and goes back to 1 s once a restarted query completes a
micro-batch. Failures after start-up never end the
process. A failure is logged as one line naming the pipeline, its joiner and the error (for
a Python exception in a Spark task, its class and message); the task's traceback goes with
it, as the JSON log's ``traceback`` field. A micro-batch that fails the same way
``[service] stuck_after_failures`` times in a row, with no micro-batch completed in
between, is *stuck*: retrying alone will not get it through. The pipeline is then reported
stuck (one ERROR line, ``/readyz``, ``enrichd_pipeline_stuck``) and still retried, since
what the operator fixes (a registry back up, a plugin upgraded and the daemon restarted) is
outside; the report clears once a micro-batch completes.

Stopping (SIGTERM or SIGINT): Structured Streaming has no "finish the batch, then stop";
``query.stop()`` interrupts whatever micro-batch is running. So each query is first given
until the stop deadline to be *between* micro-batches: not running a trigger, or done with
the batch that was in flight when the signal came. Only then is it stopped, which interrupts
at most the planning of the next batch. If the deadline comes first it is stopped anyway.
That is safe, not just polite: an interrupted micro-batch was never committed to the
checkpoint, so the next start runs it again with the same offsets and state, and the
joiner operator's transactional output (``daemon.sink.task_producer``) writes nothing for a
batch whose output already landed. Waiting first avoids leaving a Kafka transaction open,
which matters on brokers that show aborted records to ``read_committed`` readers (Tansu 0.6
does). The process exits 0 within the stop timeout, by force if the JVM does not let go in
time.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pyspark import SparkContext

from daemon.errors import (
    ConfigError,
    EnrichdError,
    KafkaUnreachableError,
    failure_reason,
    stops_the_pipeline,
    task_traceback,
)
from daemon.model.config import PipelineFile
from daemon.pipeline.checkpoint_shape import check_checkpoint, pending_batch
from daemon.pipeline.continuous_checks import slot_problems
from daemon.pipeline.lock import lock_checkpoints
from daemon.pipeline.plan import (
    PipelinePlan,
    client_conf,
    end_long_batches,
    plan_pipeline,
    start_query,
)
from daemon.service.monitor import Monitor
from daemon.signals import StopRequest
from daemon.spark import spark_log
from daemon.spark.session import spark_session

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


log = logging.getLogger("enrichd.service")

MAX_RESTART_DELAY_S = 60.0
START_WAIT_S = 30.0
"""The longest a pipeline's start waits for the pipeline started before it (:func:`settled`)."""
_POLL_S = 0.5
_KAFKA_TRY_S = 30.0
"""Ample time for one try to reach Kafka (a metadata request waits up to 10 s)."""


def restart_delay(failures: int) -> float:
    """Seconds to wait before restarting after the ``failures``-th failure in a row (1, 2, ...)."""
    return float(min(MAX_RESTART_DELAY_S, 2.0 ** max(failures - 1, 0)))


def settled(pipe: Supervised, since: float, now: float) -> bool:
    """Whether the pipeline started at ``since`` lets the next one start.

    Pipelines start one after another: a query's first micro-batch starts a chain of Python
    processes (docs/operations.md, "Start-up and rolling restarts"), and Spark gives most of
    them 10 s to connect back to its JVM, a limit no setting changes. The five queries of
    ``daemon verify --joiner all`` starting at once on two cores at load 9-18 missed it
    again and again: each miss fails the query, which is restarted with backoff. So the next
    pipeline starts once this one has reported progress (its first micro-batch, or Spark's
    idle report), has failed, or has had :data:`START_WAIT_S`.
    """
    query = pipe.query
    return (
        query is None  # it could not start: its restart is scheduled
        or not query.isActive
        or query.lastProgress is not None
        or now - since >= START_WAIT_S
    )


@dataclass
class Supervised:
    """One pipeline's query and its restart bookkeeping."""

    plan: PipelinePlan
    query: Any = None
    restarts: int = 0
    failures_in_row: int = 0
    failures: int = 0
    restart_at: float | None = None
    last_failure: str | None = None
    """The one-line reason of the last failure (for ``/readyz``)."""
    stuck_after: int = 5
    """Failures in a row with the same reason that make the pipeline stuck."""
    same_failures: int = 0
    """Failures in a row, with no micro-batch completed between them, for the same reason."""
    stuck: str | None = None
    """Why the pipeline is stuck (for ``/readyz``), or None while it is not."""
    stopped: bool = False
    """Stopped for good: the last failure is one only the operator can mend
    (:func:`~daemon.errors.stops_the_pipeline`)."""

    @property
    def name(self) -> str:
        """The pipeline's name."""
        return self.plan.config.name

    @property
    def joiner(self) -> str:
        """The pipeline's joiner as a failure names it, with its plugin."""
        joiner = self.plan.config.joiner
        plugin = getattr(self.plan.operator, "plugin", None)
        # A built-in's plugin has the joiner's name: "joiner comap of plugin comap" says no more.
        of = f" of plugin {plugin}" if plugin and plugin != joiner else ""
        return f"joiner {joiner}{of}"

    def check(self, spark: SparkSession, now: float) -> None:
        """Notice a failed query, and restart it once its delay has passed."""
        if self.stopped:
            return
        if self.restart_at is not None:
            if now >= self.restart_at:
                self.restart_at = None
                self.restarts += 1
                self.start(spark, f"restarted (restart {self.restarts})", now)
            return
        if self.query.isActive:
            if self.failures_in_row and self.query.lastProgress is not None:
                self.failures_in_row = 0  # a batch went through: the next failure starts over
                self.same_failures = 0
                if self.stuck is not None:
                    self.stuck = None
                    log.info(
                        "pipeline %s is no longer stuck: a micro-batch completed",
                        self.name,
                        extra={"pipeline": self.name},
                    )
            return
        self.failed(str(self.query.exception() or "the query stopped"), now)

    def start(self, spark: SparkSession, what: str, now: float) -> None:
        """Start the query; a failure to start counts as a failure of the query."""
        try:
            self.query = start_query(spark, self.plan)
        except EnrichdError as exc:
            # By its class, as a task's would come: the name says whether it stops the pipeline.
            self.failed(f"could not start: {type(exc).__name__}: {exc}", now)
            return
        except Exception as exc:
            self.failed(f"could not start: {_reason(exc)}", now)
            return
        log.info(
            "pipeline %s %s: joiner %s, checkpoint %s",
            self.name,
            what,
            self.plan.config.joiner,
            self.plan.config.checkpoint,
            extra={"pipeline": self.name},
        )

    def failed(self, text: str, now: float) -> None:
        """Log a failure (``text``: the query's exception), schedule the restart, see if stuck.

        A failure that only the operator can mend (:func:`~daemon.errors.stops_the_pipeline`)
        stops the pipeline instead.
        """
        reason = failure_reason(text)
        # failures_in_row > 0: no micro-batch completed since the last failure, so the same
        # batch failed again (a restart runs the batch its checkpoint planned last).
        repeated = self.failures_in_row > 0 and reason == self.last_failure
        self.same_failures = self.same_failures + 1 if repeated else 1
        self.failures_in_row += 1
        self.failures += 1
        delay = restart_delay(self.failures_in_row)
        self.last_failure = reason
        if stops_the_pipeline(text):
            # A restart would fail the same way for ever: Kafka Streams, too, stops here.
            self.stopped, self.stuck = True, None
            log.error(
                "pipeline %s stopped: %s",
                self.name,
                reason,
                extra={"pipeline": self.name, "traceback": task_traceback(text)},
            )
            return
        log.error(
            "pipeline %s (%s) failed: %s; restarting in %.0f s",
            self.name,
            self.joiner,
            reason,
            delay,
            extra={"pipeline": self.name, "traceback": task_traceback(text)},
        )
        self.restart_at = now + delay
        if self.same_failures < self.stuck_after:
            self.stuck = None
            return
        batch = pending_batch(self.plan.config.checkpoint)
        which = "its next micro-batch" if batch is None else f"micro-batch {batch}"
        first = self.stuck is None
        self.stuck = (
            f"stuck: {which} failed {self.same_failures} times in a row with the same error "
            f"({self.joiner}): {reason}; retried every {delay:.0f} s"
        )
        if first:
            log.error(
                "pipeline %s is stuck: %s failed %d times in a row with the same error; it "
                "is retried, but needs the operator",
                self.name,
                which,
                self.same_failures,
                extra={"pipeline": self.name},
            )

    def stop(self, deadline: float) -> None:
        """Let the micro-batch in flight finish (until ``deadline``), then stop the query.

        A continuous pipeline's long batch is asked to end first (:func:`end_long_batches`).
        """
        query = self.query
        if self.restart_at is not None or query is None or not query.isActive:
            return
        end_long_batches(self.plan)
        in_flight = _last_batch(query)
        while time.monotonic() < deadline and query.isActive:
            if not query.status["isTriggerActive"] or _last_batch(query) != in_flight:
                break
            time.sleep(0.02)
        try:
            with _interrupt_unlogged():
                query.stop()
        except Exception as exc:  # a stop timeout: the checkpoint still makes the next start right
            log.warning(
                "pipeline %s did not stop cleanly: %s",
                self.name,
                exc,
                extra={"pipeline": self.name},
            )
        log.info(
            "pipeline %s stopped (%d restarts)",
            self.name,
            self.restarts,
            extra={"pipeline": self.name},
        )


@contextmanager
def _interrupt_unlogged() -> Iterator[None]:
    """Keep py4j from logging the interrupt of a batch that a stop asked for as an ERROR.

    Spark interrupts the batch's ``foreachBatch`` call in the daemon's process, and py4j logs
    the ``InterruptedException`` it raises with its stack trace: every stop of a continuous
    pipeline, which does not wait for its long batch, would log one. The next start runs the
    batch again (and its task replays what it committed).
    """
    py4j = logging.getLogger("py4j.clientserver")
    level = py4j.level
    py4j.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        py4j.setLevel(level)


def _reason(exc: Exception) -> str:
    """What went wrong: a JVM error's own class and message, where Py4J wraps one.

    Py4J's text starts "An error occurred while calling o131.start.", which is all the
    service's one-line log would keep; the JVM exception's text names the problem.
    """
    java = getattr(exc, "java_exception", None)
    if java is None:
        return str(exc)
    try:
        return str(java.toString())
    except Exception:  # the JVM is gone: Py4J's own text is all there is
        return str(exc)


def _last_batch(query: Any) -> int:
    progress = query.lastProgress
    return -1 if progress is None else int(progress.batchId)


def run_service(
    file: PipelineFile,
    *,
    stop_timeout_s: float = 30.0,
    stop: threading.Event | None = None,
    http: str | None = None,
    stall_timeout_s: float = 300.0,
) -> None:
    """Run every pipeline of ``file`` until SIGTERM/SIGINT (or ``stop`` is set), then stop.

    Args:
        file: the pipeline file.
        stop_timeout_s: time to finish micro-batches in flight and exit after the signal.
        stop: set it to stop, as a signal would (for running the service in a thread,
            where it installs no signal handlers and never exits the process). A Spark
            session that was running before the service started is left running.
        http: ``HOST:PORT`` for ``/healthz``, ``/readyz`` and ``/metrics``; None: the
            file's ``[service] http``, and no endpoint if that is not set either.
        stall_timeout_s: a query without a progress report for this long is stalled: not
            ready, and the systemd watchdog is no longer fed (``daemon.service.monitor``).

    A broker that does not answer at start-up is waited for: one log line per try, with the
    delays of :func:`restart_delay` between tries, until it answers or the service is stopped.

    Raises:
        ConfigError: ``[kafka] bootstrap_servers`` is missing, or a pipeline is wrong.
        KafkaUnavailableError: an input topic is missing.
        CheckpointInUseError: another daemon runs on one of the checkpoints.
        IncompatibleCheckpointError: a checkpoint was written by a pipeline of another shape.
    """
    conf = client_conf(file)
    crowded = slot_problems(file)
    if crowded:
        raise ConfigError(crowded[0])
    # Held until the process ends: a second daemon on these checkpoints is refused.
    locks = lock_checkpoints(file)
    request = StopRequest(stop)
    # In the main thread the service owns the process: signals stop it, and it exits by force
    # past the stop timeout. Run in another thread, it leaves both to the program around it.
    owns_process = threading.current_thread() is threading.main_thread()
    if owns_process:
        request.install()
    # Up before planning, so that /healthz answers while the broker is waited for.
    monitor = Monitor(
        conf,
        http=http or file.service.http,
        stall_after_s=stall_timeout_s,
        id_prefix=file.kafka.id_prefix,
    )
    try:
        plans = _plan_when_kafka_answers(file, conf, request, monitor)
        # Only a pipeline that planned without fault leaves its shape in its checkpoint.
        for config in file.pipeline if plans is not None else ():
            check_checkpoint(config)
    except BaseException:
        monitor.close()
        locks.release()  # a caller that goes on (a test, an embedding) may start again
        raise
    if plans is None:  # stopped while waiting for the broker
        monitor.close()
        locks.release()
        log.info("stopped before any pipeline started")
        return
    # The context, not SparkSession.getActiveSession(): that one is per thread. A session the
    # program around the service started (it embeds the service in a thread) stays its own.
    owns_session = SparkContext._active_spark_context is None
    spark = spark_session(file.spark)
    if not spark_log.verbose() and spark_log.destination() != spark_log.OWN_LOG:
        log.info("Spark's own log: %s (--verbose shows it here)", spark_log.log_name())
    monitor.attach(spark)
    if owns_process:
        request.install()  # again: PySpark installs its own SIGINT handler as it starts
    stuck_after = file.service.stuck_after_failures
    pipelines = [Supervised(monitor.instrument(plan), stuck_after=stuck_after) for plan in plans]
    waiting, started = list(pipelines), list[Supervised]()
    since = 0.0
    while True:
        now = time.monotonic()
        for pipe in started:
            pipe.check(spark, now)
        if waiting and (not started or settled(started[-1], since, now)):
            started.append(waiting.pop(0))
            started[-1].start(spark, "started", now)
            since = now
        monitor.tick(pipelines, now)
        if request.sleep(_POLL_S):
            break
    monitor.stopping()
    now = time.monotonic()
    log.info("stopping: letting micro-batches in flight finish (up to %.0f s)", stop_timeout_s)
    if owns_process:
        _exit_at(now + stop_timeout_s)
    # Half the time for batches in flight, the rest for stopping queries and Spark; this
    # bounds each query.stop(), which raises rather than wait longer.
    stop_timeout = spark.conf.get("spark.sql.streaming.stopTimeout", None)
    spark.conf.set("spark.sql.streaming.stopTimeout", str(int(stop_timeout_s * 250)))
    for pipe in pipelines:
        pipe.stop(now + stop_timeout_s / 2)
    monitor.close()
    if owns_session:
        spark.stop()
    elif stop_timeout is None:
        spark.conf.unset("spark.sql.streaming.stopTimeout")
    else:
        spark.conf.set("spark.sql.streaming.stopTimeout", stop_timeout)
    locks.release()
    log.info("stopped")


def _plan_when_kafka_answers(
    file: PipelineFile, conf: dict[str, str], stop: StopRequest, monitor: Monitor
) -> list[PipelinePlan] | None:
    """Plan every pipeline, retrying with backoff while no broker answers.

    A broker that is down or still starting is a normal state of a service's surroundings
    (Kafka's own clients reconnect for ever), not a start-up error: each failed try logs one
    line, and the next comes after the delay of :func:`restart_delay`.

    Returns:
        The plans of every pipeline's queries; None if ``stop`` was set meanwhile.

    Raises:
        ConfigError: a pipeline is wrong.
        KafkaUnavailableError: the broker answers, but an input topic is missing.
    """
    failures = 0
    while not stop.is_set():
        try:
            # A pipeline whose joiner has a second stage runs it as a query of its own.
            return [s for pipe in file.pipeline for s in plan_pipeline(file, pipe, conf).stages()]
        except KafkaUnreachableError as exc:
            failures += 1
            delay = restart_delay(failures)
            log.error("%s; retrying in %.0f s", exc, delay)
            why = f"waiting for Kafka: try {failures} failed, the next in {delay:.0f} s"
            monitor.waiting(why, for_s=delay + _KAFKA_TRY_S)
            stop.sleep(delay)
    return None


def _exit_at(deadline: float) -> None:
    """Exit 0 at ``deadline`` even if Spark does not shut down by then.

    The timer outlives :func:`run_service`: the process may still hang on its way out after
    Spark stopped (the JVM gateway, a client's threads), and ``daemon run`` must exit in time.
    """

    def force() -> None:
        log.warning("stop timeout reached; exiting without waiting for Spark")
        logging.shutdown()
        os._exit(0)

    timer = threading.Timer(max(deadline - time.monotonic(), 0.0), force)
    timer.daemon = True
    timer.start()
