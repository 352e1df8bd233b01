"""``python -m bench startup``: how long a start takes to its first committed output.

A restarted daemon writes nothing until its start is over, so a rolling restart costs its
output for that long. Each start here is a fresh process, as a user or a service manager
makes it:

- ``daemon demo``: from the command to its exit (embedded broker, Spark, the comap replay,
  the tables);
- ``daemon run``, cold: the tweet-views pipeline of ``examples/tweet-views.toml`` over a small
  backlog, with no checkpoint;
- ``daemon run``, restarted: the same pipeline, stopped with SIGTERM once its backlog was
  written and started again on its checkpoint, with new tweets waiting (``--no-restart``
  leaves it out); with ``--kill``, stopped by SIGKILL of its whole process tree instead
  (kill -9: the driver, Spark's JVM and its Python workers), so the restart recovers.

``--mode continuous`` runs the pipeline in continuous mode (long batches of
``--long-batch-ms``): a restart after a kill replays the long batch the kill cut short, its
committed sub-batches without output, before its first new output.

Each ``daemon run`` start is timed from the process start to: its Spark session up (the log
line naming Spark's own log, written as the session is up), its query started (the
"pipeline ... started" line), the first new output a ``read_committed`` reader sees, and the
last. Where the time goes: the moments each kind of Spark Python process first appears
(the daemons Spark forks its Python workers from, named by their worker module), sampled
from the process tree, which shows the first micro-batch's chain of Python start-ups.
The process tree's CPU seconds are counted too: on a shared machine they vary less than
wall time. Figures are the median of ``--runs`` runs, with min and max.

Spark's class archive (``daemon.spark.class_archive``) lives in a folder of this run's: a
first ``daemon demo``, timed on its own row, records it, and every start after maps it;
``--no-archive`` turns it off for every start, to compare; ``--mapped-archive`` has every
start map the archive of this environment (the one its first ``daemon demo`` recorded, which
the test suite's JVMs map too) and records none.
"""

from __future__ import annotations

import argparse
import os
import random
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psutil
from rich.console import Console

from bench.report import Section
from bench.wording import checks_line, machine, markdown_table, run_header
from bench.workloads import (
    REPO,
    SCHEMAS,
    Topics,
    Workload,
    codec,
    create_inputs,
    input_producer,
    produce,
    tweet,
)
from daemon.kafka import clients
from daemon.replay import committed_ends
from daemon.spark import class_archive
from daemon.spark.spark_log import VERBOSE_VARIABLES

if TYPE_CHECKING:
    from daemon.broker import EmbeddedBroker

DAEMON = str(Path(sys.executable).with_name("daemon"))
SAMPLE_S = 0.1
"""How often the process tree is sampled for Spark's Python processes."""
TIMEOUT_S = 300.0
"""A start that has not written its backlog by then failed."""

MILESTONES = ("session up", "query started", "first output", "all outputs")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The start-up workload's sizes."""
    parser.add_argument("--users", type=int, default=1_000, help="users in the cold backlog")
    parser.add_argument("--tweets", type=int, default=10_000, help="tweets in each backlog")
    parser.add_argument("--runs", type=int, default=3, help="runs of each start (median)")
    parser.add_argument("--no-demo", action="store_true", help="time no `daemon demo`")
    parser.add_argument(
        "--no-archive", action="store_true", help="start without Spark's class archive"
    )
    parser.add_argument(
        "--mapped-archive",
        action="store_true",
        help="map this environment's class archive (its `daemon demo` recorded it), record none",
    )
    parser.add_argument(
        "--no-restart", action="store_true", help="time no restart on the cold run's checkpoint"
    )
    parser.add_argument(
        "--kill",
        action="store_true",
        help="stop the cold run with SIGKILL of its process tree (kill -9), not SIGTERM",
    )
    parser.add_argument(
        "--mode", choices=("micro_batch", "continuous"), default="micro_batch", help="the mode"
    )
    parser.add_argument(
        "--long-batch-ms", type=int, default=60_000, help="continuous mode's long batch (ms)"
    )


