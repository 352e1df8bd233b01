"""``daemon verify``: a run with a known answer and kill -9s on a cluster, checked strictly.

How it works, for each joiner asked for: its example pipeline (``examples/``) gets topics of
its own under ``PREFIX.RUN`` (created with the partitions and replication factor given), a
workload with a known answer is produced to them (:mod:`~daemon.verify.workload`), then an
end-of-input marker per join key, as ``daemon replay`` sends. Every pipeline then runs in one
child ``daemon run`` with the file's connection settings (:mod:`~daemon.verify.child_file`),
which verify kills with SIGKILL at spread points of the input and starts again from its
checkpoints, and stops with SIGTERM once every input (and a second stage's input) is
committed. The outputs and dead letters are read back with ``read_committed`` consumers and
as raw batches (:mod:`~daemon.verify.readback`), and compared with the answer that the
joiner's own logic gives (:mod:`~daemon.verify.answer`, :mod:`~daemon.verify.check`). The
topics are deleted at the end unless ``keep``.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
import uuid
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from daemon.broker import EmbeddedBroker
from daemon.demos import example_file
from daemon.errors import EnrichdError, KafkaUnavailableError
from daemon.formats.avro.codec import AvroCodec, load_schema_file
from daemon.kafka import connect
from daemon.kafka.admin import create_topics, delete_topics, existing_topics
from daemon.kafka.clients import produce
from daemon.model.config import PipelineConfig, PipelineFile, load_pipeline_file
from daemon.model.keys import key_parts
from daemon.model.wire import END_OF_INPUT_HEADERS, partition_name
from daemon.plugin.host import registry
from daemon.replay import committed_ends, key_bytes
from daemon.signals import StopRequest
from daemon.source.router import Router
from daemon.verify import child as runs
from daemon.verify.acl import acl_line, code_in_text, refusal
from daemon.verify.answer import Answer, compute, run_context
from daemon.verify.check import JoinerCheck, Received, check
from daemon.verify.child_file import connection_tables, write_child_file
from daemon.verify.facts import BrokerFacts, broker_facts
from daemon.verify.readback import RawLogs, TopicRead, read_committed, with_status
from daemon.verify.workload import EXAMPLES, OPTIONS, Workload, build

JOINERS = tuple(EXAMPLES)
"""The joiners ``--joiner all`` verifies."""
KILL_DELAYS_S = (0.0, 0.7, 1.5)
"""How long after a micro-batch is planned each kill lands, in turn: before its tasks start,
while they run, and about when they commit."""
_POLL_S = 0.05


@dataclass(frozen=True)
class VerifyOptions:
    """What ``daemon verify`` was asked to do (its command-line options)."""

    joiners: tuple[str, ...] = JOINERS
    records: int = 2000
    kills: int = 3
    partitions: int = 2
    replication: int = -1
    keep: bool = False
    prefix: str = "enrichd-verify"
    seed: int = 1
    timeout_s: float = 900.0


@dataclass
class Kill:
    """One kill -9 of the child run."""

    number: int
    at_s: float
    """Seconds since the first start."""
    batch: int
    """The micro-batch last planned (of all pipelines, the highest) when it landed."""
    consumed: int
    """Input records planned so far, of :attr:`VerifyReport.input_records`."""
    delay_s: float
    recovered_s: float | None = None
    """Seconds from the restart until a pipeline of the restarted run planned a micro-batch
    past those it had planned before the kill."""


@dataclass
class VerifyReport:
    """Everything ``daemon verify`` found; :attr:`exit_code` 0 only when every check passed."""

    run: str
    prefix: str
    broker: BrokerFacts
    options: VerifyOptions
    checks: list[JoinerCheck] = field(default_factory=list)
    kills: list[Kill] = field(default_factory=list)
    starts: int = 0
    stop_exit_code: int | None = None
    input_records: int = 0
    output_records: int = 0
    run_s: float = 0.0
    raw_batches: str = ""
    """Whether the raw batches were read, or why not."""
    transactions: dict[str, dict[str, int]] = field(default_factory=dict)
    """Per topic: records by what became of their transaction, and markers."""
    held: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    kept: str | None = None

    @property
    def ok(self) -> bool:
        """Every joiner's output exactly as expected, and the child stopped cleanly."""
        return bool(self.checks) and all(c.ok for c in self.checks) and not self.held

    @property
    def exit_code(self) -> int:
        """0 when :attr:`ok`; 3 when something was lost, duplicated or wrong."""
        return 0 if self.ok else 3


