"""The service's Prometheus metrics and health, computed from what Spark and the sink report.

How it works: three sources feed one :class:`Metrics` registry and one :class:`Health`.

- Spark's progress report of every micro-batch (a ``StreamingQueryProgress``, as JSON): the
  source's start and end offsets per ``topic/partition`` give the records read per input, its
  ``durationMs.triggerExecution`` the batch duration, and the state operator's
  ``numRowsTotal`` the rows of join state (one per state bucket in use), when Spark counts
  them (see :data:`daemon.spark.session.TRACK_STATE_ROWS`; off by default). Idle reports, which
  Spark sends about every 10 s while no data comes, only say the query is alive.
- The Kafka sink's per-batch counts (:class:`~daemon.model.reports.BatchCounts`, through the
  daemon's report socket, :mod:`daemon.report_socket`): records written per output
  and dead letters per reason, of committed batches only; the end-to-end latency of the
  records written (:mod:`daemon.model.latency`), and each input's newest event time read, from
  which the event-time lag is the time since, at each scrape.
- The supervisor: failures and restarts of each pipeline's query, whether it is running.

Beside them, without a ``pipeline`` label: ``enrichd_build_info`` (enrichd's version and the
Python and PySpark it runs on), the daemon process's own CPU, memory and open files
(prometheus-client's ``process_*`` metrics) and the same of Spark's JVM, the driver, which
in local mode is the executor too (``enrichd_jvm_process_*``, once the JVM has started).

Input lag per partition is the log end (Kafka ListOffsets, latest) minus the end offset of
the last batch, sampled every few seconds. On Tansu, the development broker, ListOffsets
under-reports the log end (see ``docs/operations.md``), so lag reads low there.

Every metric is labelled with ``pipeline``, the streaming query's name: a pipeline's name, or
``NAME.OUTPUT`` for a joiner's second stage.
"""

from __future__ import annotations

import json
import platform
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    Info,
    ProcessCollector,
)
from prometheus_client.core import HistogramMetricFamily
from prometheus_client.registry import Collector

from daemon.model.latency import LATENCY_BUCKETS, Tally
from daemon.model.reports import BatchCounts, Resumed
from daemon.model.wire import RESETS, parse_offsets, split_partition_name

