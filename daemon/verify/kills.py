"""``daemon verify``'s child run: started, killed with SIGKILL at spread points, restarted.

A kill lands once the input planned (:mod:`daemon.verify.run_progress`) passes the next of
``kills`` spread points and a batch was planned since the last restart, at a point of that
batch its :class:`KillPoints` choose. For a micro-batch run (:class:`BatchKillPoints`): the
first once a task of that batch committed its output (its batch marker landed on the
pipeline's markers topic) while the batch is not yet in the commit log, so that the restarted
run replays a batch part of which committed; the others a little after the batch was planned
(:data:`KILL_DELAYS_S`). A continuous run's are in :mod:`daemon.verify.continuous_kills`. The
next waits until the restarted run is back. The run ends with SIGTERM once every input, and a
second stage's input, is committed.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from daemon.errors import EnrichdError
from daemon.kafka import connect
from daemon.replay import committed_ends
from daemon.signals import StopRequest
from daemon.verify import child as runs
from daemon.verify.acl import acl_line, code_in_text
from daemon.verify.child import planned_since
from daemon.verify.plan import VerifiedPipeline, VerifyOptions
from daemon.verify.run_progress import RunProgress
from daemon.verify.zombie import Zombie, replace_paused_run

KILL_DELAYS_S: tuple[float | None, ...] = (None, 0.0, 0.7)
"""When each kill lands, in turn: once a task of the planned micro-batch committed (None),
then seconds after the batch is planned: before its tasks start, and while they run."""
_POLL_S = 0.05


@dataclass
class Kill:
    """One kill -9 of the child run."""

    number: int
    at_s: float
    """Seconds since the first start."""
    batch: int
    """The micro-batch last planned (of all pipelines, the highest) when it landed."""
    consumed: int
    """Input records planned so far, of all the workloads' records."""
    delay_s: float
    """Seconds from seeing the batch planned to the kill."""
    recovered_s: float | None = None
    """Seconds from the restart until a pipeline of the restarted run planned a micro-batch
    past those it had planned before the kill."""
    after: str = "planned"
    """What the kill waited for: the batch ``planned``, or ``a task committed`` of it."""


@dataclass
class ChildOutcome:
    """How the child run went, once every input was committed."""

    run_s: float
    """Seconds from the first start to the SIGTERM."""
    starts: int
    stop_exit_code: int | None
    zombie: Zombie | None = None
    """What the zombie scenario saw (None: not run)."""


class Feed(Protocol):
    """The workload, produced in parts (:class:`daemon.verify.cluster.WorkloadFeed`)."""

    @property
    def total(self) -> int:
        """Records every part together holds."""

    @property
    def finished(self) -> bool:
        """Whether every part was produced."""

    def next_part(self, stop: StopRequest) -> None:
        """Produce the next part, and wait for its delivery."""


Progress = Callable[[str], None]
"""Told what verify is doing, one short line at a time."""


class Interrupted(Exception):  # noqa: N818 - it names what happened, as KeyboardInterrupt does
    """SIGTERM or SIGINT came before ``what`` (the exception's text)."""


def check_stop(stop: StopRequest, what: str) -> None:
    """Raise :class:`Interrupted` if SIGTERM or SIGINT came before ``what``."""
    if stop.is_set():
        raise Interrupted(what)


class MarkerWatch:
    """Whether a task committed since :meth:`mark`: the pipelines' markers topics moved.

    Each committed task adds a marker record to its pipeline's markers topic (one partition),
    so the topics' ends (as ListOffsets gives them: some brokers under-report the end, but
    every new transaction moves it) grow by one or more. A topic not made yet ends at 0.
    """

    def __init__(self, conf: dict[str, str], topics: list[str]) -> None:
        self.consumer = connect.consumer(conf, {"group.id": "enrichd-verify-markers"})
        self.topics = topics
        self.marked = 0

    def ends(self) -> int:
        """The markers topics' ends, added up."""
        # Late: confluent_kafka loads with the first client (daemon.model.constants says why).
        from confluent_kafka import KafkaException, TopicPartition

        total = 0
        for topic in self.topics:
            try:
                _, high = self.consumer.get_watermark_offsets(TopicPartition(topic, 0), 5)
            except KafkaException:
                continue  # not made yet: the first batch's tasks make it
            total += high
        return total

    def mark(self) -> None:
        """Remember the ends as they are now."""
        self.marked = self.ends()

    def moved(self) -> bool:
        """Whether a marker landed since :meth:`mark`."""
        return self.ends() > self.marked

    def close(self) -> None:
        """Close the consumer."""
        self.consumer.close()


WaitFor = Callable[[str, Callable[[], bool]], None]
"""Polls a condition while the child run goes on, until it holds (or fails verify)."""


class KillPoints(Protocol):
    """Where in a batch each kill lands, once the input planned passed its point."""

    def land(self, number: int, point: int, wait: WaitFor, stop: StopRequest) -> str:
        """Wait until kill ``number`` is due; what it waited for (:attr:`Kill.after`)."""