@dataclass
class VerifiedPipeline:
    """One joiner's part of a run: its pipeline, workload and answer, and where it went."""

    joiner: str
    config: PipelineConfig
    work: Workload
    answer: Answer
    ends: dict[str, int] = field(default_factory=dict)
    items: dict[tuple[str, int, int], int] = field(default_factory=dict)
    """Item index by the ``(topic, partition, offset)`` it was produced at."""

    def source_item(self, record: Received) -> int | None:
        """The workload item the record's ``enrichd.source.*`` headers name, if any."""
        headers = record.headers
        try:
            where = (
                headers["enrichd.source.topic"],
                int(headers["enrichd.source.partition"]),
                int(headers["enrichd.source.offset"]),
            )
        except (KeyError, ValueError):
            return None
        return self.items.get(where)

    def topics(self) -> list[str]:
        """Every topic of the pipeline: inputs, outputs and dead letters."""
        spec = self.config
        names = [s.topic for s in spec.inputs.values()] + [spec.output.topic, spec.dead_letters]
        return names + [s.topic for s in spec.outputs.values()]


Progress = Callable[[str], None]
"""Told what verify is doing, one short line at a time."""


class Interrupted(Exception):  # noqa: N818 - it names what happened, as KeyboardInterrupt does
    """SIGTERM or SIGINT came before ``what`` (the exception's text)."""


def _check_stop(stop: StopRequest, what: str) -> None:
    if stop.is_set():
        raise Interrupted(what)


def verify(
    pipeline_file: Path | None,
    bootstrap: str | None,
    options: VerifyOptions,
    progress: Progress = lambda _: None,
) -> VerifyReport:
    """Run the verification and report (see the module docstring).

    Args:
        pipeline_file: a pipeline file whose ``[kafka]`` (and ``[schema_registry]``) to use.
        bootstrap: the cluster's bootstrap servers, instead of or over the file's.
        options: what to verify and how hard.
        progress: told what is under way.

    Raises:
        EnrichdError: the cluster could not be reached, refused a request (the line names
            the missing ACL), or the child run made no progress.
    """
    run_id = uuid.uuid4().hex[:8]
    base = f"{options.prefix}.{run_id}"
    interrupted: Interrupted | None = None
    with ExitStack() as stack:
        # SIGTERM or Ctrl-C ends the run at the next poll, through the cleanup below.
        stop = stack.enter_context(StopRequest())
        if pipeline_file is not None:
            file = load_pipeline_file(pipeline_file)
            connection = connection_tables(pipeline_file)
        else:
            file, connection = None, {}
        servers = bootstrap or (file.kafka.bootstrap_servers if file else None)
        if servers is None:
            progress("starting the embedded broker")
            servers = stack.enter_context(EmbeddedBroker()).bootstrap_servers
        connection["kafka"] = {**connection.get("kafka", {}), "bootstrap_servers": servers}
        conf = _client_conf(file, servers)
        existing_topics(conf)  # one line when the cluster cannot be reached or refuses us
        raw = RawLogs(conf)
        stack.callback(raw.close)
        report = VerifyReport(run_id, options.prefix, broker_facts(conf, raw.settings), options)
        folder = Path(tempfile.mkdtemp(prefix="enrichd-verify-"))
        folder.chmod(0o700)
        created: list[str] = []
        try:
            pipelines = [plan_pipeline(joiner, base, folder, options) for joiner in options.joiners]
            _create_topics(conf, pipelines, options, base, created)
            _probe_transactions(conf, base, options.prefix, pipelines[0].config.output.topic)
            _check_stop(stop, "the workload was produced")
            progress(f"producing {len(pipelines)} workload(s) under {base}")
            _produce(conf, pipelines, options.prefix, stop)
            report.input_records = sum(sum(p.ends.values()) for p in pipelines)
            child_path = folder / "verify.toml"
            write_child_file(
                child_path,
                connection,
                {"master": "local[2]"},
                [_child_table(p.config) for p in pipelines],
            )
            child = runs.ChildRun(child_path, folder)
            try:
                _run_with_kills(child, conf, pipelines, options, report, progress, stop)
            finally:
                if child.exited() is None:  # interrupted or failed: never left running
                    child.kill()
            progress("reading back every output and dead letter")
            read_back(conf, raw, pipelines, report, stop)
        except Interrupted as stopped:
            interrupted = stopped  # reported once the cleanup below has run
        finally:
            if options.keep:
                report.kept = str(folder)
            else:
                failed = delete_topics(conf, created)
                for name, exc in sorted(failed.items()):
                    line = refusal(exc, f"delete topic {name}", options.prefix)
                    report.notes.append(line or f"could not delete topic {name}: {exc}")
                shutil.rmtree(folder, ignore_errors=True)
    if interrupted is not None:
        raise EnrichdError(_interrupted_line(interrupted, report, len(created)))
    return report


