"""The queries' monitor: what ``daemon run`` tells its operator (metrics, health, systemd).

How it works: :class:`Monitor` sits beside the supervisor (``daemon.service.supervisor``)
and is fed from three places. A Spark ``StreamingQueryListener`` hears every progress and idle
report of every query; it marks the query alive at once and hands the report to a worker thread,
which turns it into metrics and, every few seconds, samples each input partition's log end
for the lag (network calls stay off the supervisor's thread). The stages' reports (the sink's
per-batch counts, the source reading on past missing offsets) arrive through the daemon's
report socket (:class:`daemon.report_socket.ReportSocket`), each handled by its kind. And
the supervisor calls :meth:`Monitor.tick` every half second with its pipelines: which
queries run, failures and restarts, and from that ``READY=1`` (once every query has
started), ``WATCHDOG=1`` pings (only while no query is stalled, so systemd restarts a daemon
whose micro-batches hang) and ``STATUS=`` lines for systemd.
"""

from __future__ import annotations

import json
import logging
import queue
import threading
import time
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Protocol

from confluent_kafka import IsolationLevel, TopicPartition
from confluent_kafka.admin import OffsetSpec
from pyspark.sql.streaming import StreamingQueryListener

from daemon.kafka import connect, names
from daemon.model.constants import DEFAULT_ID_PREFIX
from daemon.model.reports import BatchCounts, MissingOffsetsResumed, least_read
from daemon.model.wire import partition_name, split_partition_name
from daemon.report_socket import ReportSocket
from daemon.secrets import redact
from daemon.service.http_endpoint import MetricsServer, serve_http
from daemon.service.lag_group import LagGroups
from daemon.service.notify import Notifier
from daemon.service.observability import Health, Metrics, OutputVisibility, PipelineView
from daemon.spark.session import TRACK_STATE_ROWS

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from daemon.pipeline.plan import PipelinePlan

# Named before the module was: operators may filter the daemon's logs by it.
log = logging.getLogger("enrichd.operations")

LAG_EVERY_S = 10.0
"""How often input lag is sampled: one ListOffsets round trip per partition."""


class SupervisedQuery(Protocol):
    """What :meth:`Monitor.tick` reads of a supervised pipeline (``service.Supervised``)."""

    @property
    def name(self) -> str:
        """The query's name."""
        ...

    query: Any
    restarts: int
    failures: int
    restart_at: float | None
    last_failure: str | None
    stuck: str | None
    stopped: bool


def view_of(plan: PipelinePlan) -> PipelineView:
    """The topic names of a planned query, for labelling its metrics."""
    operator = plan.operator
    outputs = {operator.output_topic: "output"}
    for name, (topic, _) in (operator.outputs or {}).items():
        outputs[topic] = name
    return PipelineView(
        name=plan.config.name,
        inputs={spec.topic: spec.role for spec in plan.source.inputs},
        outputs=outputs,
        dead_letter_topic=operator.dead_letter_topic,
    )