BATCH_SECONDS_BUCKETS = (0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
"""Micro-batches take from ~0.2 s (stateless) to minutes (a large first batch after downtime)."""


@dataclass(frozen=True)
class PipelineView:
    """What the metrics need to know of one streaming query: names of its topics."""

    name: str
    inputs: Mapping[str, str]
    """Input topic -> input name (the joiner's role)."""
    outputs: Mapping[str, str]
    """Output topic -> output name (``output``, or a secondary output's name)."""
    dead_letter_topic: str


def moved_starts(offsets: object) -> dict[str, int]:
    """Where a plan's ranges start instead of at the batch's start (its :data:`RESETS` entry).

    The source moves a partition's start past offsets the broker no longer has
    (``on_missing_offsets``): records between are not read, so not counted as read.
    """
    if isinstance(offsets, str):
        offsets = json.loads(offsets) if offsets.strip() else {}
    moved = offsets.get(RESETS) if isinstance(offsets, dict) else None
    return {str(name): int(at) for name, at in (moved or {}).items()}


def topic_of(name: str) -> str:
    """The topic of a source offset key ``topic/partition``."""
    return split_partition_name(name)[0]


def records_read(start: Mapping[str, int], end: Mapping[str, int]) -> dict[str, int]:
    """Records per topic between two source offsets (``end - start`` summed by topic)."""
    counts: dict[str, int] = {}
    for name, stop in end.items():
        n = stop - start.get(name, stop)
        if n > 0:
            counts[topic_of(name)] = counts.get(topic_of(name), 0) + n
    return counts


class LatencyHistogram(Collector):
    """``enrichd_end_to_end_latency_seconds`` per pipeline and output, from the tasks' tallies.

    A collector of its own, since the observations arrive already counted per bucket
    (:mod:`daemon.model.latency`), which ``prometheus_client.Histogram`` cannot take in.
    """

    name = "enrichd_end_to_end_latency_seconds"

    def __init__(self, registry: CollectorRegistry) -> None:
        self._lock = threading.Lock()
        self._tallies: dict[tuple[str, str], Tally] = {}
        registry.register(self)

    def add(self, pipeline: str, output: str, tally: Tally) -> None:
        """Add one batch's tally of an output."""
        counts, total = tally
        with self._lock:
            mine = self._tallies.get((pipeline, output))
            if mine is not None:
                counts = [a + b for a, b in zip(mine[0], counts, strict=True)]
                total += mine[1]
            self._tallies[(pipeline, output)] = (list(counts), float(total))

    def collect(self) -> Iterator[HistogramMetricFamily]:
        """The histogram, cumulative by bucket as Prometheus has it."""
        family = HistogramMetricFamily(
            self.name,
            "Seconds from a source record's Kafka timestamp to the commit of the records it "
            "caused, per output.",
            labels=["pipeline", "output"],
        )
        with self._lock:
            tallies = dict(self._tallies)
        for (pipeline, output), (counts, total) in sorted(tallies.items()):
            bounds = [*(repr(bound) for bound in LATENCY_BUCKETS), "+Inf"]
            cumulative, seen = [], 0
            for bound, count in zip(bounds, counts, strict=True):
                seen += count
                cumulative.append((bound, seen))
            family.add_metric([pipeline, output], cumulative, total)
        yield family


def is_late(reason: str) -> bool:
    """Whether a dead letter's reason means the record came too late to be joined."""
    return reason.startswith("Late") or reason.startswith("TooOld")


def build_labels() -> dict[str, str]:
    """The labels of ``enrichd_build_info``: the versions of enrichd, Python and PySpark."""

    def version(distribution: str) -> str:
        try:
            return metadata.version(distribution)
        except metadata.PackageNotFoundError:
            return "unknown"

    return {
        "version": version("enrichd"),
        "python_version": platform.python_version(),
        "pyspark_version": version("pyspark"),
    }


class Metrics:
    """Every metric of the service, in a registry of its own (served at ``/metrics``)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        self.state_rows_counted = True
        """Whether Spark counts the state's rows; if not, its reports say 0 and the state rows
        gauge is left unset rather than read 0."""
        self.jvm_pid: int | None = None
        """The process id of Spark's JVM, once started: ``enrichd_jvm_process_*`` read it."""
        r, p = self.registry, ["pipeline"]
        Info(
            "enrichd_build", "enrichd's version and the Python and PySpark it runs on.", registry=r
        ).info(build_labels())
        ProcessCollector(registry=r)
        # /proc/- does not exist: nothing is reported until the JVM's pid is known.
        ProcessCollector("enrichd_jvm", pid=lambda: self.jvm_pid or "-", registry=r)
        self.records_in = Counter(
            "enrichd_records_in", "Records read, per input.", [*p, "input"], registry=r
        )
        self.records_out = Counter(
            "enrichd_records_out",
            "Records written in committed batches, per output (dead letters not included).",
            [*p, "output"],
            registry=r,
        )
        self.dead_letters = Counter(
            "enrichd_dead_letters",
            "Records sent to the dead-letter topic, per reason (enrichd.error.class).",
            [*p, "reason"],
            registry=r,
        )
        self.late_records = Counter(
            "enrichd_late_records",
            "Dead letters that came too late to be joined (reasons Late*, TooOld*).",
            p,
            registry=r,
        )
        self.joiner_events = Counter(
            "enrichd_joiner_events",
            "What the joiner counted (ctx.count): matched, unmatched, revisions, ...",
            [*p, "event"],
            registry=r,
        )
        self.batches = Counter("enrichd_batches", "Micro-batches completed.", p, registry=r)
        self.state_cache = Counter(
            "enrichd_state_cache_loads",
            "Loads of stored state buckets with the worker cache on, by outcome: hit (the "
            "Python worker's decoded copy was current) or miss (read from the state store).",
            [*p, "outcome"],
            registry=r,
        )
        self.joiner_failures = Counter(
            "enrichd_joiner_failures",
            "Joiner calls that raised or yielded what cannot be written; their records are "
            "dead letters of reason JoinerFailed.",
            p,
            registry=r,
        )
        self.replayed_tasks = Counter(
            "enrichd_replayed_tasks",
            "Tasks that replayed a micro-batch and found by its marker that it had committed "
            "before, so wrote nothing again.",
            p,
            registry=r,
        )
        self.batch_seconds = Histogram(
            "enrichd_batch_duration_seconds",
            "Wall time of each micro-batch (Spark's triggerExecution).",
            p,
            buckets=BATCH_SECONDS_BUCKETS,
            registry=r,
        )
        self.state_rows = Gauge(
            "enrichd_state_rows",
            "Rows of join state after the last micro-batch (one per state bucket in use), "
            "when Spark counts them.",
            p,
            registry=r,
        )
        self.input_lag = Gauge(
            "enrichd_input_lag_records",
            "Records in a partition after the last micro-batch's end (log end - end offset).",
            [*p, "topic", "partition"],
            registry=r,
        )
        self.last_progress = Gauge(
            "enrichd_last_progress_timestamp_seconds",
            "Unix time of the query's last progress report (a batch, or an idle report).",
            p,
            registry=r,
        )
        self.latency = LatencyHistogram(r)
        self.event_time_lag = Gauge(
            "enrichd_event_time_lag_seconds",
            "Seconds from the newest event time read from an input (in committed batches) to "
            "now: grows while the input is quiet or behind.",
            [*p, "input"],
            registry=r,
        )
        self._newest_event: dict[tuple[str, str], float] = {}
        self.up = Gauge("enrichd_pipeline_up", "1 while the query runs, else 0.", p, registry=r)
        self.stuck = Gauge(
            "enrichd_pipeline_stuck",
            "1 while the query is stuck: a micro-batch failed the same way "
            "[service] stuck_after_failures times in a row, or has run without a progress "
            "report for --stall-timeout; else 0.",
            p,
            registry=r,
        )
        self.failures = Counter(
            "enrichd_pipeline_failures", "Query failures (each one is restarted).", p, registry=r
        )
        self.restarts = Counter(
            "enrichd_pipeline_restarts", "Queries restarted after a failure.", p, registry=r
        )
        self.offsets_skipped = Counter(
            "enrichd_input_offsets_skipped",
            "Input offsets never read because the broker no longer had the one a pipeline "
            "needed (on_missing_offsets earliest or latest), per partition.",
            [*p, "topic", "partition"],
            registry=r,
        )
        self.offset_resets = Counter(
            "enrichd_input_offset_resets",
            "Times a pipeline read on past offsets the broker no longer had, per partition.",
            [*p, "topic", "partition"],
            registry=r,
        )
        self._supervision: dict[str, tuple[int, int]] = {}

    def batch_written(self, view: PipelineView, report: BatchCounts) -> None:
        """Add one committed micro-batch's output counts, as the sink reported them."""
        for topic, n in report.records.items():
            if topic == view.dead_letter_topic:
                continue  # counted by reason below
            output = view.outputs.get(topic, topic)
            self.records_out.labels(view.name, output).inc(int(n))
        for reason, n in report.dead_letters.items():
            self.dead_letters.labels(view.name, reason).inc(int(n))
            if is_late(reason):
                self.late_records.labels(view.name).inc(int(n))
        for event, n in report.joiner.items():
            self.joiner_events.labels(view.name, event).inc(int(n))
        for topic, (counts, total) in report.latency.items():
            output = view.outputs.get(topic, topic)
            self.latency.add(view.name, output, ([int(n) for n in counts], float(total)))
        for role, ms in report.event_time.items():
            self.event_time_read(view.name, str(role), int(ms))
        for outcome, n in report.state_cache.items():
            self.state_cache.labels(view.name, outcome).inc(int(n))
        if report.failed_calls:
            self.joiner_failures.labels(view.name).inc(report.failed_calls)
        if report.replayed:
            self.replayed_tasks.labels(view.name).inc(report.replayed)
        for topic, n in report.read.items():  # a continuous task's; Spark's progress has none
            self.records_in.labels(view.name, view.inputs.get(topic, topic)).inc(int(n))

    def event_time_read(self, pipeline: str, role: str, ms: int) -> None:
        """Records of event time ``ms`` were read from an input: the lag counts from there."""
        key = (pipeline, role)
        first = key not in self._newest_event
        self._newest_event[key] = max(self._newest_event.get(key, 0.0), ms / 1000)
        if first:
            newest = self._newest_event
            self.event_time_lag.labels(pipeline, role).set_function(
                lambda: max(time.time() - newest[key], 0.0)
            )

    def batch_done(
        self,
        view: PipelineView,
        progress: Mapping[str, Any],
        first_offsets: Callable[[list[str]], dict[str, int]] | None = None,
    ) -> dict[str, int]:
        """Take one micro-batch's progress report; return the batch's end offsets.

        Args:
            view: the query's topics.
            progress: the report, as parsed JSON.
            first_offsets: where partitions start that the report gives no start for (the
                first batch of a new checkpoint): ``topic/partition`` names -> offsets. Without
                it they count from 0.
        """
        self.batches.labels(view.name).inc()
        self.batch_seconds.labels(view.name).observe(
            float(dict(progress.get("durationMs") or {}).get("triggerExecution", 0)) / 1000
        )
        if self.state_rows_counted:
            operators = progress.get("stateOperators") or ()
            self.state_rows.labels(view.name).set(
                sum(int(op.get("numRowsTotal", 0)) for op in operators)
            )
        ends: dict[str, int] = {}
        for source in progress.get("sources") or ():
            end = parse_offsets(source.get("endOffset"))
            start = {
                **parse_offsets(source.get("startOffset")),
                **moved_starts(source.get("endOffset")),
            }
            unknown = [name for name in end if name not in start]
            if unknown:
                found = first_offsets(unknown) if first_offsets else {}
                start = {**{name: found.get(name, 0) for name in unknown}, **start}
            for topic, n in records_read(start, end).items():
                self.records_in.labels(view.name, view.inputs.get(topic, topic)).inc(n)
            ends.update(end)
        return ends

    def lag(self, view: PipelineView, ends: Mapping[str, int], log_ends: Mapping[str, int]) -> None:
        """Set each partition's lag: its log end minus where the last batch ended (not < 0)."""
        for name, end in ends.items():
            if name in log_ends:
                topic, partition = split_partition_name(name)
                lag = max(log_ends[name] - end, 0)
                self.input_lag.labels(view.name, topic, str(partition)).set(lag)

    def read_on(self, pipeline: str, resumed: Resumed) -> None:
        """Count a partition the source went on in past offsets the broker no longer had."""
        labels = (pipeline, resumed.missing.topic, str(resumed.missing.partition))
        self.offset_resets.labels(*labels).inc()
        self.offsets_skipped.labels(*labels).inc(resumed.skipped)

    def supervision(self, name: str, *, running: bool, failures: int, restarts: int) -> None:
        """Bring the failure and restart counters up to the supervisor's totals."""
        self.up.labels(name).set(1 if running else 0)
        seen_failures, seen_restarts = self._supervision.get(name, (0, 0))
        # labels() makes the series exist at 0: "no failures" shows as 0, not as absent.
        self.failures.labels(name).inc(max(failures - seen_failures, 0))
        self.restarts.labels(name).inc(max(restarts - seen_restarts, 0))
        self._supervision[name] = (max(failures, seen_failures), max(restarts, seen_restarts))


@dataclass
class QueryHealth:
    """What is known of one query's liveness, in monotonic seconds."""

    started_at: float | None = None
    last_progress_at: float | None = None
    running: bool = False
    last_failure: str | None = None
    """Why the query last failed, as the supervisor logged it."""
    stuck: str | None = None
    """Why the query is stuck (the supervisor's words), or None."""
    stopped: bool = False
    """The supervisor stopped the query for good: only the operator can mend its failure."""
    hidden_output: str | None = None
    """Why what the query commits does not reach ``read_committed`` readers, if it does not
    (:class:`OutputVisibility`)."""
    waiting: bool = False
    """Not started yet: the pipelines of a file start one after another, and it waits its
    turn (``daemon.service.supervisor.settled``)."""


@dataclass
class Health:
    """Readiness and stall detection over every query of the service.

    A query has *progressed recently* when Spark reported on it (a batch or an idle report,
    which comes every ~10 s without data) within ``stall_after_s``. It is *stalled* when it
    runs and has not done so since it started or since its last report: a micro-batch stuck
    somewhere. A query waiting for its restart is neither ready nor stalled: the supervisor
    is handling it.

    Liveness (:meth:`liveness`) fails exactly when the systemd watchdog is no longer fed: a
    query is stalled, or the supervisor itself has not looked at its queries
    (:meth:`supervised`) for ``stall_after_s``. A query that fails again and again is not
    a liveness failure: the supervisor restarts it, and a new process would fail the same
    way.
    """

    stall_after_s: float = 300.0
    queries: dict[str, QueryHealth] = field(default_factory=dict)
    last_supervised: float | None = None
    """When the supervisor last looked at its queries (monotonic s); None: not yet."""

    def of(self, name: str) -> QueryHealth:
        """The record of query ``name``, created on first use."""
        return self.queries.setdefault(name, QueryHealth())

    def started(self, name: str, now: float) -> None:
        """The query (re)started at ``now``."""
        query = self.of(name)
        query.started_at, query.running = now, True

    def progressed(self, name: str, now: float) -> None:
        """Spark reported on the query at ``now``."""
        self.of(name).last_progress_at = now

    def _since(self, query: QueryHealth) -> float | None:
        times = [t for t in (query.started_at, query.last_progress_at) if t is not None]
        return max(times) if times else None

    def stalled(self, now: float) -> list[str]:
        """The running queries with neither a start nor a report within ``stall_after_s``."""
        out = []
        for name, query in self.queries.items():
            since = self._since(query)
            if query.running and since is not None and now - since > self.stall_after_s:
                out.append(name)
        return out

    def supervised(self, now: float) -> None:
        """The supervisor looked at its queries at ``now``: its loop still turns."""
        self.last_supervised = now

    def liveness(self, now: float) -> tuple[bool, str]:
        """For ``/livez``: whether the service still makes progress, and if not, why.

        Returns:
            ``(True, "ok")``, or False and a line per stalled query (and one for a
            supervisor that stopped turning).
        """
        lines = [
            f"{name}: stalled: no progress report for {now - since:.0f} s "
            f"(--stall-timeout {self.stall_after_s:.0f} s)"
            for name in sorted(self.stalled(now))
            if (since := self._since(self.queries[name])) is not None
        ]
        last = self.last_supervised
        if last is not None and now - last > self.stall_after_s:
            lines.append(f"the supervisor has not checked its pipelines for {now - last:.0f} s")
        return (False, "\n".join(lines)) if lines else (True, "ok")

    def report(self, now: float) -> dict[str, str]:
        """Every query: ``progressing``, or why it is not ready (for ``/readyz``)."""
        reasons = self.not_ready(now)
        return {name: reasons.get(name, "progressing") for name in sorted(self.queries)}

    def not_ready(self, now: float) -> dict[str, str]:
        """Queries that are not ready, with why; empty when every query is."""
        reasons: dict[str, str] = {}
        for name, query in self.queries.items():
            if query.waiting:
                reasons[name] = "waiting its turn to start (a file's pipelines start one by one)"
            elif not query.running and query.stopped:
                reasons[name] = f"stopped: {query.last_failure}"
            elif query.stuck is not None:
                reasons[name] = query.stuck
            elif not query.running:
                why = f": {query.last_failure}" if query.last_failure else ""
                reasons[name] = f"not running (failed{why}; waiting for its restart)"
            elif query.last_progress_at is None:
                reasons[name] = "started; no micro-batch or idle report yet"
            elif now - query.last_progress_at > self.stall_after_s:
                ago = now - query.last_progress_at
                reasons[name] = f"no progress for {ago:.0f} s"
            elif query.hidden_output is not None:
                reasons[name] = query.hidden_output
        return reasons

    def ready(self, now: float) -> bool:
        """Whether there is at least one query and every query has progressed recently."""
        return bool(self.queries) and not self.not_ready(now)


@dataclass
class OutputVisibility:
    """Whether the output a query commits becomes visible to ``read_committed`` readers.

    Each sample compares an output partition's last stable offset (where ``read_committed``
    readers stop: ListOffsets, latest, read committed) with its log end. A partition whose
    last stable offset stays behind its log end, not moving for ``after_s`` while the query
    completes micro-batches, holds their commits back from every such reader: the query
    "succeeds" and nobody downstream sees it. A transaction that is merely open moves on
    within the broker's transaction timeout (a minute by default), committed or aborted.

    Args:
        after_s: how long a last stable offset may stand still behind the log end.
    """

    after_s: float
    _behind: dict[str, tuple[int, float, int]] = field(default_factory=dict)
    """Per partition behind its log end: its last stable offset, since when it stands
    there, and the query's completed micro-batches then."""

    def sample(
        self, stable: Mapping[str, int], ends: Mapping[str, int], batches: int, now: float
    ) -> str | None:
        """Take one sample; why the output is held back, or None when it is not.

        Args:
            stable: each ``topic/partition``'s last stable offset.
            ends: each ``topic/partition``'s log end.
            batches: micro-batches the query has completed so far.
            now: monotonic seconds.
        """
        held: list[tuple[float, str]] = []
        for name, end in ends.items():
            offset = stable.get(name)
            if offset is None or offset >= end:
                self._behind.pop(name, None)
                continue
            seen = self._behind.get(name)
            if seen is None or seen[0] != offset:
                self._behind[name] = (offset, now, batches)
                continue
            _, since, batches_then = seen
            if now - since >= self.after_s and batches > batches_then:
                held.append(
                    (
                        now - since,
                        f"output {name} held back: read_committed readers stop at offset "
                        f"{offset} of {end} for {now - since:.0f} s, while "
                        f"{batches - batches_then} micro-batches committed",
                    )
                )
        return max(held)[1] if held else None
