"""Offsets the broker no longer has, found as a micro-batch is planned, handled by the policy.

A pipeline's next offset in a partition comes from its checkpoint. The broker may no longer
have it: retention or DeleteRecords removed the records before it was read (the offset is
below the partition's earliest), or the topic was deleted and created again (a new topic's
offsets start at 0 again, so the offset lies past the log end). A reader left to the Kafka
client's ``auto.offset.reset`` would jump somewhere without a word; the source reads with
``auto.offset.reset = error`` instead and the planner (:mod:`daemon.source.planning`) checks
each batch's start against the partition's earliest offset and log end, then does what the
pipeline's ``on_missing_offsets`` says (:data:`~daemon.model.config.MissingOffsets`):

- ``fail``: the pipeline stops with :class:`~daemon.errors.MissingOffsetsError`, one line
  naming the partition, the offset needed and the earliest the broker has.
- ``earliest``: it goes on from the partition's earliest offset; the offsets between the one
  needed and that one are skipped.
- ``latest``: it goes on from the partition's log end; every offset from the one needed to
  the log end is skipped.

Either of the last two is reported to the daemon (:func:`report`), which logs one WARN line
and counts the skipped offsets per topic and partition. A topic created again with more
records than the offset needed cannot be told from the old one by offsets alone, as for
Spark's ``failOnDataLoss``: that case reads on from the offset.
"""

from __future__ import annotations

import json
import logging
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from daemon.errors import MissingOffsetsError
from daemon.model.wire import Offsets, is_partition_name, partition_name, split_partition_name

log = logging.getLogger("enrichd.source")


@dataclass(frozen=True)
class MissingOffset:
    """A partition that no longer has the offset a pipeline is to read next."""

    topic: str
    partition: int
    needed: int
    """The offset the pipeline is to read next."""
    earliest: int
    """The earliest offset the partition has."""
    end: int
    """The partition's log end (its next offset)."""

    @property
    def name(self) -> str:
        """The partition's name in a plan's offsets."""
        return partition_name(self.topic, self.partition)

    @property
    def past_the_end(self) -> bool:
        """Whether the offset lies past the log end: the topic was created again, most likely."""
        return self.needed > self.end

    def facts(self) -> str:
        """What is missing, in words: the partition, the offset needed, the earliest there."""
        where = f"input topic {self.topic!r} partition {self.partition}"
        if self.past_the_end:
            return (
                f"{where} no longer has offset {self.needed}: the earliest it has is "
                f"{self.earliest} and its log ends at {self.end} (was the topic deleted and "
                "created again?)"
            )
        return (
            f"{where} no longer has offset {self.needed}: the earliest it has is "
            f"{self.earliest} (retention or DeleteRecords removed the records before it)"
        )


@dataclass(frozen=True)
class Resumed:
    """Where the pipeline goes on in a partition that lacked its offset, and what it skips."""

    missing: MissingOffset
    policy: str
    at: int
    """The offset the pipeline reads next instead."""
    skipped: int
    """How many offsets it will never read, as far as the offsets tell."""

    def warning(self, pipeline: str) -> str:
        """The WARN line: the facts, the policy, where it goes on and what it skipped."""
        return (
            f"pipeline {pipeline!r}: {self.missing.facts()}; on_missing_offsets = "
            f"{self.policy!r}: reading on from offset {self.at}, {self.skipped} offsets skipped"
        )


def find_missing(
    start: Offsets,
    earliest: Mapping[str, int],
    ends: Mapping[str, int],
    *,
    trusted_ends: Sequence[str] | None = None,
) -> list[MissingOffset]:
    """The partitions whose ``start`` offset the broker no longer has, in name order.

    Args:
        start: the batch's start offsets (partition names and other entries).
        earliest: each partition's earliest offset.
        ends: each partition's log end.
        trusted_ends: the partitions whose log end is known for sure (from a Fetch
            response; some brokers' ListOffsets under-reports it); None: every one. Only
            these are checked for an offset past their end.
    """
    found = []
    for name in sorted(start):
        if not is_partition_name(name) or name not in earliest or name not in ends:
            continue
        needed, low, end = int(start[name]), earliest[name], ends[name]
        beyond = needed > end and (trusted_ends is None or name in trusted_ends)
        if needed < low or beyond:
            topic, partition = split_partition_name(name)
            found.append(MissingOffset(topic, partition, needed, low, end))
    return found


def resume(missing: MissingOffset, policy: str) -> Resumed:
    """Where ``policy`` (``earliest`` or ``latest``) goes on, and what it skips."""
    if policy == "earliest":
        return Resumed(missing, policy, missing.earliest, max(missing.earliest - missing.needed, 0))
    if policy == "latest":
        first = missing.earliest if missing.past_the_end else missing.needed
        return Resumed(missing, policy, missing.end, max(missing.end - first, 0))
    raise ValueError(f"no way to go on with on_missing_offsets = {policy!r}")


def failure(pipeline: str, missing: MissingOffset) -> MissingOffsetsError:
    """The error that stops a pipeline whose policy is ``fail``: one line, what to do."""
    return MissingOffsetsError(
        f'pipeline {pipeline!r}: {missing.facts()}; set on_missing_offsets = "earliest" or '
        '"latest" to read on from there, or move its start with `daemon reset`'
    )


def report(address: str | None, pipeline: str, resumed: Sequence[Resumed]) -> bool:
    """Tell the daemon where ``pipeline`` went on past missing offsets; False if not heard.

    The message goes to the daemon's metrics socket (:mod:`daemon.sink.metrics_relay`), which
    the planner can reach from Spark's Python worker on the driver, whatever process it runs
    in; the daemon logs the WARN line and counts. The line is also logged here, for a
    pipeline run without a daemon (a test, ``daemon replay``).
    """
    for item in resumed:
        log.warning("%s", item.warning(pipeline))
    if address is None:
        return False
    message = {
        "pipeline": pipeline,
        "missing_offsets": [
            {
                "topic": item.missing.topic,
                "partition": item.missing.partition,
                "needed": item.missing.needed,
                "earliest": item.missing.earliest,
                "end": item.missing.end,
                "policy": item.policy,
                "at": item.at,
                "skipped": item.skipped,
            }
            for item in resumed
        ],
    }
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
            sock.settimeout(1.0)  # a stuck daemon must not stall planning
            sock.sendto(json.dumps(message).encode(), address)
    except OSError:
        return False
    return True


def resumed_of(message: Mapping[str, object]) -> list[Resumed]:
    """The :class:`Resumed` items of a :func:`report` message (the daemon's end)."""
    items = message.get("missing_offsets")
    found = []
    for item in items if isinstance(items, list) else []:
        missing = MissingOffset(
            str(item["topic"]),
            int(item["partition"]),
            int(item["needed"]),
            int(item["earliest"]),
            int(item["end"]),
        )
        found.append(Resumed(missing, str(item["policy"]), int(item["at"]), int(item["skipped"])))
    return found