@dataclass
class Start:
    """One measured start: seconds from the process start to each milestone reached."""

    at: dict[str, float] = field(default_factory=dict)
    workers: dict[str, float] = field(default_factory=dict)
    """Each Spark Python process kind (its module) -> seconds to its first appearance."""
    cpu_s: float = 0.0
    """CPU seconds the process tree used (less skewed by other work than wall time)."""
    outputs: int = 0


class ProcessWatch:
    """Samples a process's descendants for Spark's Python processes, in a thread."""

    def __init__(self, root: int, began: float) -> None:
        self._root, self._began = root, began
        self.first_seen: dict[str, float] = {}
        self._cpu: dict[int, float] = {}
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        try:
            root = psutil.Process(self._root)
        except psutil.NoSuchProcess:
            return
        while not self._done.wait(SAMPLE_S):
            try:
                tree = [root, *root.children(recursive=True)]
            except psutil.NoSuchProcess:
                return
            for process in tree:
                kind = _python_kind(process)
                if kind and kind not in self.first_seen:
                    self.first_seen[kind] = time.monotonic() - self._began
                try:
                    times = process.cpu_times()
                except psutil.Error:
                    continue
                self._cpu[process.pid] = times.user + times.system

    def stop(self, start: Start) -> None:
        """Stop sampling; note the first appearance of each kind, in order, and CPU time."""
        self._done.set()
        self._thread.join()
        start.workers = dict(sorted(self.first_seen.items(), key=lambda item: item[1]))
        start.cpu_s = sum(self._cpu.values())


def _python_kind(process: psutil.Process) -> str | None:
    """``daemon <worker module>`` for a pyspark daemon, the module for another Spark Python
    process, None for anything else."""
    try:
        args = process.cmdline()
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return None
    if "-m" not in args:
        return "java" if args and args[0].endswith("java") else None
    module = args[args.index("-m") + 1 :]
    if module[0] == "pyspark.daemon":
        return f"daemon {module[1] if len(module) > 1 else 'pyspark.worker'}"
    return module[0] if module[0].startswith("pyspark") else None


def run(args: argparse.Namespace, broker: EmbeddedBroker) -> Section:
    """Time ``daemon demo``, then a cold and (unless ``--no-restart``) a restarted ``daemon
    run`` on ``broker``."""
    console = Console()
    machine_line = machine()
    demos: list[Start] = []
    colds: list[Start] = []
    restarts: list[Start] = []
    checks: list[str] = []
    recording = Start()
    records = not (args.no_archive or args.mapped_archive)
    switch = "off" if args.no_archive else "map" if args.mapped_archive else "on"
    # Read by every `daemon` started below; this process's own settings come back after.
    saved = {name: os.environ.get(name) for name in (class_archive.DIRECTORY, class_archive.SWITCH)}
    with tempfile.TemporaryDirectory(prefix="enrichd-bench-classes-") as archives:
        if records:
            os.environ[class_archive.DIRECTORY] = archives
        os.environ[class_archive.SWITCH] = switch
        try:
            if records:
                with console.status("daemon demo, recording Spark's class archive"):
                    recording = _demo()
                console.print(f"daemon demo, recording: {recording.at['exit']:.1f} s")
            for n in range(1, args.runs + 1):
                _one_run(n, args, broker.bootstrap_servers, console, demos, colds, restarts, checks)
        finally:
            for name, value in saved.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value
    ok = all(s.outputs == args.tweets for s in colds + restarts)
    command = (
        f"python -m bench startup --users {args.users} --tweets {args.tweets} --runs {args.runs}"
        + (" --no-demo" if args.no_demo else "")
        + (" --no-archive" if args.no_archive else "")
        + (" --mapped-archive" if args.mapped_archive else "")
        + (" --no-restart" if args.no_restart else "")
        + (" --kill" if args.kill else "")
        + (
            f" --mode continuous --long-batch-ms {args.long_batch_ms}"
            if args.mode == "continuous"
            else ""
        )
    )
    table = _table(demos, colds, restarts, "restarted after kill -9" if args.kill else "restarted")
    if records:
        first = (f"{recording.at['exit']:.1f}", f"{recording.cpu_s:.1f}")
        table.append(("daemon demo, recording", *("-" for _ in MILESTONES), *first))
    archive_note = {
        "off": "Spark's class archive off (`--no-archive`).",
        "map": "Every start maps this environment's class archive, if it has one "
        "(`--mapped-archive`: none recorded here).",
        "on": "Every start maps Spark's class archive, which a first `daemon demo` "
        "recorded (*daemon demo, recording*).",
    }[switch]
    lines = [
        *run_header(command, machine_line),
        f"Each start is a fresh process; seconds from its start, median of {args.runs} runs "
        "(min-max). The backlog: "
        f"{args.users:,} users and {args.tweets:,} tweets cold"
        + ("" if args.no_restart else f", {args.tweets:,} new tweets on restart")
        + (" (the cold run killed with SIGKILL once its backlog was written)" if args.kill else "")
        + (
            f"; continuous mode, long batches of {args.long_batch_ms:,} ms"
            if args.mode == "continuous"
            else ""
        )
        + f". {archive_note}",
        "",
        *markdown_table(table),
        "",
        "When each kind of Spark process first appeared (seconds from the start, median):",
        "",
        *markdown_table(_workers_table({"cold": colds, "restarted": restarts, "demo": demos})),
        "",
        checks_line(checks),
    ]
    return Section(
        name="startup",
        title="## startup: from a start to the first committed output",
        lines=lines,
        table=table,
        ok=ok,
    )


