"""``daemon verify``: a run with a known answer and kill -9s on a cluster, checked strictly.

How it works, for each joiner asked for: its example pipeline (``examples/``) gets topics of
its own under ``PREFIX.RUN`` (created with the partitions and replication factor given), a
workload with a known answer is produced to them (:mod:`~daemon.verify.workload`), then an
end-of-input marker per join key, as ``daemon replay`` sends. Every pipeline then runs in one
child ``daemon run`` with the file's connection settings (:mod:`~daemon.verify.child_file`),
which verify kills with SIGKILL at spread points of the input and starts again from its
checkpoints, and stops with SIGTERM once every input (and a second stage's input) is
committed. The cluster's settings that exactly-once output rests on are read before the run
(:mod:`~daemon.verify.durability`) and reported as warnings. The outputs and dead letters
are read back with ``read_committed`` consumers and as raw batches
(:mod:`~daemon.verify.readback`), and compared with the answer that the joiner's own logic
gives (:mod:`~daemon.verify.answer`, :mod:`~daemon.verify.check`). The topics are deleted at
the end unless ``keep``.
"""

from __future__ import annotations

import shutil
import tempfile
import uuid
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

from daemon.broker import EmbeddedBroker
from daemon.errors import EnrichdError
from daemon.formats.avro.codec import AvroCodec, load_schema_file
from daemon.kafka import connect, names
from daemon.kafka.admin import delete_topics, existing_topics
from daemon.kafka.topic_settings import describe
from daemon.model.config import PipelineFile, id_part, load_pipeline_file
from daemon.model.constants import DEFAULT_ID_PREFIX, DEFAULT_TRANSACTION_TIMEOUT_MS
from daemon.signals import StopRequest
from daemon.sink.commit_turn import turn_needed
from daemon.verify import child as runs
from daemon.verify.acl import refusal
from daemon.verify.check import JoinerCheck, check
from daemon.verify.child_file import connection_tables, write_child_file
from daemon.verify.cluster import WorkloadFeed, make_topics, probe_transactions
from daemon.verify.continuous_kills import LongBatchKillPoints
from daemon.verify.durability import warnings
from daemon.verify.facts import BrokerFacts, broker_facts
from daemon.verify.kills import (
    BatchKillPoints,
    Interrupted,
    Kill,
    KillPoints,
    MarkerWatch,
    Progress,
    check_stop,
    run_with_kills,
)
from daemon.verify.modes import slots
from daemon.verify.plan import VerifiedPipeline, VerifyOptions, child_table, plan_pipeline
from daemon.verify.readback import RawLogs, TopicRead, read_committed, with_status
from daemon.verify.run_progress import CheckpointProgress, LagGroupProgress, RunProgress
from daemon.verify.zombie import Zombie


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
    input_at_start: int = 0
    """Of them, those produced before the child run started (the rest came while it ran)."""
    output_records: int = 0
    run_s: float = 0.0
    raw_batches: str = ""
    """Whether the raw batches were read, or why not."""
    transactions: dict[str, dict[str, int]] = field(default_factory=dict)
    """Per topic: records by what became of their transaction, and markers."""
    replays_found: int = 0
    zombie: Zombie | None = None
    """What the zombie scenario saw (None: not run)."""
    """Replayed tasks that found their batch committed by its marker, as the child logged."""
    held: list[str] = field(default_factory=list)
    settings: list[str] = field(default_factory=list)
    """Warnings about the cluster's settings, each with its fix (never a failure)."""
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
            the missing ACL), or the child run made no progress, or ``--prefix`` holds a
            character a pipeline's name may not (its pipelines' names start with it).
    """
    try:
        # The child's pipelines are PREFIX-RUN-JOINER: a dot would stop them at their start,
        # and their transactional ids would not start with the enrichd.PREFIX the ACLs name.
        id_part(options.prefix)
    except ValueError as refused:
        raise EnrichdError(f"--prefix {refused}") from None
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
        # The child creates its engine's own topics (lookup's retractions) as verify's.
        connection["kafka"] = {
            "replication_factor": options.replication,
            **connection.get("kafka", {}),
            "bootstrap_servers": servers,
        }
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
            make_topics(conf, pipelines, options, base, created)
            report.settings = settings_warnings(conf, file, pipelines)
            probe_transactions(conf, base, options.prefix, pipelines[0].config.output.topic)
            check_stop(stop, "the workload was produced")
            progress(f"producing the first part of {len(pipelines)} workload(s) under {base}")
            # A part before the start, the rest while the run goes on (kills.run_with_kills).
            feed = WorkloadFeed(conf, pipelines, options.prefix, parts(options))
            feed.next_part(stop)
            report.input_records = feed.total
            report.input_at_start = sum(sum(p.ends.values()) for p in pipelines)
            child_path = folder / "verify.toml"
            write_child_file(
                child_path,
                connection,
                {"master": f"local[{slots(pipelines)}]"},
                [child_table(p.config) for p in pipelines],
            )
            children = [runs.ChildRun(child_path, folder)]
            id_prefix = file.kafka.id_prefix if file is not None else DEFAULT_ID_PREFIX
            markers = MarkerWatch(
                conf, [names.markers_topic(id_prefix, p.config.name) for p in pipelines]
            )
            watch: RunProgress
            points: KillPoints
            if options.mode == "continuous":
                watch = groups = LagGroupProgress(conf, id_prefix, pipelines)
                stack.callback(groups.close)
                points = LongBatchKillPoints(markers, groups, options.seed)
            else:
                watch, points = CheckpointProgress(pipelines), BatchKillPoints(markers, pipelines)
            try:
                outcome = run_with_kills(
                    children,
                    conf,
                    pipelines,
                    options,
                    report.kills,
                    progress,
                    stop,
                    markers,
                    feed,
                    watch,
                    points,
                    # Only the zombie scenario stops a run (which may ask the cluster's id).
                    commit_turn=options.zombie
                    and turn_needed(file.kafka.commit_turn if file else None, conf),
                )
            finally:
                markers.close()
                for child in children:
                    if child.exited() is None:  # interrupted or failed: never left running
                        child.kill()
            report.run_s, report.starts = outcome.run_s, outcome.starts
            report.replays_found = sum(child.replays_found() for child in children)
            report.zombie = outcome.zombie
            report.stop_exit_code = outcome.stop_exit_code
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


def parts(options: VerifyOptions) -> int:
    """The parts the workload is produced in (:func:`daemon.verify.kills.run_with_kills`).

    One before the start, one once the run planned its first micro-batch, one after each
    kill's restart, and for the zombie scenario one to stop the run in and one for the new
    run to go on with (its tasks then end any transaction the killed old run left open).
    """
    return 2 + options.kills + 2 * options.zombie


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


def _client_conf(file: PipelineFile | None, servers: str) -> dict[str, str]:
    if file is None:
        return {"bootstrap.servers": servers}
    return connect.client_conf(file, servers)


def settings_warnings(
    conf: dict[str, str], file: PipelineFile | None, pipelines: list[VerifiedPipeline]
) -> list[str]:
    """The settings warnings of the file's pipelines' output topics, where they exist.

    Those are the topics exactly-once output goes to in production; without them (no file,
    or its topics not made yet) verify's own output topics stand in, made with the
    ``--replication`` asked for.
    """
    present = existing_topics(conf)
    topics = [
        topic
        for pipe in (file.pipeline if file is not None else [])
        for topic in [pipe.output.topic, pipe.dead_letters]
        + [out.topic for out in pipe.outputs.values()]
        if topic in present
    ]
    if not topics:
        topics = [
            topic
            for pipe in pipelines
            for topic in [pipe.config.output.topic, pipe.config.dead_letters]
            + [out.topic for out in pipe.config.outputs.values()]
        ]
    timeout = file.kafka.transaction_timeout if file else DEFAULT_TRANSACTION_TIMEOUT_MS
    return warnings(describe(conf, topics), topics, timeout)


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
        check_stop(stop, f"{pipe.joiner}'s output was read back")
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
