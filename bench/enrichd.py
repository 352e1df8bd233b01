"""enrichd's side: the ``comap`` pipeline of ``examples/tweet-views.toml`` through the service.

The pipeline file is loaded as users would write it, pointed at the benchmark's broker and
topics, given a fresh checkpoint and unique output names, then run by the service behind
``daemon run`` (:func:`daemon.service.supervisor.run_service`: planning, its queries on one Spark
session, the progress listener, metrics, lag sampling, supervision) in a thread of this
process (:func:`serving`), which can then read the queries' progress reports.
The run ends when the query's last progress report says its source reached every produced
partition end. Timing comes from the progress reports themselves: each batch's trigger start
(``timestamp``) plus its ``durationMs.triggerExecution`` is when it ended.
"""

from __future__ import annotations

import logging
import re
import tempfile
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from bench import tuning
from bench.operators import Operator, operators_of
from bench.resources import PeakMemory, Peaks, state_bytes
from bench.workloads import REPO, Topics
from daemon.model.wire import parse_offsets
from daemon.replay import committed_ends, consumed_to

EXAMPLE = REPO / "examples" / "tweet-views.toml"


@dataclass(frozen=True)
class Batch:
    """One micro-batch that read records."""

    batch_id: int
    rows: int
    started: float
    """Trigger start, epoch seconds."""
    durations_ms: dict[str, int]
    operators: tuple[Operator, ...] = ()
    """Its stateful operators' figures, source first (:mod:`bench.operators`)."""

    @classmethod
    def of(cls, report: Any) -> Batch:
        """The batch of a progress report. Its records are its offset ranges' sizes (the
        benchmark's topics are fresh, so a first batch starts at 0): Spark's ``numInputRows``
        counts the source's packs of records."""
        records = 0
        for source in report.sources:
            start = parse_offsets(source.startOffset)
            records += sum(
                end - start.get(name, 0) for name, end in parse_offsets(source.endOffset).items()
            )
        return cls(
            report.batchId,
            records,
            _epoch(report.timestamp),
            dict(report.durationMs),
            operators_of(report),
        )

    @property
    def ended(self) -> float:
        """Trigger end, epoch seconds."""
        return self.started + self.durations_ms.get("triggerExecution", 0) / 1000


@dataclass
class EnrichdResult:
    """A measured enrichd run."""

    input_records: int
    session_start_s: float
    query_started: float
    """Epoch seconds when the service was started (after the session was up)."""
    batches: list[Batch] = field(default_factory=list)
    output_topic: str = ""
    dead_letter_topic: str = ""
    max_records_per_batch: int = 0
    peaks: Peaks = field(default_factory=Peaks)
    """Peak RSS while the query ran (this process, the JVM, the Python workers)."""
    state_bytes: int = 0
    """Bytes of the checkpoint's state folder when the query stopped."""
    stage_batches: list[list[Batch]] = field(default_factory=list)
    """The batches of each later stage (a joiner's downstream query), run after this one."""
    state_cache: dict[str, int] = field(default_factory=dict)
    """Loads of stored state buckets by the worker cache's outcome (``hit``, ``miss``), from
    the service's ``enrichd_state_cache_loads_total`` at the run's end."""

    @property
    def first_batch_s(self) -> float:
        """From the service's start to the end of the first batch that read records."""
        return self.batches[0].ended - self.query_started

    @property
    def end_to_end_rate(self) -> float:
        """Input records / (the service's start to the end of the last batch)."""
        return self.input_records / (self.batches[-1].ended - self.query_started)

    @property
    def sustained_rate(self) -> float:
        """Records after the first batch over the time after it; one batch: its own rate."""
        if len(self.batches) == 1:
            only = self.batches[0]
            return only.rows / (only.durations_ms["triggerExecution"] / 1000)
        rows = sum(b.rows for b in self.batches[1:])
        return rows / (self.batches[-1].ended - self.batches[0].ended)

    def steady(self) -> list[Batch]:
        """The batches after the first (the first alone when there is only one)."""
        return self.batches[1:] or self.batches[:1]

    def mean_ms(self, phase: str, batches: list[Batch] | None = None) -> float:
        """Mean ``durationMs[phase]`` over ``batches`` (default: :meth:`steady`)."""
        chosen = self.steady() if batches is None else batches
        return sum(b.durations_ms.get(phase, 0) for b in chosen) / len(chosen)


