"""Offsets the broker no longer has, found as a micro-batch is planned, handled by the policy.

A pipeline's next offset in a partition comes from its checkpoint, or from the seed
``daemon reset`` or ``daemon rescale`` left for a new one. The broker may no longer have it:
retention or DeleteRecords removed the records before it was read (the offset is below the
partition's earliest), the topic was deleted and created again (:attr:`MissingOffset.cause`
``recreated``: its topic id changed, on a broker that gives topic ids; else a new topic's
offsets start at 0 again, so the offset may lie past the log end), or the partition is gone
(``gone``: the topic was created again with fewer partitions). A reader left to the Kafka
client's ``auto.offset.reset`` would jump somewhere without a word; the source reads with
``auto.offset.reset = error`` instead and the planner (:mod:`daemon.source.planning`) checks
each batch's start against the partition's earliest offset, log end and topic id, then does
what the pipeline's ``on_missing_offsets`` says (:data:`~daemon.model.config.MissingOffsets`):

- ``fail``: the pipeline stops with :class:`~daemon.errors.MissingOffsetsError`, one line
  naming the partition, the offset needed and the earliest the broker has.
- ``earliest``: it goes on from the partition's earliest offset; the offsets between the one
  needed and that one are skipped.
- ``latest``: it goes on from the partition's log end; every offset from the one needed to
  the log end is skipped.

Either of the last two is reported to the daemon (:func:`report`), which logs one WARN line
and counts the skipped offsets per topic and partition; a partition that is gone is left out
of the plans from then on. On a broker without topic ids, a topic created again with more
records than the offset needed cannot be told from the old one by offsets alone, as for
Spark's ``failOnDataLoss``: that case reads on from the offset.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

from daemon.errors import MissingOffsetsError
from daemon.model.reports import MissingOffset, MissingOffsetsResumed, Resumed
from daemon.model.wire import Offsets, is_partition_name, split_partition_name
from daemon.report_socket import send

log = logging.getLogger("enrichd.source")


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
    """Where ``policy`` (``earliest`` or ``latest``) goes on, and what it skips.

    A partition that is gone is read no more, whatever the policy: how many records it held
    past the offset needed is not known (0 are counted).
    """
    if policy in ("earliest", "latest") and missing.cause == "gone":
        return Resumed(missing, policy, -1, 0)
    if policy == "earliest":
        return Resumed(missing, policy, missing.earliest, max(missing.earliest - missing.needed, 0))
    if policy == "latest":
        first = missing.earliest if missing.past_the_end else missing.needed
        return Resumed(missing, policy, missing.end, max(missing.end - first, 0))
    raise ValueError(f"no way to go on with on_missing_offsets = {policy!r}")


def failure(pipeline: str, missing: MissingOffset) -> MissingOffsetsError:
    """The error that stops a pipeline whose policy is ``fail``: one line, what to do."""
    where = "without it" if missing.cause == "gone" else "from there"
    return MissingOffsetsError(
        f'pipeline {pipeline!r}: {missing.facts()}; set on_missing_offsets = "earliest" or '
        f'"latest" to read on {where}, or move its start with `daemon reset`'
    )


def report(address: str | None, pipeline: str, resumed: Sequence[Resumed]) -> bool:
    """Tell the daemon where ``pipeline`` went on past missing offsets; False if not heard.

    The report (:class:`~daemon.model.reports.MissingOffsetsResumed`) goes to the daemon's
    socket (:mod:`daemon.report_socket`), which the planner can reach from Spark's Python
    worker on the driver, whatever process it runs in; the daemon logs the WARN line and
    counts. The line is also logged here, for a pipeline run without a daemon (a test,
    ``daemon replay``).
    """
    for item in resumed:
        log.warning("%s", item.warning(pipeline))
    if address is None:
        return False
    return send(address, MissingOffsetsResumed(pipeline, tuple(resumed)))
