"""How long a plan that would read nothing waits for a record, as a Kafka consumer's poll does.

Spark asks the source for the next plan 10 ms (``spark.sql.streaming.pollingDelay``) after one
that read nothing, and each plan costs a DescribeTopics round trip, the probe's watermarks,
the checkpoint's due-time file and a call from the JVM: an idle ``daemon run`` of the
tweet-views pipeline spent 15-20% of a core on it, most of it in Spark's Python source runner.
So such a plan first waits on the planner's probe consumer, which follows the log ends, and is
then made again (:meth:`~daemon.source.planning.SourcePlanner.latest_offsets`): a record a
Fetch response brings meanwhile ends the wait and is in the plan, so the wait adds no latency,
and an idle query asks about ten times a second instead of a hundred (two plans an ask).
"""

from __future__ import annotations

import time
from typing import Any

from daemon.checkpoint import due_times
from daemon.source.spec import SourceSpec

IDLE_WAIT_S = 0.1
"""The longest a plan that would read nothing waits for a record.

A record ends the wait at once, so the bound is not a latency: it bounds how long a query's
stop waits for the plan in flight, and how late a plan sees what the probe does not receive as
a record (a topic's new partition, an end moved by a transaction's marker alone). 100 ms is the
probe's own Fetch wait (``fetch.wait.max.ms``), which already bounds how late it hears of a
record from a broker that holds a Fetch until then, and it cuts Spark's hundred asks a second
to about ten (the idle cost to about a third, in the commit that made it). A longer wait would
save more of what is left, and hold a stop and those changes back as much longer."""


def long_poll(probe: Any, spec: SourceSpec) -> bool:
    """Wait up to :func:`idle_wait_s` for the probe consumer to fetch a record; whether it waited.

    ``probe`` is the planner's (None once stopped: no wait), and follows the log ends.
    """
    wait_s = 0.0 if probe is None else idle_wait_s(spec, time.time_ns() // 1_000_000)
    if wait_s > 0:
        await_record(probe, wait_s)
    return wait_s > 0


def idle_wait_s(spec: SourceSpec, now_ms: int) -> float:
    """How long a plan of ``spec``'s that would read nothing waits at ``now_ms``, in seconds.

    :data:`IDLE_WAIT_S`, never past the moment the plan's clock may move (the next ``wake_ms``
    period's start, or a timer of the due-time map due sooner), so timers fire as without the
    wait; 0 with a processing-time trigger, with which Spark asks once per trigger anyway (and
    a wait longer than a short trigger would log Spark's falling-behind warning every time).
    """
    if spec.trigger_ms:
        return 0.0
    wait_s = IDLE_WAIT_S
    if spec.wake_ms:
        until_ms = (now_ms // spec.wake_ms + 1) * spec.wake_ms
        due = None if spec.checkpoint is None else due_times.read(spec.checkpoint)
        earliest = None if due is None else due.earliest
        if earliest is not None and earliest > now_ms:  # (else it moved to this period)
            until_ms = min(until_ms, earliest)
        wait_s = min(wait_s, (until_ms - now_ms) / 1000)
    return wait_s


def await_record(probe: Any, timeout_s: float) -> bool:
    """Wait up to ``timeout_s`` for the probe consumer to fetch a record; whether one came.

    The probe follows the log ends, so what it fetches now is new. The record is taken off its
    queue: the probe needs only the watermark its Fetch response brought, and the next plan
    drains the rest (:meth:`~daemon.source.planning.SourcePlanner._probe_may_have_paused`).
    """
    return probe.poll(timeout_s) is not None