def _epoch(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def configure(
    servers: str,
    topics: Topics,
    checkpoint: Path,
    max_records_per_batch: int,
    trigger_ms: int = 0,
) -> tuple[Any, Any]:
    """The example's pipeline file and its pipeline, pointed at ``topics`` on ``servers``.

    Output and dead-letter topics get fresh names; ``trigger_ms`` 0 keeps the pipeline's
    default (the next batch as soon as the last one ends).
    """
    from daemon.model.config import KafkaConfig, load_pipeline_file

    example = load_pipeline_file(EXAMPLE)
    file = example.model_copy(update={"kafka": KafkaConfig(bootstrap_servers=servers)})
    pipe = file.pipeline[0]
    suffix = uuid.uuid4().hex[:8]
    inputs = {
        "one": pipe.inputs["one"].model_copy(update={"topic": topics.users}),
        "many": pipe.inputs["many"].model_copy(update={"topic": topics.tweets}),
    }
    pipe = pipe.model_copy(
        update={
            "name": f"bench-{suffix}",
            "inputs": inputs,
            "output": pipe.output.model_copy(update={"topic": f"bench-views-{suffix}"}),
            "dead_letter_topic": f"bench-views-{suffix}.dlq",
            "checkpoint": checkpoint,
            "max_records_per_batch": max_records_per_batch,
            "trigger": trigger_ms,
        }
    )
    return file, pipe


def run_enrichd(
    servers: str,
    topics: Topics,
    ends: dict[str, int],
    input_records: int,
    max_records_per_batch: int,
    timeout_s: float = 900.0,
) -> EnrichdResult:
    """Run the example's comap pipeline over the produced topics until all is consumed.

    Raises:
        RuntimeError: the query failed or did not consume everything within ``timeout_s``.
    """
    with tempfile.TemporaryDirectory(prefix="enrichd-bench-") as tmp:
        file, pipe = configure(servers, topics, Path(tmp) / "checkpoint", max_records_per_batch)
        return run_pipeline(file, pipe, ends, input_records, timeout_s)


def run_pipeline(
    file: Any,
    pipe: Any,
    ends: dict[str, int],
    input_records: int,
    timeout_s: float = 900.0,
    stages: bool = False,
) -> EnrichdResult:
    """Serve one pipeline (``PipelineConfig`` of ``file``) until it consumed ``ends``.

    The pipeline's checkpoint must be a fresh folder the caller removes afterwards; its state
    folder is measured when the service has stopped. Peak memory is sampled from the
    session's start to the service's stop. With ``stages``, a joiner's later stages (its
    downstream queries, which the service runs beside the first) are awaited too, each until
    it read everything the one before wrote; their batches go to ``stage_batches`` and do not
    count in the first stage's rates.

    Raises:
        RuntimeError: the service or a query failed, or did not consume everything within
            ``timeout_s``.
    """
    from daemon.pipeline.plan import client_conf
    from daemon.spark.session import spark_session

    conf = client_conf(file)
    with PeakMemory() as memory:
        began = time.monotonic()
        spark = spark_session(tuning.spark(file.spark))
        result = EnrichdResult(
            input_records=input_records,
            session_start_s=time.monotonic() - began,
            query_started=time.time(),
            output_topic=pipe.output.topic,
            dead_letter_topic=pipe.dead_letters,
            max_records_per_batch=pipe.max_records_per_batch,
        )
        with serving(file, pipe, spark, timeout_s, result.state_cache) as query:
            result.batches = await_consumed(query(pipe.name), ends, timeout_s)
            for output in pipe.outputs if stages else ():
                # The stage of output NAME reads the pipeline's output topic, now complete.
                stage_ends = committed_ends(conf, pipe.output.topic)
                stage = query(f"{pipe.name}.{output}")
                result.stage_batches.append(await_consumed(stage, stage_ends, timeout_s))
    result.peaks = memory.result
    result.state_bytes = state_bytes(Path(pipe.checkpoint))
    return result


@contextmanager
def serving(
    file: Any,
    pipe: Any,
    spark: Any,
    timeout_s: float = 120.0,
    state_cache: dict[str, int] | None = None,
) -> Iterator[Callable[[str], Any]]:
    """``daemon run``'s service over ``pipe`` alone, in a thread; yields ``query(name)``.

    ``spark`` is the process's session (:func:`daemon.spark.session.spark_session`), which
    the service reuses: started by the caller, its start-up is timed apart from the run's.
    ``query(name)`` waits until the service runs the query of that name (the pipeline's, or
    ``PIPELINE.OUTPUT`` for a joiner's later stage) and returns it. On leaving, the service
    is stopped as SIGTERM stops ``daemon run``: batches in flight finish, then the queries
    and the session stop. Before that, ``state_cache`` (if given) gets the service's counts
    of state bucket loads by the worker cache's outcome, read from its ``/metrics``.

    Raises:
        RuntimeError: the service failed, or a query did not start within ``timeout_s``.
    """
    from daemon.service.supervisor import run_service

    stop = threading.Event()
    failures: list[BaseException] = []

    # The settings tried (bench.tuning): the session's, if the service starts it, and the
    # pipeline's state buckets.
    served = file.model_copy(
        update={"spark": tuning.spark(file.spark), "pipeline": [tuning.pipeline(pipe)]}
    )

    endpoint = _Endpoint()

    def serve() -> None:
        try:
            with endpoint.heard():
                run_service(served, stop=stop, http="127.0.0.1:0")
        except BaseException as exc:  # noqa: BLE001 - handed to the benchmark's thread
            failures.append(exc)

    def query(name: str) -> Any:
        deadline = time.monotonic() + timeout_s
        while True:
            if failures or not service.is_alive():
                raise RuntimeError(f"the service stopped: {failures[0] if failures else '?'}")
            running = [q for q in spark.streams.active if q.name == name]
            if running:
                return running[0]
            if time.monotonic() > deadline:
                raise RuntimeError(f"the service started no query {name!r} in {timeout_s:.0f}s")
            time.sleep(0.1)

    service = threading.Thread(target=serve, name="enrichd-service", daemon=True)
    service.start()
    try:
        yield query
        if state_cache is not None:
            if not endpoint.url:
                raise RuntimeError("the service logged no address for /metrics")
            state_cache.update(cache_loads(f"{endpoint.url}/metrics"))
    finally:
        stop.set()
        service.join(120)
    if failures:
        raise RuntimeError(f"the service failed: {failures[0]}")


class _Endpoint(logging.Handler):
    """Where the service's ``/metrics`` listens, from the line its monitor logs as it binds.

    The service binds port 0, so that the kernel picks a port no other server holds (a port
    picked beforehand can be taken before the service binds it); its monitor logs the URL it
    got, at INFO on ``enrichd.operations``, which :meth:`heard` lets through to this handler
    alone while the service starts.
    """

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.url = ""

    def emit(self, record: logging.LogRecord) -> None:
        """Keep the URL of a ``serving ... at URL`` line."""
        found = re.match(r"serving /healthz.* at (http://\S+)$", record.getMessage())
        if found:
            self.url = found.group(1)

    @contextmanager
    def heard(self) -> Iterator[None]:
        """Hear ``enrichd.operations``' INFO lines meanwhile; its level is restored after."""
        logger = logging.getLogger("enrichd.operations")
        level = logger.level
        logger.addHandler(self)
        if not logger.isEnabledFor(logging.INFO):
            logger.setLevel(logging.INFO)
        try:
            yield
        finally:
            logger.setLevel(level)
            logger.removeHandler(self)


def cache_loads(url: str) -> dict[str, int]:
    """``enrichd_state_cache_loads_total`` at ``url`` (a ``/metrics``), summed by outcome."""
    with urllib.request.urlopen(url, timeout=10) as answer:  # noqa: S310 - our own endpoint
        return loads_in(answer.read().decode("utf-8"))


def loads_in(text: str) -> dict[str, int]:
    """``enrichd_state_cache_loads_total`` in a ``/metrics`` text, summed by outcome."""
    from prometheus_client.parser import text_string_to_metric_families

    loads: dict[str, int] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "enrichd_state_cache_loads_total":
                outcome = sample.labels["outcome"]
                loads[outcome] = loads.get(outcome, 0) + int(sample.value)
    return loads


def cache_line(loads: dict[str, int]) -> list[str]:
    """A report's line on the worker cache's hit rate, if the run loaded stored buckets."""
    total = sum(loads.values())
    if not total:
        return []
    hits = loads.get("hit", 0)
    return [
        f"- State cache: {hits:,} of {total:,} loads of stored buckets ({hits / total:.0%}) "
        "found the Python worker's decoded copy current (`enrichd_state_cache_loads_total`); "
        "the others read the bucket from the state store."
    ]


def await_consumed(query: Any, ends: dict[str, int], timeout_s: float) -> list[Batch]:
    """Wait until ``query`` has consumed to ``ends``; its micro-batches that read records.

    Raises:
        RuntimeError: the query failed or did not get there within ``timeout_s``.
    """
    deadline = time.monotonic() + timeout_s
    while not consumed_to(query, ends):
        if query.exception() is not None:
            raise RuntimeError(f"the pipeline failed: {query.exception()}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"the pipeline did not consume everything in {timeout_s:.0f}s")
        time.sleep(0.1)
    batches = {report.batchId: Batch.of(report) for report in query.recentProgress}
    return [batches[i] for i in sorted(batches) if batches[i].rows]


PHASES = (
    "triggerExecution",
    "latestOffset",
    "addBatch",
    "walCommit",
    "commitOffsets",
    "queryPlanning",
    "getBatch",
)
"""The progress reports' ``durationMs`` phases a report's batch table shows."""


def batch_table(batches: list[Batch]) -> list[str]:
    """Markdown: each micro-batch's records and phase durations (ms)."""
    lines = [
        "| batch | records | " + " | ".join(PHASES) + " |",
        "|---:|---:|" + "---:|" * len(PHASES),
    ]
    for batch in batches:
        cells = " | ".join(f"{batch.durations_ms.get(p, 0):,}" for p in PHASES)
        lines.append(f"| {batch.batch_id} | {batch.rows:,} | {cells} |")
    return lines


def resources_lines(result: EnrichdResult, keys: int) -> list[str]:
    """A report's memory and state lines for an enrichd run over ``keys`` join keys."""
    from bench.resources import MIB, SAMPLE_INTERVAL_S, state_line

    peaks = result.peaks
    return [
        f"- Memory (enrichd run, sampled every {SAMPLE_INTERVAL_S:g} s over this process tree "
        f"from the Spark session's start to the query's stop): {peaks.describe()}. Spark's part "
        f"(JVM + Python workers) peaked at {peaks.spark / MIB:,.0f} MiB at most.",
        f"- State: {state_line(result.state_bytes, keys)}.",
        *cache_line(result.state_cache),
    ]