def _interrupted_line(exc: Interrupted, report: VerifyReport, topics: int) -> str:
    """One line: where verify was stopped, and what became of the child and the topics."""
    if report.kept is not None:
        left = f"its topics under {report.prefix}.{report.run} and files in {report.kept} kept"
    elif report.notes:
        left = "; ".join(report.notes)
    else:
        left = f"its {topics} topic(s) under {report.prefix}.{report.run} deleted"
    return (
        f"daemon verify was stopped (SIGTERM or SIGINT) before {exc}: no child daemon run "
        f"left running, {left}; nothing was checked"
    )
    return report


def _client_conf(file: PipelineFile | None, servers: str) -> dict[str, str]:
    if file is None:
        return {"bootstrap.servers": servers}
    return connect.client_conf(file, servers)


def plan_pipeline(joiner: str, base: str, folder: Path, options: VerifyOptions) -> VerifiedPipeline:
    """The joiner's example pipeline on topics of its own, its workload and its answer."""
    if joiner not in EXAMPLES:
        raise EnrichdError(f"--joiner {joiner}: choose one of {', '.join(JOINERS)} or all")
    example = load_pipeline_file(example_file(EXAMPLES[joiner])).pipeline[0]
    name = f"{base}.{joiner}"
    config = example.model_copy(
        update={
            "name": name,
            "checkpoint": folder / "checkpoints" / joiner,
            "dead_letter_topic": f"{name}.dlq",
            "inputs": {
                role: spec.model_copy(update={"topic": f"{name}.{role}"})
                for role, spec in example.inputs.items()
            },
            "output": example.output.model_copy(update={"topic": f"{name}.out"}),
            "outputs": {
                out: spec.model_copy(update={"topic": f"{name}.{out}"})
                for out, spec in example.outputs.items()
            },
            "options": {**example.options, **OPTIONS.get(joiner, {})},
            # Several micro-batches a pipeline, so that kills land between and inside them;
            # each batch of the five queries costs seconds of fixed work on two cores.
            "max_records_per_batch": max(10, options.records // 8),
        }
    )
    start = int(time.time() * 1000) - options.records - 60_000  # past, within retention
    work = build(joiner, records=options.records, seed=options.seed, start_ms=start)
    return VerifiedPipeline(joiner, config, work, compute(work, config))


def _child_table(config: PipelineConfig) -> dict[str, Any]:
    """A ``[[pipeline]]`` table of the child's file."""
    table = config.model_dump(mode="json", by_alias=True, exclude_none=True, exclude_defaults=True)
    table["checkpoint"] = str(config.checkpoint)
    table["max_records_per_batch"] = config.max_records_per_batch
    return table


def _create_topics(
    conf: dict[str, str],
    pipelines: list[VerifiedPipeline],
    options: VerifyOptions,
    base: str,
    created: list[str],
) -> None:
    topics = [topic for pipe in pipelines for topic in pipe.topics()]
    try:
        create_topics(conf, dict.fromkeys(topics, options.partitions), options.replication)
    except KafkaUnavailableError as exc:
        line = refusal(exc.__cause__ or exc, f"create topics under {base}", options.prefix)
        raise EnrichdError(line or str(exc)) from None
    finally:  # the ones that exist now are verify's to delete, even after a refusal
        present = existing_topics(conf)
        created.extend(topic for topic in topics if topic in present)


def _probe_transactions(conf: dict[str, str], base: str, prefix: str, topic: str) -> None:
    """Begin and abort a transaction with a batch-marker group, as the child's tasks will.

    A missing ACL on transactional ids or groups then is one line before any Spark starts.
    """
    # Late: confluent_kafka loads with the first client (daemon.model.constants says why).
    from confluent_kafka import KafkaException, TopicPartition

    name = f"enrichd.{base}.probe"
    producer = connect.producer(conf, {"transactional.id": name})
    consumer = connect.consumer(conf, {"group.id": name})
    try:
        producer.init_transactions(30)
        producer.begin_transaction()
        producer.send_offsets_to_transaction(
            [TopicPartition(topic, 0, 0)], consumer.consumer_group_metadata(), 30
        )
        producer.abort_transaction(30)
    except KafkaException as exc:
        line = refusal(exc, "use transactions and batch-marker groups", prefix)
        raise EnrichdError(line or f"transactions do not work on this cluster: {exc}") from None
    finally:
        consumer.close()


def _produce(
    conf: dict[str, str], pipelines: list[VerifiedPipeline], prefix: str, stop: StopRequest
) -> None:
    """Produce every workload in arrival order, then an end-of-input marker per join key."""
    producer = connect.producer(
        conf, {"linger.ms": 5, "enable.idempotence": True, "partitioner": "murmur2_random"}
    )
    failures: list[str] = []

    def delivered(pipe: VerifiedPipeline, index: int | None) -> Callable[[Any, Any], None]:
        def report(err: Any, msg: Any) -> None:
            if err is not None:
                failures.append(str(err))
                return
            where = (msg.topic(), msg.partition(), msg.offset())
            name = partition_name(where[0], where[1])
            pipe.ends[name] = max(pipe.ends.get(name, 0), where[2] + 1)
            if index is not None:
                pipe.items[where] = index

        return report

    for pipe in pipelines:
        _check_stop(stop, f"{pipe.joiner}'s workload was produced")
        codecs = {
            role: AvroCodec(load_schema_file(spec.schema_file))
            for role, spec in pipe.config.inputs.items()
            if spec.schema_file is not None
        }
        for index, item in enumerate(pipe.work.items):
            value = item.poison
            if value is None and item.value is not None:
                value = codecs[item.role].encode(item.value)
            produce(
                producer,
                pipe.config.inputs[item.role].topic,
                value=value,
                key=key_bytes(item.key),
                timestamp=item.timestamp,
                on_delivery=delivered(pipe, index),
            )
            producer.poll(0)
        marker_topic, keys = _join_keys(pipe)
        last = max((item.timestamp for item in pipe.work.items), default=1)
        for key in keys:
            produce(
                producer,
                marker_topic,
                value=None,
                key=key.encode("utf-8"),
                timestamp=last,
                headers=END_OF_INPUT_HEADERS,
                on_delivery=delivered(pipe, None),
            )
            producer.poll(0)
    producer.flush(60)
    if failures:
        line = acl_line(code_in_text(failures[0]) or 0, "write to its topics", prefix)
        raise EnrichdError(line or f"could not produce the workload: {failures[0]}")


def _join_keys(pipe: VerifiedPipeline) -> tuple[str, list[str]]:
    """Where the markers go (the first input that does not bootstrap) and every join key."""
    joiner = registry().get(pipe.config.joiner).cls
    inputs = pipe.config.inputs
    found: dict[str, None] = {}
    for item in pipe.work.items:
        if item.poison is not None:
            continue
        spec = inputs[item.role]
        router = Router(
            item.role, key_parts(spec.key), spec.time, item.role in joiner.keyed_tombstones
        )
        routing = router.route(item.value, key_bytes(item.key), item.timestamp)
        if routing.error is None and routing.key is not None:
            found[routing.key] = None
    options = joiner.Options.model_validate(pipe.config.options)
    first = joiner(options, run_context(pipe.config)).bootstrap_roles()
    role = next((r for r in joiner.roles if r not in first), joiner.roles[0])
    return inputs[role].topic, list(found)


def _planned_records(pipelines: list[VerifiedPipeline]) -> tuple[list[int], int]:
    """The last micro-batch each pipeline planned, and the input records planned in all."""
    batches, records = [], 0
    for pipe in pipelines:
        number, offsets = runs.planned(pipe.config.checkpoint)
        batches.append(number)
        records += runs.records_within(offsets, pipe.ends)
    return batches, records


def _planned_since(before: list[int], now: list[int]) -> bool:
    """Whether some pipeline planned a micro-batch after those it had planned ``before``.

    Per pipeline: after a restart each replays the batch a kill cut short under its old
    number, and the pipelines that were furthest may have nothing left to plan, so the highest
    number across them says nothing about whether the restart is back.
    """
    return any(later > earlier for earlier, later in zip(before, now, strict=True))


def _run_with_kills(
    child: runs.ChildRun,
    conf: dict[str, str],
    pipelines: list[VerifiedPipeline],
    options: VerifyOptions,
    report: VerifyReport,
    progress: Progress,
    stop: StopRequest,
) -> None:
    """Start the child, kill it at spread points, restart it, and stop it once all is in."""
    started = time.monotonic()
    deadline = started + options.timeout_s

    def wait(what: str, done: Callable[[], bool]) -> None:
        _await(child, deadline, what, done, prefix=options.prefix, stop=stop)

    total = report.input_records
    child.start()
    progress("daemon run started")
    for number in range(1, options.kills + 1):
        point = total * number // (options.kills + 1)
        at_start, _ = _planned_records(pipelines)

        def past_point(since: list[int] = at_start, point: int = point) -> bool:
            batches, records = _planned_records(pipelines)
            return _planned_since(since, batches) and records >= point

        wait(f"input planned past {point} of {total} records", past_point)
        delay = KILL_DELAYS_S[(number - 1) % len(KILL_DELAYS_S)]
        if stop.sleep(delay):
            raise Interrupted(f"kill -9 #{number}")
        batches, consumed = _planned_records(pipelines)
        child.kill()
        kill = Kill(number, round(time.monotonic() - started, 1), max(batches), consumed, delay)
        report.kills.append(kill)
        progress(f"kill -9 #{number} at {consumed} of {total} input records; restarting")
        restarted = time.monotonic()
        child.start()

        def planned_again(before: list[int] = batches) -> bool:
            now, _ = _planned_records(pipelines)
            return _planned_since(before, now) or _all_committed(pipelines)

        wait("a micro-batch after the restart", planned_again)
        kill.recovered_s = round(time.monotonic() - restarted, 1)
    wait("every input record committed", lambda: _all_committed(pipelines))
    for pipe in pipelines:
        for name, stage in pipe.config.outputs.items():
            downstream = pipe.config.checkpoint / "downstream" / name
            ends = committed_ends(conf, pipe.config.output.topic)
            progress(f"waiting for {pipe.joiner}'s {name} stage")
            wait(
                f"{pipe.joiner}'s second stage ({stage.topic}) caught up",
                lambda d=downstream, e=ends: runs.reached(runs.committed(d), e),  # type: ignore[misc]
            )
    report.run_s = round(time.monotonic() - started, 1)
    report.starts = child.starts
    progress("stopping daemon run with SIGTERM")
    report.stop_exit_code = child.stop()


def _all_committed(pipelines: list[VerifiedPipeline]) -> bool:
    return all(runs.reached(runs.committed(p.config.checkpoint), p.ends) for p in pipelines)


def _await(
    child: runs.ChildRun,
    deadline: float,
    what: str,
    done: Callable[[], bool],
    *,
    prefix: str,
    stop: StopRequest,
) -> None:
    """Poll until ``done()``; a child that exits, a deadline passed or a stop is one line."""
    while not done():
        _check_stop(stop, what)
        code = child.exited()
        failure = _last_failure(child)
        if failure is not None:
            line = acl_line(code_in_text(failure) or 0, "run the pipelines", prefix)
            if line is not None:
                raise EnrichdError(line)
        if code is not None:
            raise EnrichdError(
                f"the child daemon run exited with code {code} before {what}: "
                f"{failure or _last_line(child)}"
            )
        if time.monotonic() > deadline:
            raise EnrichdError(
                f"timed out (--timeout) waiting for {what}; daemon run (start {child.starts}) "
                f"logged last: {failure or _last_line(child)}"
            )
        stop.sleep(_POLL_S)


def _last_failure(child: runs.ChildRun) -> str | None:
    """The last 'pipeline ... failed' line of the child's JSON log, if any."""
    for line in reversed(child.log_tail(50).splitlines()):
        try:
            message = json.loads(line).get("message", "")
        except (ValueError, AttributeError):
            continue
        if " failed: " in message and message.startswith("pipeline "):
            return str(message)
    return None


def _last_line(child: runs.ChildRun) -> str:
    """The message of the child's last log line (a restarted run may not have logged yet)."""
    lines = [line for line in child.log_tail(5).splitlines() if line.strip()]
    if not lines:
        return "nothing yet"
    try:
        return str(json.loads(lines[-1])["message"])
    except (ValueError, KeyError, TypeError):
        return lines[-1]


def read_back(
    conf: dict[str, str],
    raw: RawLogs,
    pipelines: list[VerifiedPipeline],
    report: VerifyReport,
    stop: StopRequest,
) -> None:
    """Read every output and dead-letter topic, with raw batches where they can be read."""
    raw_problem = raw.unavailable
    for pipe in pipelines:
        _check_stop(stop, f"{pipe.joiner}'s output was read back")
        spec = pipe.config
        codec = (
            AvroCodec(load_schema_file(spec.output.schema_file))
            if spec.output.schema_file
            else None
        )
        reads = {"out": read_committed(conf, spec.output.topic, codec)}
        reads["dlq"] = read_committed(conf, spec.dead_letters, None)
        for name, out in spec.outputs.items():
            out_codec = AvroCodec(load_schema_file(out.schema_file)) if out.schema_file else None
            reads[name] = read_committed(conf, out.topic, out_codec)
        topics = {"out": spec.output.topic, "dlq": spec.dead_letters}
        topics.update({name: out.topic for name, out in spec.outputs.items()})
        for name, read in reads.items():
            report.held.extend(read.held)
            if raw_problem is None:
                try:
                    read.logs = raw.read(topics[name])
                except Exception as exc:  # reported: the check goes on without raw batches
                    raw_problem = f"reading raw batches failed: {exc}"
            _tally_transactions(report, topics[name], read)
        received = {name: with_status(read) for name, read in reads.items()}
        report.output_records += sum(len(r) for n, r in received.items() if n != "dlq")
        totals = next((received[name] for name in spec.outputs), None)
        report.checks.append(
            check(
                pipe.joiner,
                pipe.work,
                pipe.answer,
                received["out"],
                received["dlq"],
                totals if spec.outputs else None,
                pipe.source_item,
            )
        )
    report.raw_batches = (
        "read: every record's transaction known"
        if raw_problem is None
        else f"not read ({raw_problem})"
    )


def _tally_transactions(report: VerifyReport, topic: str, read: TopicRead) -> None:
    counts: dict[str, int] = {}
    for log in read.logs.values():
        for status, n in log.counts().items():
            counts[status] = counts.get(status, 0) + n
        for marker, n in log.markers.items():
            counts[f"{marker} markers"] = counts.get(f"{marker} markers", 0) + n
    if counts:
        report.transactions[topic] = counts
