"""asof: recommendations + moods -> recommendation views, with revisions (issue #5).

The workload of ``examples/recommendations.toml``: consultants' recommendations (left) and
moods (right), keyed by the consultant. Every record gets the next slot of a global
event-time clock (``--step-ms`` apart), a uniformly chosen consultant, and a side (exactly
``--right`` of them moods); a ``--late`` fraction of the moods reaches Kafka 30 s to 5 min
(event time) after it began, the rest at once. Records are produced in ingestion-time order
with the ingestion time as their Kafka timestamp, which is what enrichd's arrival order and
the raw loop's merge follow. A late mood makes the recommendations made since it began
wrong at first; enrichd corrects them at the next re-join (every ``rejoin_interval`` of
event time), which is where revisions come from.

Contenders: the raw loop (confluent-kafka + fastavro + the same per-key rules in plain
dicts: immediate answer, re-join on the event-time timer, revisions where the answer
changed, horizon and retention eviction) in 1 and 2 processes; Quix Streams' ``join_asof``
(one answer per recommendation, never revised); enrichd's ``asof`` pipeline of the example
on ``local[2]``, ``--runs`` times over the same topics (the median reported). The run is a
service run, not a replay: no end-of-input markers, so the final re-join at the end of input
does not happen in any contender. Unless ``--no-latency``, enrichd's end-to-end latency at a
fixed rate of recommendations offered follows, against the yardstick (see :mod:`bench.latencies`).
"""

from __future__ import annotations

import argparse
import random
import time
import uuid
from bisect import bisect_left, bisect_right
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench import commit, headline, rawjoin, twostream
from bench.enrichd import resources_lines
from bench.latencies import (
    add_latency_arguments,
    latencies_ok,
    latency_checks,
    latency_command,
    latency_section,
    run_latencies,
)
from bench.latency import LatencyResult, LatencyWorkload, Offer
from bench.rawjoin import Emit, RawJoin
from bench.report import Section
from bench.runs import add_runs_argument, local_cores, run_checks, spark_master
from bench.wording import (
    QUIX_SCALING,
    SERVICE_LINE,
    machine,
    markdown_table,
    plot_of,
    quix_option,
    run_date,
    run_header,
    throughput_table,
)
from bench.workloads import REPO, codec, count_records, create_input_topics
from daemon.model.config import DEFAULT_MAX_RECORDS_PER_BATCH

EXAMPLE = REPO / "examples" / "recommendations.toml"
_MOODS = ("calm", "grumpy", "cheerful", "tired", "focused", "anxious", "bold", "bored")
_PICKS = ("tea", "coffee", "juice", "water", "soda", "cocoa", "lemonade", "milk")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The workload's sizes and enrichd's batch cap and runs.

    Three times issue #5's sizes by default, so that the default cap makes six batches after
    the first (:data:`bench.runs.MIN_STEADY_BATCHES`).
    """
    parser.add_argument("--keys", type=int, default=1_000, help="consultants (join keys)")
    parser.add_argument("--left", type=int, default=3_000_000, help="recommendations")
    parser.add_argument("--right", type=int, default=300_000, help="moods")
    parser.add_argument("--late", type=float, default=0.1, help="fraction of moods that are late")
    parser.add_argument(
        "--step-ms", type=int, default=10, help="event time between consecutive records"
    )
    parser.add_argument(
        "--max-batch",
        type=int,
        default=DEFAULT_MAX_RECORDS_PER_BATCH,
        help="enrichd max_records_per_batch (the pipeline default)",
    )
    parser.add_argument("--seed", type=int, default=5, help="seed for keys, sides and delays")
    add_runs_argument(parser)
    add_latency_arguments(parser, "recommendations")


def example_options() -> dict[str, Any]:
    """The example's ``asof`` options, validated (durations in ms)."""
    from daemon.joiners.asof import AsOfOptions
    from daemon.model.config import load_pipeline_file

    pipe = load_pipeline_file(EXAMPLE).pipeline[0]
    return AsOfOptions.model_validate(pipe.options).model_dump()