def _one_run(
    n: int,
    args: argparse.Namespace,
    servers: str,
    console: Console,
    demos: list[Start],
    colds: list[Start],
    restarts: list[Start],
    checks: list[str],
) -> None:
    """Run ``n`` of each start, appended to the lists."""
    if not args.no_demo:
        with console.status(f"run {n}/{args.runs}: daemon demo"):
            demos.append(_demo())
        console.print(f"run {n}: daemon demo {demos[-1].at['exit']:.1f} s")
    with console.status(f"run {n}/{args.runs}: daemon run, cold and restarted"):
        cold, restart = _cold_and_restart(servers, args)
    colds.append(cold)
    checks.append(f"run {n} cold wrote {cold.outputs:,} views (expected {args.tweets:,})")
    shown = f"run {n}: first output {cold.at['first output']:.1f} s cold"
    if restart is not None:
        restarts.append(restart)
        checks.append(f"run {n} restart wrote {restart.outputs:,} (expected {args.tweets:,})")
        shown += f", {restart.at['first output']:.1f} s restarted"
    console.print(shown)


def _spread(values: list[float]) -> str:
    """``median (min-max)``, or the value alone for one run."""
    if len(values) == 1:
        return f"{values[0]:.1f}"
    return f"{statistics.median(values):.1f} ({min(values):.1f}-{max(values):.1f})"


def _table(
    demos: list[Start], colds: list[Start], restarts: list[Start], restarted: str
) -> list[tuple[str, ...]]:
    rows: list[tuple[str, ...]] = [("start", *MILESTONES, "exit", "CPU seconds")]
    for name, starts in (("daemon run, cold", colds), (f"daemon run, {restarted}", restarts)):
        if not starts:  # --no-restart
            continue
        cells = [_spread([s.at[m] for s in starts]) for m in MILESTONES]
        rows.append((name, *cells, "-", _spread([s.cpu_s for s in starts])))
    if demos:
        demo = (_spread([s.at["exit"] for s in demos]), _spread([s.cpu_s for s in demos]))
        rows.append(("daemon demo", *("-" for _ in MILESTONES), *demo))
    return rows


def _workers_table(starts: dict[str, list[Start]]) -> list[tuple[str, ...]]:
    starts = {name: runs for name, runs in starts.items() if runs}  # the demo may be left out
    kinds: dict[str, float] = {}
    for runs in starts.values():
        for start in runs:
            for kind, at in start.workers.items():
                kinds[kind] = min(kinds.get(kind, at), at)
    header = ("process", *starts)
    rows: list[tuple[str, ...]] = [header]
    for kind in sorted(kinds, key=kinds.__getitem__):
        cells = []
        for runs in starts.values():
            seen = [s.workers[kind] for s in runs if kind in s.workers]
            cells.append(f"{statistics.median(seen):.1f}" if seen else "-")
        rows.append((f"`{kind}`", *cells))
    return rows