class BatchKillPoints:
    """A micro-batch run's kills, in turn at :data:`KILL_DELAYS_S`."""

    def __init__(self, markers: MarkerWatch, pipelines: list[VerifiedPipeline]) -> None:
        self.markers = markers
        self.pipelines = pipelines

    def land(self, number: int, point: int, wait: WaitFor, stop: StopRequest) -> str:
        """Once a task of the planned batch committed, or a delay after it was planned."""
        delay = KILL_DELAYS_S[(number - 1) % len(KILL_DELAYS_S)]
        if delay is None:
            # A task committed (of this batch: the last one's were in before it was planned);
            # a batch through before that was seen leaves the kill after it, no replay found.
            markers = self.markers
            markers.mark()
            wait(
                f"a task of the micro-batch past {point} records committed",
                lambda: (
                    markers.moved()
                    or not runs.any_in_flight(pipe.config.checkpoint for pipe in self.pipelines)
                ),
            )
            return "a task committed"
        if stop.sleep(delay):
            raise Interrupted(f"kill -9 #{number}")
        return "planned"


def run_with_kills(
    children: list[runs.ChildRun],
    conf: dict[str, str],
    pipelines: list[VerifiedPipeline],
    options: VerifyOptions,
    kills: list[Kill],
    progress: Progress,
    stop: StopRequest,
    markers: MarkerWatch,
    feed: Feed,
    watch: RunProgress,
    points: KillPoints,
    *,
    commit_turn: bool = False,
) -> ChildOutcome:
    """Start the child, kill it at spread points, restart it, and stop it once all is in.

    The workload's first part is in before the start; the next goes in once the run planned
    its first batch, and another each time a restarted run is back, so the input keeps
    arriving while it runs. ``watch`` says how far the run got, ``points`` where in a batch
    each kill lands. Each kill is added to ``kills`` as it lands, so that a run
    stopped half-way has them. With ``options.zombie``, the zombie scenario
    (:mod:`daemon.verify.zombie`) follows the kills, and the new run it starts is added to
    ``children`` (verify kills those left running however it ends) and goes on to the end.
    ``commit_turn``: the child's transactions take the machine's turns (its zombie is stopped
    outside them).
    """
    started = time.monotonic()
    deadline = started + options.timeout_s
    child = children[0]

    def wait_on(run: runs.ChildRun, what: str, done: Callable[[], bool]) -> None:
        await_progress(run, deadline, what, done, prefix=options.prefix, stop=stop)

    def wait(what: str, done: Callable[[], bool]) -> None:
        wait_on(child, what, done)

    total = feed.total
    at_first, _ = watch.planned()
    child.start()
    progress("daemon run started")
    wait("the first micro-batch", lambda: planned_since(at_first, watch.planned()[0]))
    progress("producing the next part of the workload while the run goes on")
    feed.next_part(stop)
    for number in range(1, options.kills + 1):
        produced = sum(sum(pipe.ends.values()) for pipe in pipelines)
        # Spread over the whole input, but within what is produced by now.
        point = min(total * number // (options.kills + 1), produced * number // (number + 1))
        at_start, _ = watch.planned()

        def past_point(since: list[int] = at_start, point: int = point) -> bool:
            batches, records = watch.planned()
            return planned_since(since, batches) and records >= point

        wait(f"input planned past {point} of {total} records", past_point)
        planned_at = time.monotonic()
        after = points.land(number, point, wait, stop)
        batches, consumed = watch.planned()
        child.kill()
        kill = Kill(
            number,
            round(time.monotonic() - started, 1),
            max(batches),
            consumed,
            round(time.monotonic() - planned_at, 1),
            after=after,
        )
        kills.append(kill)
        progress(f"kill -9 #{number} at {consumed} of {total} input records; restarting")
        restarted = time.monotonic()
        child.start()
        wait(
            "a micro-batch after the restart",
            lambda before=batches, read=consumed: watch.back(before, read),  # type: ignore[misc]
        )
        kill.recovered_s = round(time.monotonic() - restarted, 1)
        feed.next_part(stop)
    zombie = None
    if options.zombie:
        progress("zombie: stopping daemon run with SIGSTOP, starting a new one")

        def planned() -> list[int]:
            return watch.planned()[0]

        def more_input() -> None:  # a micro-batch to stop the run in
            feed.next_part(stop)

        new, zombie = replace_paused_run(
            child,
            pipelines,
            planned,
            more_input,
            markers,
            wait_on,
            stop,
            continuous=options.mode == "continuous",
            commit_turn=commit_turn,
        )
        children.append(new)
        progress(f"zombie: the resumed run {zombie.ended}")
        child = new
        feed.next_part(stop)
    while not feed.finished:
        feed.next_part(stop)
    wait("every input record committed", watch.all_committed)
    for pipe in pipelines:
        for name, stage in pipe.config.outputs.items():
            ends = committed_ends(conf, pipe.config.output.topic)
            progress(f"waiting for {pipe.joiner}'s {name} stage")
            wait(
                f"{pipe.joiner}'s second stage ({stage.topic}) caught up",
                lambda p=pipe, n=name, e=ends: watch.stage_reached(p, n, e),  # type: ignore[misc]
            )
    run_s = round(time.monotonic() - started, 1)
    progress("stopping daemon run with SIGTERM")
    code = child.stop()
    return ChildOutcome(run_s, sum(run.starts for run in children), code, zombie)


def await_progress(
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
        check_stop(stop, what)
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
