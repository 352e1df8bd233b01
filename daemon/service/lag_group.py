"""The pipeline's consumer group: where its committed micro-batches end, for Kafka's lag tools.

enrichd's readers fetch by partition (``assign()``) and commit nothing: the checkpoint, not a
group, says where a query reads on. So Burrow, kafka-lag-exporter, ``kafka-consumer-groups``
and KEDA's Kafka scaler, which all read a group's committed offsets, would see no consumer of
the inputs. So after each micro-batch that Spark has committed, the offsets its inputs ended
at are committed to a group named for the query, ``<id_prefix>.<pipeline>``
(:func:`daemon.kafka.names.pipeline_group`; a joiner's second stage has its own,
``<id_prefix>.<pipeline>.<output>``), as ``kafka-consumer-groups --reset-offsets`` would set
them. The group is only a report: nothing reads it back to plan, no consumer joins it, and a
commit that fails is skipped (the next batch's commits its ends).

Why from the batch's progress report, in the monitor's worker thread
(:mod:`daemon.service.monitor`), not in the batch: Spark posts the report after it wrote the
batch to its commit log, so the group never runs ahead of what the checkpoint holds, and the
commit stays off the batch's path, where it could neither slow nor fail it. A report lost
on the way (the listener's queue full, a stop) leaves the group one batch behind until the
next one.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition

from daemon.kafka import connect
from daemon.kafka.names import pipeline_group
from daemon.model.wire import split_partition_name

log = logging.getLogger("enrichd.operations")

COMMIT_TIMEOUT_S = 10.0
"""How long one commit may take, finding the group's coordinator included."""


class LagGroups:
    """Commits each query's input ends to its group, through one admin client.

    Args:
        client_conf: the Kafka client settings of the file.
        id_prefix: ``[kafka] id_prefix``, which the groups' names start with.
    """

    def __init__(self, client_conf: dict[str, str], id_prefix: str) -> None:
        self.client_conf = client_conf
        self.id_prefix = id_prefix
        self._admin: Any = None
        self._sent: dict[str, dict[str, int]] = {}
        self._pending: dict[str, Any] = {}
        self._failing: set[str] = set()

    def commit(self, pipeline: str, ends: Mapping[str, int]) -> None:
        """Commit ``ends`` (``topic/partition`` -> offset) as the group of ``pipeline``'s offsets.

        Without waiting: the answer is looked at by the next commit of the pipeline (one
        still in flight is waited for, for at most :data:`COMMIT_TIMEOUT_S`). The same ends as
        last time are not sent again (an idle query's reports).
        """
        group = pipeline_group(self.id_prefix, pipeline)
        self._answered(pipeline, group)
        ends = dict(ends)
        if not ends or self._sent.get(pipeline) == ends:
            return
        try:
            if self._admin is None:
                self._admin = connect.admin(self.client_conf)
            offsets = [
                TopicPartition(*split_partition_name(name), offset)
                for name, offset in sorted(ends.items())
            ]
            request = [ConsumerGroupTopicPartitions(group, offsets)]
            futures = self._admin.alter_consumer_group_offsets(
                request, request_timeout=COMMIT_TIMEOUT_S
            )
        except Exception as exc:  # a lag report is skipped, never a batch or the service
            self._failed(pipeline, group, exc)
            return
        self._pending[pipeline] = futures[group]
        self._sent[pipeline] = ends

    def _answered(self, pipeline: str, group: str) -> None:
        """Hear the answer to the pipeline's last commit: a failure is logged once."""
        future = self._pending.pop(pipeline, None)
        if future is None:
            return
        try:
            future.result(timeout=COMMIT_TIMEOUT_S)
        except Exception as exc:
            self._sent.pop(pipeline, None)  # sent again with the next batch's, even if alike
            self._failed(pipeline, group, exc)
            return
        if pipeline in self._failing:
            self._failing.discard(pipeline)
            log.info("pipeline %s: its lag group %s is committed to again", pipeline, group)

    def _failed(self, pipeline: str, group: str, error: object) -> None:
        """One WARN line while commits to a group fail (lag tools see it fall behind)."""
        if pipeline in self._failing:
            return
        self._failing.add(pipeline)
        log.warning(
            "pipeline %s: could not commit its input offsets to group %s for lag tools "
            "(the pipeline is not affected): %s",
            pipeline,
            group,
            error,
            extra={"pipeline": pipeline},
        )

    def flush(self) -> None:
        """Wait for the commits in flight (each at most :data:`COMMIT_TIMEOUT_S`)."""
        for pipeline in list(self._pending):
            self._answered(pipeline, pipeline_group(self.id_prefix, pipeline))