def records(args: argparse.Namespace, topics: dict[str, str]) -> list[tuple[str, str, bytes, int]]:
    """The workload in production order: ``(topic, key, Avro value, Kafka timestamp)``."""
    rng = random.Random(args.seed)
    sides = ["right"] * args.right + ["left"] * args.left
    rng.shuffle(sides)
    late = set(rng.sample(range(args.right), round(args.right * args.late)))
    recommendation, mood = codec("recommendation"), codec("mood")
    base = 1_700_000_000_000
    rows: list[tuple[int, str, str, bytes]] = []
    moods = 0
    for slot, side in enumerate(sides):
        key = f"consultant-{rng.randrange(args.keys):05d}"
        event_time = base + slot * args.step_ms
        if side == "left":
            value = {
                "consultant": key,
                "event_time": event_time,
                "ingestion_time": event_time,
                "recommendation": rng.choice(_PICKS),
            }
            rows.append((event_time, topics["left"], key, recommendation.encode(value)))
            continue
        # Late moods arrive between 30 s and 5 min after they began, off the on-time grid.
        delay = rng.randrange(3_000, 30_000) * 10 + 5 if moods in late else 0
        moods += 1
        ingested = event_time + delay
        value = {
            "name": key,
            "event_time": event_time,
            "ingestion_time": ingested,
            "mood": rng.choice(_MOODS),
        }
        rows.append((ingested, topics["right"], key, mood.encode(value)))
    rows.sort(key=lambda row: row[0])  # stable: ties keep slot order
    return [(topic, key, value, ingested) for ingested, topic, key, value in rows]


class _Key:
    """One consultant's state in the raw loop, as ``daemon.joiners.asof.AsOfState``."""

    __slots__ = ("changed_from", "left", "right_times", "right_values", "stream_time", "tick")

    def __init__(self) -> None:
        self.stream_time: int | None = None
        self.tick: int | None = None
        self.right_times: list[int] = []
        self.right_values: list[dict[str, Any]] = []
        self.left: dict[str, list[Any]] = {}
        """identity -> [event time, value, answer, revision]"""
        self.changed_from: int | None = None


class RawAsOf(RawJoin):
    """The ``asof`` rules in plain dicts (event-time re-join; no ``left_id``; no re-sends)."""

    def __init__(self, options: dict[str, Any], emit: Emit) -> None:
        super().__init__(options, emit)
        self.retention: int = options["history_retention"]
        self.horizon: int = options["rejoin_horizon"]
        self.interval: int = options["rejoin_interval"]
        self.find = bisect_right if options["inclusive"] else bisect_left
        self.inclusive: bool = options["inclusive"]
        self.keys: dict[str, _Key] = {}
        self.revisions = 0

    def _answer(self, state: _Key, event_time: int) -> dict[str, Any] | None:
        before = self.find(state.right_times, event_time)
        return state.right_values[before - 1] if before else None

    def apply(self, role: str, value: dict[str, Any]) -> None:
        """Apply one record, then run the key's timer if its stream time crossed an interval."""
        left = role == "left"
        key = value["consultant"] if left else value["name"]
        event_time = value["event_time"]
        state = self.keys.get(key)
        if state is None:
            state = self.keys[key] = _Key()
        now = state.stream_time
        if now is not None and event_time < now - self.retention:
            self.late += 1
            return
        if now is None or event_time > now:
            now = state.stream_time = event_time
        if not left:
            at = bisect_right(state.right_times, event_time)
            state.right_times.insert(at, event_time)
            state.right_values.insert(at, value)
            if state.changed_from is None or event_time < state.changed_from:
                state.changed_from = event_time
        else:
            identity = f"{key}@{event_time}"
            answer = self._answer(state, event_time)
            kept = state.left.pop(identity, None)
            revision = 0 if kept is None else kept[3] + 1
            self.emit(identity, {"recommendation": value, "mood": answer, "revision": revision})
            if event_time >= now - self.horizon:
                state.left[identity] = [event_time, value, answer, revision]
        tick = now // self.interval
        last = state.tick
        if last is None or tick > last:
            state.tick = tick
        if last is not None and tick > last:
            self._timer(state, now)

    def _timer(self, state: _Key, now: int) -> None:
        """Re-join the kept events a new right record may precede; evict past the horizons."""
        since = state.changed_from
        if since is not None:
            for identity, kept in state.left.items():
                if kept[0] < since or (kept[0] == since and not self.inclusive):
                    continue
                answer = self._answer(state, kept[0])
                if answer == kept[2]:
                    continue
                kept[2] = answer
                kept[3] += 1
                self.revisions += 1
                self.emit(
                    identity, {"recommendation": kept[1], "mood": answer, "revision": kept[3]}
                )
        state.changed_from = None
        horizon = now - self.horizon
        for identity in [i for i, kept in state.left.items() if kept[0] < horizon]:
            del state.left[identity]
        first_kept = bisect_left(state.right_times, now - self.retention)
        if first_kept > 1:
            del state.right_times[: first_kept - 1]
            del state.right_values[: first_kept - 1]

    def state_entries(self) -> int:
        """Moods and recommendations held at the end."""
        return sum(len(s.right_times) + len(s.left) for s in self.keys.values())