def _demo() -> Start:
    """``daemon demo`` in a fresh process, timed to its exit."""
    began = time.monotonic()
    child = subprocess.Popen(  # noqa: S603 - this environment's own command
        [DAEMON, "demo"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    watch = ProcessWatch(child.pid, began)
    _, errors = child.communicate(timeout=TIMEOUT_S)
    start = Start(at={"exit": time.monotonic() - began})
    watch.stop(start)
    if child.returncode != 0:
        raise RuntimeError(f"daemon demo failed ({child.returncode}): {errors.strip()[-500:]}")
    return start


def _cold_and_restart(servers: str, args: argparse.Namespace) -> tuple[Start, Start | None]:
    """A cold start over a fresh backlog, then a restart on its checkpoint with new tweets
    (None with ``--no-restart``)."""
    conf = {"bootstrap.servers": servers}
    suffix = uuid.uuid4().hex[:8]
    topics = Topics(f"startup-users-{suffix}", f"startup-tweets-{suffix}")
    output = f"startup-views-{suffix}"
    create_inputs(conf, topics)
    produce(conf, topics, Workload(users=args.users, tweets=args.tweets))
    with tempfile.TemporaryDirectory(prefix="enrichd-bench-startup-") as tmp:
        continuous = args.long_batch_ms if args.mode == "continuous" else None
        pipeline = _pipeline_file(Path(tmp), servers, topics, output, continuous)
        stop = signal.SIGKILL if args.kill else signal.SIGTERM
        cold = _timed_run(pipeline, conf, output, args.tweets, before=None, stop=stop)
        if args.no_restart:
            return cold, None
        # Read, not asked for: the embedded broker's ListOffsets under-reports a log's end.
        committed = committed_ends(conf, output)  # "topic/partition" -> offset
        ends = {int(key.rsplit("/", 1)[1]): end for key, end in committed.items()}

        def more_tweets() -> None:
            _produce_tweets(conf, topics.tweets, args.users, args.tweets, first=args.tweets)

        restart = _timed_run(pipeline, conf, output, args.tweets, before=ends, ready=more_tweets)
    return cold, restart


def _pipeline_file(
    folder: Path, servers: str, topics: Topics, output: str, long_batch_ms: int | None
) -> Path:
    """The example's pipeline file, pointed at this run's broker, topics and a checkpoint;
    in continuous mode with long batches of ``long_batch_ms`` unless that is None."""
    text = (REPO / "examples" / "tweet-views.toml").read_text(encoding="utf-8")
    if long_batch_ms is not None:
        text = text.replace(
            'joiner = "comap"\n',
            f'joiner = "comap"\nmode = "continuous"\nlong_batch = "{long_batch_ms}ms"\n',
        )
    text = re.sub(r'"\.\./schemas/', f'"{SCHEMAS}/', text)
    text = text.replace('checkpoint = "../state/tweet-views"', f'checkpoint = "{folder}/cp"')
    for old, new in (("users", topics.users), ("tweets", topics.tweets), ("tweet-views", output)):
        text = text.replace(f'topic = "{old}"', f'topic = "{new}"')
    text = f'[kafka]\nbootstrap_servers = "{servers}"\n\n' + text
    path = folder / "pipeline.toml"
    path.write_text(text, encoding="utf-8")
    return path


def _timed_run(
    pipeline: Path,
    conf: dict[str, str],
    output: str,
    expected: int,
    before: dict[int, int] | None,
    ready: Callable[[], None] | None = None,
    stop: signal.Signals = signal.SIGTERM,
) -> Start:
    """``daemon run`` on ``pipeline`` until ``expected`` new outputs are committed, then
    ``stop`` (SIGKILL: to the whole process tree at once). ``before``: the output's ends at
    the start (None: a fresh output topic). ``ready`` runs just before the process starts
    (the restart's new backlog)."""
    if ready is not None:
        ready()
    start = Start()
    began = time.monotonic()
    child = subprocess.Popen(  # noqa: S603 - this environment's own command
        [DAEMON, "run", str(pipeline)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env={k: v for k, v in os.environ.items() if k not in VERBOSE_VARIABLES},
    )
    watch = ProcessWatch(child.pid, began)
    log: list[str] = []
    reader = threading.Thread(target=_read_log, args=(child, began, start, log), daemon=True)
    reader.start()
    try:
        start.outputs = _await_outputs(conf, output, expected, before, began, start)
    finally:
        if stop == signal.SIGKILL:
            _kill_tree(child.pid)
        else:
            child.send_signal(stop)
        try:
            child.wait(timeout=60)
        except subprocess.TimeoutExpired:
            child.kill()
        reader.join(timeout=5)
        watch.stop(start)
    if "first output" not in start.at:
        raise RuntimeError("daemon run wrote nothing: " + " | ".join(log[-5:]))
    return start


def _kill_tree(pid: int) -> None:
    """SIGKILL ``pid`` and every process below it at once, as a crash of its machine would."""
    try:
        root = psutil.Process(pid)
        tree = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return
    for process in tree:
        try:
            process.send_signal(signal.SIGKILL)
        except psutil.NoSuchProcess:
            pass


def _read_log(child: subprocess.Popen[str], began: float, start: Start, log: list[str]) -> None:
    """Note when the session and the query were up, from the service's log lines."""
    assert child.stderr is not None
    for line in child.stderr:
        log.append(line.rstrip())
        now = time.monotonic() - began
        if "Spark's own log" in line:
            start.at.setdefault("session up", now)
        elif re.search(r"pipeline \S+ started", line):
            start.at.setdefault("query started", now)


def _await_outputs(
    conf: dict[str, str],
    topic: str,
    expected: int,
    before: dict[int, int] | None,
    began: float,
    start: Start,
) -> int:
    """Count committed records of ``topic`` past ``before`` until ``expected`` arrived."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {
            **conf,
            "group.id": "enrichd-bench-startup",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "fetch.wait.max.ms": 10,
        }
    )
    seen = 0
    deadline = time.monotonic() + TIMEOUT_S
    try:
        partitions = _await_partitions(consumer, topic, deadline)
        consumer.assign([TopicPartition(topic, p, (before or {}).get(p, 0)) for p in partitions])
        while seen < expected and time.monotonic() < deadline:
            for message in consumer.consume(10_000, timeout=0.05):
                if message.error() is None:
                    seen += 1
                    start.at.setdefault("first output", time.monotonic() - began)
        start.at["all outputs"] = time.monotonic() - began
    finally:
        consumer.close()
    return seen


def _await_partitions(consumer: Any, topic: str, deadline: float) -> list[int]:
    """The output topic's partitions, once the pipeline has created it."""
    while time.monotonic() < deadline:
        metadata = consumer.list_topics(topic, timeout=5).topics.get(topic)
        if metadata is not None and metadata.error is None and metadata.partitions:
            return sorted(metadata.partitions)
        time.sleep(0.05)
    raise RuntimeError(f"{topic} was never created")


def _produce_tweets(conf: dict[str, str], topic: str, users: int, count: int, first: int) -> None:
    """``count`` new tweets by existing users, ids from ``first``."""
    producer = input_producer(conf)
    deliveries = clients.Deliveries()
    tweets = codec("tweet")
    rng = random.Random(first)
    for i in range(first, first + count):
        author = rng.randrange(users)
        clients.produce(
            producer,
            topic,
            value=tweets.encode(tweet(i, author, rng)),
            key=str(i).encode(),
            timestamp=int(time.time() * 1000),
            on_delivery=deliveries,
        )
    if producer.flush(60) != 0 or deliveries.failures:
        raise RuntimeError(f"could not produce the new tweets: {deliveries.failures[:1]}")
