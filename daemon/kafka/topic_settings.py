"""What the cluster allows a pipeline to write, asked once at start (DescribeConfigs).

A pipeline writes its output and dead-letter topics in transactions. What the broker
refuses there, and how long it lets a transaction stay open, are the topics' and the
brokers' settings, not the client's: asked when the pipeline is planned, they size the
producer (:mod:`daemon.sink.spec`'s :class:`~daemon.sink.spec.WriteLimits`) so that a record
the broker would refuse is refused before it is sent, and a transaction timeout the broker
would refuse is refused at start with one line instead of failing every task.

A setting the cluster does not answer for (an ACL without ``DescribeConfigs``, a broker
that does not implement it) is None: unknown, and the client's own defaults apply.

The settings that decide whether committed output survives a lost broker
(``min.insync.replicas``, ``unclean.leader.election.enable``, the replication factor) are
read too: a start does not judge them, ``daemon verify`` reports them
(:mod:`daemon.verify.durability`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from daemon.kafka.connect import admin

_WAIT_S = 30.0


@dataclass(frozen=True)
class TopicSettings:
    """A topic's settings that decide what it accepts."""

    max_message_bytes: int | None = None
    """``max.message.bytes``: the largest record batch it takes (None: unknown)."""
    compacted: bool = False
    """Whether ``cleanup.policy`` includes ``compact``: a record without a key is refused."""
    retention_ms: int | None = None
    """``retention.ms``: how long it keeps records (-1: for ever; None: unknown)."""
    min_insync_replicas: int | None = None
    """``min.insync.replicas``: how many replicas must have a write before it is committed."""
    unclean_leader_election: bool | None = None
    """``unclean.leader.election.enable``: whether an out-of-date replica may become leader."""
    replication_factor: int | None = None
    """The fewest replicas of any of its partitions (Metadata; None: not listed)."""
    partitions: int | None = None
    """How many partitions it has (Metadata; None: not listed, as a topic that does not exist)."""


@dataclass(frozen=True)
class ClusterSettings:
    """What the cluster answered about its brokers and the named topics."""

    topics: dict[str, TopicSettings] = field(default_factory=dict)
    transaction_max_timeout_ms: int | None = None
    """The brokers' ``transaction.max.timeout.ms``: the longest transaction timeout a
    producer may ask for."""
    message_max_bytes: int | None = None
    """The brokers' ``message.max.bytes``: the default of every topic's ``max.message.bytes``."""
    offsets_retention_minutes: int | None = None
    """The brokers' ``offsets.retention.minutes``: how long an idle group's offsets live."""
    min_insync_replicas: int | None = None
    """The brokers' ``min.insync.replicas``: the default of every topic's."""
    unclean_leader_election: bool | None = None
    """The brokers' ``unclean.leader.election.enable``: the default of every topic's."""


def describe(client_conf: dict[str, str], topics: list[str]) -> ClusterSettings:
    """The settings of ``topics`` and of one broker (brokers of a cluster share them).

    Never raises: what the cluster does not answer is None (see the module docstring).
    """
    # Late: confluent_kafka loads with the first client (daemon.model.constants says why).
    from confluent_kafka.admin import ConfigResource

    client = admin(client_conf)  # must outlive the futures it answers
    try:
        metadata = client.list_topics(timeout=_WAIT_S)
    except Exception:  # noqa: BLE001 - unknown settings are the answer
        return ClusterSettings()
    brokers = sorted(metadata.brokers)
    wanted = [ConfigResource("topic", topic) for topic in topics]
    if brokers:
        wanted.append(ConfigResource("broker", str(brokers[0])))
    answers: dict[tuple[str, str], dict[str, str]] = {}
    try:
        futures = client.describe_configs(wanted, request_timeout=_WAIT_S)
    except Exception:  # noqa: BLE001 - see the docstring
        return ClusterSettings()
    for resource, future in futures.items():
        try:
            entries = future.result(timeout=_WAIT_S)
        except Exception:  # noqa: BLE001, S112 - that resource's settings stay unknown
            continue
        answers[(_kind(resource), resource.name)] = {
            name: entry.value for name, entry in entries.items() if entry.value is not None
        }
    broker = answers.get(("broker", str(brokers[0])), {}) if brokers else {}
    return ClusterSettings(
        topics={
            topic: _topic(answers.get(("topic", topic)), metadata.topics.get(topic))
            for topic in topics
        },
        transaction_max_timeout_ms=_number(broker.get("transaction.max.timeout.ms")),
        message_max_bytes=_number(broker.get("message.max.bytes")),
        offsets_retention_minutes=_number(broker.get("offsets.retention.minutes")),
        min_insync_replicas=_number(broker.get("min.insync.replicas")),
        unclean_leader_election=_flag(broker.get("unclean.leader.election.enable")),
    )


def _kind(resource: Any) -> str:
    """``"topic"`` or ``"broker"``, whichever way the client names the resource type."""
    return str(getattr(resource.restype, "name", resource.restype)).lower()


def _topic(settings: dict[str, str] | None, listed: Any) -> TopicSettings:
    """A topic's settings from its DescribeConfigs answer and its Metadata listing."""
    replicas = partitions = None
    if listed is not None and listed.error is None and listed.partitions:
        partitions = len(listed.partitions)
        replicas = min(len(partition.replicas) for partition in listed.partitions.values())
    if settings is None:
        return TopicSettings(replication_factor=replicas, partitions=partitions)
    policy = settings.get("cleanup.policy", "")
    return TopicSettings(
        max_message_bytes=_number(settings.get("max.message.bytes")),
        compacted="compact" in {part.strip() for part in policy.split(",")},
        retention_ms=_number(settings.get("retention.ms")),
        min_insync_replicas=_number(settings.get("min.insync.replicas")),
        unclean_leader_election=_flag(settings.get("unclean.leader.election.enable")),
        replication_factor=replicas,
        partitions=partitions,
    )


def _flag(text: str | None) -> bool | None:
    if text is None or text.strip().lower() not in ("true", "false"):
        return None
    return text.strip().lower() == "true"


def _number(text: str | None) -> int | None:
    try:
        return None if text is None else int(text)
    except ValueError:
        return None