JOIN = twostream.Join(
    "asof", EXAMPLE, ("recommendation", "mood", "recommendation_view"), RawAsOf, {}
)


LATENCY_MOODS_PER_KEY = 10
"""Moods each consultant has before the latency run offers recommendations."""


@dataclass
class OfferedRecommendations:
    """Offered recommendation ``i`` to ``topic``, by one of ``keys`` consultants drawn at
    random, the wall-clock time its event time (picklable, for the load generator's process).

    A consultant's recommendations need distinct times: the example identifies a
    recommendation by consultant and event time (no ``left_id``).
    """

    topic: str
    keys: int
    last: dict[str, int] = field(default_factory=dict)
    """Each consultant's last event time offered."""

    def __call__(self, i: int, rng: random.Random) -> tuple[str, bytes, bytes]:
        key = f"consultant-{rng.randrange(self.keys):05d}"
        now = self.last[key] = max(int(time.time() * 1000), self.last.get(key, 0) + 1)
        value = {
            "consultant": key,
            "event_time": now,
            "ingestion_time": now,
            "recommendation": rng.choice(_PICKS),
        }
        return self.topic, key.encode(), codec("recommendation").encode(value)


def latency_workload(servers: str, keys: int, max_records_per_batch: int) -> LatencyWorkload:
    """The asof latency runs: every consultant's recent moods read first, then recommendations
    offered, each with the wall-clock time it is offered as its event time."""
    mood = codec("mood")

    def prepare(checkpoint: Path, trigger_ms: int, rate: int) -> Offer:
        conf = {"bootstrap.servers": servers}
        suffix = uuid.uuid4().hex[:8]
        topics = {"left": f"lat-recommendations-{suffix}", "right": f"lat-moods-{suffix}"}
        create_input_topics(conf, tuple(topics.values()))
        rng = random.Random(5)
        began = int(time.time() * 1000) - 600_000  # the moods began in the last ten minutes
        moods = []
        for n in range(keys * LATENCY_MOODS_PER_KEY):
            key = f"consultant-{n % keys:05d}"
            at = began + n * 600_000 // (keys * LATENCY_MOODS_PER_KEY)
            value = {
                "name": key,
                "event_time": at,
                "ingestion_time": at,
                "mood": rng.choice(_MOODS),
            }
            moods.append((topics["right"], key, mood.encode(value), at))
        loaded = twostream.produce(conf, moods)
        file, pipe = twostream.configure(
            servers, EXAMPLE, topics, {}, checkpoint, max_records_per_batch, trigger_ms
        )
        raw = twostream.raw_spec(JOIN, conf, topics, "", example_options())
        offered = OfferedRecommendations(topics["left"], keys)
        return Offer(file, pipe, loaded, (topics["left"],), offered, raw)

    return LatencyWorkload(
        "asof",
        "recommendations",
        "views",
        f"the last ten minutes of moods of all {keys:,} consultants already read "
        f"({LATENCY_MOODS_PER_KEY} each)",
        prepare,
    )


