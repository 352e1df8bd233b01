"""What enrichd names on a Kafka cluster: its transactional ids and consumer groups.

Every one starts with ``[kafka] id_prefix`` and a dot (``enrichd.`` by default), so that two
environments of one pipeline on one cluster (staging and production, say) never share one,
and so that one prefixed ACL on groups and one on transactional ids cover a pipeline
(docs/connecting.md, "What a pipeline may do on the cluster"):

- ``<prefix>.<pipeline>.<task>``: the transactional id of each task of the joiner operator
  (:mod:`daemon.sink.task_producer`); two producers of one id fence each other off.
- ``<prefix>.<pipeline>.markers``: the topic of the batch markers, one record per task and
  committed micro-batch (:mod:`daemon.sink.markers`).
- ``<prefix>.<pipeline>.marker.<query id>.<task>``: the group whose committed offset points
  at the task's last marker, per query (a new checkpoint, a new query id).
- ``<prefix>.<pipeline>.sink.<query id>.<task>``: where an older enrichd kept the marker
  itself, as an offset on the output topic's partition 0; read once, to migrate.
- ``<prefix>.<pipeline>``: the group that holds where the query's committed micro-batches end,
  for lag tools (:mod:`daemon.service.lag_group`); committed to, never joined or read back.
- ``<prefix>.reader``: the group every reader names, as librdkafka's consumers must, though
  they read by ``assign()`` and never join it or commit to it. (librdkafka still looks up
  its coordinator, which a cluster with ACLs allows only to a principal that may describe
  the group.)

Example:
    >>> transactional_id("staging", "tweet-views", 1)
    'staging.tweet-views.1'
    >>> markers_topic("staging", "tweet-views")
    'staging.tweet-views.markers'
    >>> marker_group("staging", "tweet-views", "5f0c", 1)
    'staging.tweet-views.marker.5f0c.1'
    >>> pipeline_group("staging", "tweet-views")
    'staging.tweet-views'
    >>> marker_group("staging", "tweet-views", "5f0c", 1).startswith(
    ...     marker_groups_of("staging", "tweet-views", "5f0c"))
    True
    >>> legacy_marker_group("staging", "tweet-views", "5f0c", 1)
    'staging.tweet-views.sink.5f0c.1'
"""

from __future__ import annotations

from daemon.model.constants import DEFAULT_ID_PREFIX


def transactional_id(prefix: str, pipeline: str, task: int) -> str:
    """The transactional id of task ``task`` of ``pipeline``'s writer."""
    return f"{prefix}.{pipeline}.{task}"


def markers_topic(prefix: str, pipeline: str) -> str:
    """The topic of ``pipeline``'s batch markers (one partition)."""
    return f"{prefix}.{pipeline}.markers"


def marker_groups_of(prefix: str, pipeline: str, query_id: str) -> str:
    """What the names of one query's marker groups start with."""
    return f"{prefix}.{pipeline}.marker.{query_id}."


def marker_group(prefix: str, pipeline: str, query_id: str, task: int) -> str:
    """The group whose committed offset points at task ``task``'s last batch marker."""
    return f"{marker_groups_of(prefix, pipeline, query_id)}{task}"


def pipeline_group(prefix: str, pipeline: str) -> str:
    """The group whose committed offsets are where ``pipeline``'s committed batches end."""
    return f"{prefix}.{pipeline}"


def legacy_marker_groups_of(prefix: str, pipeline: str, query_id: str) -> str:
    """What the names of one query's marker groups started with before the markers topic."""
    return f"{prefix}.{pipeline}.sink.{query_id}."


def legacy_marker_group(prefix: str, pipeline: str, query_id: str, task: int) -> str:
    """The group that marked task ``task``'s last batch before the markers topic.

    Its offset on the output topic's partition 0 was the last committed batch + 1.
    """
    return f"{legacy_marker_groups_of(prefix, pipeline, query_id)}{task}"


def reader_group(prefix: str = DEFAULT_ID_PREFIX) -> str:
    """The group id every reader names (never joined, never committed to)."""
    return f"{prefix}.reader"