class LogOffsets:
    """Reads partitions' first offsets and log ends with one consumer (no group, no fetch)."""

    def __init__(self, client_conf: dict[str, str], group: str) -> None:
        self.client_conf = client_conf
        self.group = group
        self._consumer: Any = None
        self._admin: Any = None

    def _watermarks(self, names: Sequence[str]) -> dict[str, tuple[int, int]]:

        if self._consumer is None:
            # librdkafka's log off (it writes its own lines to stderr, as text beside the
            # daemon's JSON log, for every failed connection): a failed sample is skipped.
            own = {"group.id": self.group, "enable.auto.commit": False, "log_level": 0}
            self._consumer = connect.consumer(self.client_conf, own)
        found: dict[str, tuple[int, int]] = {}
        for name in names:
            topic, partition = split_partition_name(name)
            try:
                low, high = self._consumer.get_watermark_offsets(
                    TopicPartition(topic, partition), timeout=5
                )
            except Exception as exc:  # a metric is skipped, never the service stopped
                log.debug("no watermarks for %s: %s", name, exc)
                continue
            found[name] = (low, high)
        return found

    def first(self, names: Sequence[str]) -> dict[str, int]:
        """Where each ``topic/partition`` starts (its low watermark)."""
        return {name: max(low, 0) for name, (low, _) in self._watermarks(names).items()}

    def ends(self, names: Sequence[str]) -> dict[str, int]:
        """Each ``topic/partition``'s log end, as ListOffsets reports it."""
        return {name: high for name, (_, high) in self._watermarks(names).items() if high >= 0}

    def stable_and_ends(self, topics: Sequence[str]) -> tuple[dict[str, int], dict[str, int]]:
        """Each partition of ``topics``: its last stable offset and its log end.

        Both by ListOffsets (latest), read committed and read uncommitted.
        """
        if self._admin is None:
            self._admin = connect.admin(self.client_conf)
        metadata = self._admin.list_topics(timeout=5).topics
        latest = {
            TopicPartition(topic, partition): OffsetSpec.latest()
            for topic in topics
            if topic in metadata
            for partition in metadata[topic].partitions
        }
        if not latest:
            return {}, {}
        found = []
        for level in (IsolationLevel.READ_COMMITTED, IsolationLevel.READ_UNCOMMITTED):
            answers = self._admin.list_offsets(latest, isolation_level=level, request_timeout=5)
            found.append(
                {
                    partition_name(tp.topic, tp.partition): a.result().offset
                    for tp, a in answers.items()
                }
            )
        return found[0], found[1]

    def close(self) -> None:
        """Close the consumer."""
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None
        self._admin = None  # an admin client has nothing to close