def run(args: argparse.Namespace, broker: Any) -> Section:
    """Produce the workload, run every contender on it, and report."""
    from rich.console import Console

    console = Console()
    measured = commit.measured()
    machine_line = machine(measured=measured)
    conf = {"bootstrap.servers": broker.bootstrap_servers}
    suffix = uuid.uuid4().hex[:8]
    topics = {"left": f"recommendations-{suffix}", "right": f"moods-{suffix}"}
    outputs = {name: f"asof-{name}-{suffix}" for name in ("raw1", "raw2", "quix")}
    total = args.left + args.right
    options = example_options()
    runs = twostream.run_contenders(
        console,
        JOIN,
        conf,
        topics,
        outputs,
        options,
        lambda: records(args, topics),
        total,
        args.quix_python,
        args.max_batch,
        args.runs,
    )
    quix, spark = runs.quix, runs.spark
    with console.status("checking outputs"):
        views = twostream.count_keys(conf, spark.output_topic)
        counted = {
            "raw 1 process": count_records(conf, outputs["raw1"]),
            "raw 2 processes": count_records(conf, outputs["raw2"]),
            **({"Quix Streams": count_records(conf, outputs["quix"])} if quix.ran else {}),
        }
        ran = run_checks(
            conf, runs.enrichd, counted["raw 1 process"], "views", total, dead_letters=runs.one.late
        )
        latest = {
            name: _latest_answers(conf, topic)
            for name, topic in (("enrichd", spark.output_topic), ("raw", outputs["raw1"]))
        }
        differ = sum(
            1 for key, answer in latest["raw"].items() if latest["enrichd"].get(key) != answer
        ) + len(latest["enrichd"].keys() - latest["raw"].keys())
        stale = None
        if quix.ran:
            theirs = _latest_answers(conf, outputs["quix"])
            ours = latest["enrichd"]
            stale = sum(1 for key, (mood, _) in theirs.items() if ours.get(key, (mood,))[0] != mood)
    latency = latency_workload(broker.bootstrap_servers, args.keys, args.max_batch)
    latencies = run_latencies(args, broker, latency, console, [])
    return _section(
        args, machine_line, measured, runs, views, counted, ran, stale, differ, latency, latencies
    )


def _latest_answers(conf: dict[str, str], topic: str) -> dict[bytes, tuple[Any, int]]:
    """Each recommendation's latest (mood, revision) in ``topic``, as a compacted topic keeps."""
    import io

    import fastavro

    view = rawjoin.schema("recommendation_view")
    read: Any = fastavro.schemaless_reader
    answers = {}
    for key, value in twostream.latest_values(conf, topic).items():
        decoded = read(io.BytesIO(value), view, None)
        answers[key] = (decoded["mood"], decoded["revision"])
    return answers