class Monitor:
    """Metrics, health endpoint and systemd notifications of one service run.

    Args:
        client_conf: the Kafka client settings, to sample log ends.
        http: ``HOST:PORT`` to serve ``/healthz``, ``/readyz`` and ``/metrics`` on; None: off.
        stall_after_s: a running query with no progress report for this long is stalled.
        notifier: where systemd notifications go (default: from ``$NOTIFY_SOCKET``).
        id_prefix: ``[kafka] id_prefix``: its sampler names the readers' group
            (:func:`daemon.kafka.names.reader_group`), and each query's committed input
            offsets go to the query's group for lag tools (:mod:`daemon.service.lag_group`).
    """

    def __init__(
        self,
        client_conf: dict[str, str],
        *,
        http: str | None = None,
        stall_after_s: float = 300.0,
        notifier: Notifier | None = None,
        id_prefix: str = DEFAULT_ID_PREFIX,
    ) -> None:
        self.metrics = Metrics()
        self.health = Health(stall_after_s)
        self.notifier = notifier or Notifier.from_environment()
        self.views: dict[str, PipelineView] = {}
        self._lock = threading.Lock()
        self._reports: queue.Queue[dict[str, Any] | BatchCounts | None] = queue.Queue()
        """Spark's progress reports, and continuous tasks' reports of where they read to."""
        self._offsets = LogOffsets(client_conf, names.reader_group(id_prefix))
        self._lag_groups = LagGroups(client_conf, id_prefix)
        self._ends: dict[str, dict[str, int]] = {}
        self._leases: dict[str, dict[int, dict[str, int]]] = {}
        """Where each lease of a continuous pipeline read to (the worker thread's alone)."""
        self._batches: dict[str, int] = {}
        """Micro-batches completed per query, for :class:`OutputVisibility`."""
        self._visibility: dict[str, OutputVisibility] = {}
        self._seen: dict[str, Any] = {}
        self._run_ids: dict[str, str] = {}
        self._ready_sent = False
        self._last_ping = 0.0
        self._status = ""
        self._stalled: set[str] = set()
        self._waiting = ""
        self._listener: Any = None
        self._spark: SparkSession | None = None
        self.report_socket = ReportSocket(
            {BatchCounts.kind: self._batch_written, MissingOffsetsResumed.kind: self._read_on}
        )
        self._worker = threading.Thread(target=self._work, name="enrichd-progress", daemon=True)
        self._worker.start()
        self.server: MetricsServer | None = None
        if http is not None:
            self.server = serve_http(
                http, self.metrics.registry, self.readiness, liveness=self.liveness
            )
            log.info("serving /healthz, /livez, /readyz and /metrics at %s", self.server.url)

    # -- wiring ----------------------------------------------------------------------------

    def instrument(self, plan: PipelinePlan) -> PipelinePlan:
        """The plan with its source and output reporting to this service; remembers its topics."""
        view = view_of(plan)
        self.views[view.name] = view
        address = self.report_socket.address
        return replace(
            plan,
            source=replace(plan.source, metrics_address=address),
            output=replace(plan.output, metrics_address=address),
        )

    def attach(self, spark: SparkSession) -> None:
        """Listen to the progress reports of every query of ``spark``."""
        self.metrics.state_rows_counted = spark.conf.get(TRACK_STATE_ROWS, "true") == "true"
        jvm = getattr(spark.sparkContext._gateway, "proc", None)  # None: not our child
        self.metrics.jvm_pid = getattr(jvm, "pid", None)
        monitor = self

        class ProgressListener(StreamingQueryListener):
            def onQueryStarted(self, event: Any) -> None:  # noqa: N802
                """Nothing: :meth:`Monitor.tick` sees starts."""

            def onQueryProgress(self, event: Any) -> None:  # noqa: N802
                """A micro-batch completed."""
                monitor._report(event.progress.name, event.progress.json)

            def onQueryIdle(self, event: Any) -> None:  # noqa: N802
                """The query waits for data: alive."""
                name = monitor._run_ids.get(str(event.runId))
                if name is not None:
                    monitor.health.progressed(name, time.monotonic())
                    monitor.metrics.last_progress.labels(name).set(time.time())

            def onQueryTerminated(self, event: Any) -> None:  # noqa: N802
                """Nothing: the supervisor notices a stopped query."""

        self._listener = ProgressListener()
        spark.streams.addListener(self._listener)
        self._spark = spark

    def _report(self, name: str | None, progress_json: str) -> None:
        if name is None:
            return
        self.health.progressed(name, time.monotonic())
        self.metrics.last_progress.labels(name).set(time.time())
        self._reports.put(json.loads(progress_json))

    # -- the worker thread: metrics from reports, and input lag -------------------------------

    def _work(self) -> None:
        next_lag = time.monotonic() + LAG_EVERY_S
        while True:
            try:
                progress = self._reports.get(timeout=1.0)
            except queue.Empty:
                progress = {}
            if progress is None:
                return
            try:
                if isinstance(progress, BatchCounts):
                    self._read_to(progress)
                elif progress:
                    self._batch_done(progress)
                if time.monotonic() >= next_lag:
                    next_lag = time.monotonic() + LAG_EVERY_S
                    self._sample_lag()
            except Exception as exc:  # a metric is lost, the service goes on
                log.warning("could not update metrics: %s", exc)

    def _batch_done(self, progress: dict[str, Any]) -> None:
        view = self.views.get(str(progress.get("name")))
        if view is None:
            return
        ends = self.metrics.batch_done(view, progress, self._offsets.first)
        with self._lock:
            if ends:  # a long batch's report names no partition: its task reports them
                self._ends[view.name] = ends
            self._batches[view.name] = self._batches.get(view.name, 0) + 1
        # Spark reports a batch once its commit log has it: lag tools may see it now.
        self._lag_groups.commit(view.name, ends)

    def _read_to(self, report: BatchCounts) -> None:
        """A continuous task's sub-batches committed up to ``report.positions``.

        Their output is committed, so lag tools may see the input read to there, as after a
        micro-batch.
        """
        view = self.views[report.pipeline]
        leases = self._leases.setdefault(view.name, {})
        leases[report.lease] = {**leases.get(report.lease, {}), **report.positions}
        ends = least_read(leases)
        with self._lock:
            self._ends[view.name] = ends
        self._lag_groups.commit(view.name, ends)

    def _sample_lag(self) -> None:
        with self._lock:
            ends = {name: dict(offsets) for name, offsets in self._ends.items()}
        for name, offsets in ends.items():
            self.metrics.lag(self.views[name], offsets, self._offsets.ends(list(offsets)))
        self._sample_visibility()

    def _sample_visibility(self) -> None:
        """Check that each query's committed output reaches ``read_committed`` readers."""
        now = time.monotonic()
        for name, view in self.views.items():
            with self._lock:
                batches = self._batches.get(name, 0)
            if not batches:
                continue
            topics = [*view.outputs, view.dead_letter_topic]
            try:
                stable, ends = self._offsets.stable_and_ends(topics)
            except Exception as exc:  # a check is skipped, never the service stopped
                log.debug("no last stable offsets for %s: %s", name, exc)
                continue
            check = self._visibility.setdefault(name, OutputVisibility(self.health.stall_after_s))
            hidden = check.sample(stable, ends, batches, now)
            health = self.health.of(name)
            if hidden is not None and health.hidden_output is None:
                log.error("pipeline %s: %s", name, hidden, extra={"pipeline": name})
            elif hidden is None and health.hidden_output is not None:
                log.info("pipeline %s: its output is visible again", name, extra={"pipeline": name})
            health.hidden_output = hidden

    def _batch_written(self, report: BatchCounts) -> None:
        """A micro-batch committed, or a continuous task's sub-batches: counts into the metrics.

        A batch whose joiner calls failed is one WARN line, naming the first failure; one
        whose tasks replayed it and found it committed, an INFO line (``daemon verify`` counts
        them, proof that its kills made the replay path run); a long batch that ended early
        (its state passed ``held_state_budget``), an INFO line saying so.
        """
        view = self.views.get(report.pipeline)
        if view is None:
            return
        self.metrics.batch_written(view, report)
        if report.positions:
            # A continuous task reports about once a second, between the long batches'
            # progress reports from Spark: it is running.
            self.health.progressed(view.name, time.monotonic())
            self.metrics.last_progress.labels(view.name).set(time.time())
            self._reports.put(report)
        replayed = report.replay_line()
        if replayed is not None:
            log.info("%s", replayed, extra={"pipeline": view.name})
        if report.ended_early:
            log.info(
                "pipeline %s: %s", view.name, report.ended_early, extra={"pipeline": view.name}
            )
        failed = report.failure_line()
        if failed is not None:
            log.warning("%s", failed, extra={"pipeline": view.name})

    def _read_on(self, report: MissingOffsetsResumed) -> None:
        """The source went on past offsets the broker no longer has: one WARN line each."""
        view = self.views.get(report.pipeline)
        if view is None:
            return
        name = view.name
        for resumed in report.resumed:
            log.warning("%s", resumed.warning(name), extra={"pipeline": name})
            self.metrics.read_on(name, resumed)

    # -- the supervisor's tick: running, ready, watchdog ------------------------------------

    def tick(self, pipelines: Sequence[SupervisedQuery], now: float) -> None:
        """Take the supervisor's view of every pipeline; notify systemd as due."""
        running = []
        self.health.supervised(now)
        for pipe in pipelines:
            query = pipe.query
            if query is not None and query is not self._seen.get(pipe.name):
                self._seen[pipe.name] = query
                self.health.started(pipe.name, now)
                try:
                    self._run_ids[str(query.runId)] = pipe.name
                except Exception:  # noqa: S110 - no run id: only idle reports go unheard
                    pass
            is_running = bool(pipe.restart_at is None and query is not None and query.isActive)
            health = self.health.of(pipe.name)
            health.running, health.last_failure = is_running, pipe.last_failure
            health.stuck = pipe.stuck
            health.stopped = pipe.stopped
            # Not started yet (a failed start has a restart time): its turn has not come.
            health.waiting = query is None and pipe.restart_at is None and not pipe.stopped
            self.metrics.supervision(
                pipe.name, running=is_running, failures=pipe.failures, restarts=pipe.restarts
            )
            if is_running:
                running.append(pipe.name)
        self._notify(pipelines, running, now)

    def _notify(self, pipelines: Sequence[SupervisedQuery], running: list[str], now: float) -> None:
        status = f"{len(running)} of {len(pipelines)} pipelines running"
        down = [pipe.name for pipe in pipelines if pipe.name not in running]
        if down:
            status += f"; restarting: {', '.join(down)}"
        stuck = [pipe.name for pipe in pipelines if pipe.stuck is not None]
        if stuck:
            status += f"; stuck: {', '.join(stuck)}"
        if not self._ready_sent and len(running) == len(pipelines):
            self._ready_sent = True
            self._status = status
            self.notifier.send(READY="1", STATUS=status)
            log.info("ready: %s", status)
        elif status != self._status and self._ready_sent:
            self._status = status
            self.notifier.send(STATUS=status)
        stalled = set(self.health.stalled(now))
        for name in sorted(stalled - self._stalled):
            log.error(
                "pipeline %s has not progressed for %.0f s; the systemd watchdog is no longer fed",
                name,
                self.health.stall_after_s,
                extra={"pipeline": name},
            )
        self._stalled = stalled
        # The daemon's one verdict for alerts: failing the same way again and again, or hung.
        for pipe in pipelines:
            verdict = pipe.stuck is not None or pipe.name in stalled
            self.metrics.stuck.labels(pipe.name).set(1 if verdict else 0)
        interval = self.notifier.watchdog_interval_s
        if self._ready_sent and interval is not None and not stalled:
            if now - self._last_ping >= interval:
                self._last_ping = now
                self.notifier.send(WATCHDOG="1")

    def waiting(self, why: str, for_s: float) -> None:
        """Start-up is held up (no broker answers yet): say why in ``/readyz`` and to systemd.

        Args:
            why: the reason, for ``/readyz`` and ``systemctl status``.
            for_s: how long until the next try is over; systemd's start timeout is extended
                by that much, so that it does not kill a daemon that is waiting on purpose.
        """
        self._waiting = why
        self.notifier.send(STATUS=why, EXTEND_TIMEOUT_USEC=str(int(for_s * 1_000_000)))

    def readiness(self) -> tuple[bool, str]:
        """For ``/readyz``: whether every query has progressed recently; a line per query."""
        now = time.monotonic()
        lines = [f"{name}: {why}" for name, why in self.health.report(now).items()]
        if not self.health.queries:
            lines = ["; ".join(filter(None, ["no pipeline has started yet", self._waiting]))]
        return self.health.ready(now), redact("\n".join(lines))

    def liveness(self) -> tuple[bool, str]:
        """For ``/livez``: False once a query is stalled, as the systemd watchdog sees it."""
        return self.health.liveness(time.monotonic())

    # -- shutdown ----------------------------------------------------------------------------

    def stopping(self) -> None:
        """Tell systemd the service is stopping (no more watchdog pings are due)."""
        self.notifier.send(STOPPING="1", STATUS="stopping")

    def close(self) -> None:
        """Stop listening, serving and sampling."""
        if self._spark is not None and self._listener is not None:
            try:
                self._spark.streams.removeListener(self._listener)
            except Exception:  # noqa: S110 - the session may be gone already
                pass
        self._reports.put(None)
        self._worker.join(timeout=5.0)
        self.report_socket.close()
        if not self._worker.is_alive():  # else it may still be asking the broker for offsets
            self._offsets.close()
            self._lag_groups.flush()
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