def _section(
    args: argparse.Namespace,
    machine_line: str,
    measured: str,
    runs: twostream.Runs,
    views: dict[bytes, int],
    counted: dict[str, int],
    ran: tuple[list[str], bool],
    stale: int | None,
    differ: int,
    latency: LatencyWorkload,
    latencies: list[LatencyResult],
) -> Section:
    one, two, quix, spark = runs.one, runs.two, runs.quix, runs.spark
    total = args.left + args.right
    expected = counted["raw 1 process"]
    contenders = twostream.contenders("asof", runs, ", one answer per event, no revisions")
    table = throughput_table(contenders, two.rate, quix.rate if quix.ran else None)
    events = len(views)
    outputs = sum(views.values())
    corrected = sum(1 for n in views.values() if n > 1)
    most = max(views.values(), default=0)
    checks = [
        f"{name} wrote {n:,} views (expected {args.left if name == 'Quix Streams' else expected:,})"
        for name, n in counted.items()
    ]
    checks += [
        *ran[0],
        f"enrichd answered {events:,} distinct recommendations of {args.left:,}"
        + (" (the median run)" if len(runs.enrichd.runs) > 1 else ""),
        f"recommendations whose latest revision (mood and revision number) differs between "
        f"enrichd (the median run) and the raw loop: {differ:,}",
    ]
    checks += latency_checks(latencies, latency)
    ok = latencies_ok(latencies, latency) and (
        ran[1]
        and counted["raw 2 processes"] == expected
        and events == args.left
        and differ == 0
        and (not quix.ran or counted["Quix Streams"] == args.left)
    )
    options = example_options()
    command = (
        f".venv/bin/python -m bench asof --keys {args.keys} --left {args.left} --right "
        f"{args.right} --late {args.late:g} --step-ms {args.step_ms} --max-batch {args.max_batch} "
        f"--runs {args.runs}" + latency_command(args) + quix_option(args.quix_python)
    )
    date = run_date()
    lines = [
        *run_header(command, machine_line, date),
        f"Workload: {args.left:,} recommendations and {args.right:,} moods over {args.keys:,} "
        f"consultants ({total:,} input records, plain Avro), one record every "
        f"{args.step_ms} ms of event time ({total * args.step_ms / 3_600_000:.1f} h in all); "
        f"{args.late:.0%} of the moods reach Kafka 30 s to 5 min after they began. The "
        f"example's options: history_retention {options['history_retention']:,} ms, "
        f"rejoin_horizon {options['rejoin_horizon']:,} ms, rejoin_interval "
        f"{options['rejoin_interval']:,} ms (event time), strictly before. Both topics have 2 "
        "partitions keyed by consultant (murmur2); every contender reads them from offset 0.",
        "",
        *markdown_table(table, left=(0, 5)),
        "",
        f"- Revisions: enrichd wrote {outputs:,} views for {events:,} recommendations, "
        f"{outputs / max(events, 1):.3f} per recommendation; {corrected:,} "
        f"({corrected / max(events, 1):.1%}) were corrected at least once (at most {most - 1} "
        "times). Those are the answers a one-answer as-of join (Quix Streams' `join_asof`, "
        "Kafka Streams' versioned-table join, Flink's temporal join) leaves wrong: their "
        "first answer missed a mood that was late."
        + (
            f" In this run, {stale:,} of Quix Streams' {counted['Quix Streams']:,} answers "
            f"({stale / max(counted['Quix Streams'], 1):.1%}) name another mood than enrichd's "
            "latest revision (Quix reads the topics in its own order, so its first answers are "
            "not exactly enrichd's revision 0)."
            if stale is not None
            else ""
        ),
        *resources_lines(spark, args.keys),
        f"- The raw loop held {one.held:,} moods and recommendations at the end (what the "
        "retention and horizon keep).",
        "- *raw ceiling*: confluent-kafka `assign()` + fastavro + the asof rules in plain "
        "dicts, records merged across partitions by Kafka timestamp (enrichd's arrival order); "
        "two processes each read one partition of both topics (disjoint consultants). Timed "
        "from the first record consumed to the last view delivered.",
        '- *Quix Streams*: `join_asof(how="left", grace_ms=history_retention)` with the '
        "moods' and recommendations' `event_time` as Quix timestamps; it answers each "
        "recommendation once, on arrival, at or before its time (no ties in this workload, so "
        "strictly-before and at-or-before agree). Its cost per record is therefore lower by "
        "design: no re-join, no kept recommendations.",
        QUIX_SCALING,
        SERVICE_LINE,
        "- *enrichd sustained*: input records after the first micro-batch over the time after "
        "it (progress reports); *end to end* counts the first batch and query start-up too.",
        "",
        *twostream.closing_lines(
            "asof",
            runs,
            args.max_batch,
            checks,
            latency_section(
                latencies, latency, args.max_batch, runs.enrichd.sustained, tuple(args.fit_records)
            ),
        ),
    ]
    return Section(
        name="asof",
        title="## asof: recommendations + moods -> recommendation views with revisions",
        lines=lines,
        table=table,
        plot=plot_of(contenders),
        ok=ok,
        headline=headline.measured(
            "asof",
            runs.enrichd.sustained,
            two.rate,
            local_cores(spark_master(EXAMPLE)),
            quix,
            latencies,
            (),
            date,
            measured,
        ),
    )
