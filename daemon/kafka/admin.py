"""Topic checks and creation at pipeline start-up, and which cluster enrichd talks to."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from daemon.errors import ConfigError, KafkaUnavailableError, KafkaUnreachableError
from daemon.kafka.connect import ClientErrors, admin, connection_failure

EMBEDDED_CLUSTER_ID = "enrichd-embedded"
"""The cluster id the embedded development broker (:mod:`daemon.broker`) is started with,
by which enrichd knows it wherever it runs (``daemon broker`` in another terminal too)."""


def existing_topics(client_conf: dict[str, str], timeout: float = 10.0) -> dict[str, int]:
    """Every topic of the cluster and its partition count.

    Raises:
        KafkaUnreachableError: the broker did not answer in time (it may yet: the service
            tries again).
        KafkaUnavailableError: the broker refused the credentials or failed the TLS
            handshake (the message says which): only the operator can fix that.
    """
    metadata = _metadata(client_conf, timeout)
    return {name: len(topic.partitions) for name, topic in metadata.topics.items()}


def cluster_id(client_conf: dict[str, str], timeout: float = 10.0) -> str | None:
    """The id the cluster gives in its metadata (None: a broker too old to give one).

    Raises:
        KafkaUnreachableError: the broker did not answer in time.
        KafkaUnavailableError: the broker refused the credentials or the TLS handshake.
    """
    found = _metadata(client_conf, timeout).cluster_id
    return None if found is None else str(found)


def is_embedded(client_conf: dict[str, str]) -> bool:
    """Whether the cluster is enrichd's embedded development broker (see its cluster id)."""
    return cluster_id(client_conf) == EMBEDDED_CLUSTER_ID


def _metadata(client_conf: dict[str, str], timeout: float) -> Any:
    """The cluster's metadata (topics, brokers, cluster id), waited for up to ``timeout``."""
    errors = ClientErrors()
    client = admin(client_conf, errors)
    deadline = time.monotonic() + timeout
    while True:
        # Asked a second at a time: refused credentials or a failed TLS handshake end the
        # wait at once, where librdkafka would go on trying until the timeout.
        try:
            metadata = client.list_topics(timeout=max(min(1.0, deadline - time.monotonic()), 0.1))
            break
        except Exception as exc:
            client.poll(0)  # serves the error callbacks: why the connection failed
            if errors.refused() or time.monotonic() >= deadline:
                servers = str(client_conf.get("bootstrap.servers"))
                failure = connection_failure(servers, errors, exc)
                if errors.refused():
                    raise KafkaUnavailableError(failure) from None
                raise KafkaUnreachableError(failure) from None
    return metadata


@dataclass(frozen=True)
class TopicFacts:
    """What the cluster says of one topic: its partitions and its id."""

    partitions: tuple[int, ...]
    topic_id: str | None
    """The topic's id (Kafka 2.8 and later give one; a topic deleted and created again gets a
    new one); None: the broker gives none."""


def describe_topics(
    client: Any, topics: list[str], timeout: float = 10.0
) -> dict[str, TopicFacts | None]:
    """Each of ``topics``' :class:`TopicFacts`, or None for one that does not exist.

    ``client``: an admin client (:func:`daemon.kafka.connect.admin`), kept by a caller that
    asks often.

    Raises:
        KafkaUnavailableError: the cluster did not answer, or refused to describe a topic.
    """
    # Late: confluent_kafka loads with the first client (daemon.model.constants says why).
    from confluent_kafka import KafkaError, TopicCollection

    found: dict[str, TopicFacts | None] = {}
    if not topics:
        return found
    futures = client.describe_topics(TopicCollection(list(topics)), request_timeout=timeout)
    for name, future in futures.items():
        try:
            described = future.result(timeout=timeout)
        except Exception as exc:
            error = exc.args[0] if exc.args else None
            code = getattr(error, "code", None)
            if callable(code) and code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
                found[name] = None
                continue
            raise KafkaUnavailableError(f"cannot describe topic {name!r}: {exc}") from None
        found[name] = TopicFacts(
            tuple(sorted(p.id for p in described.partitions)), _topic_id(described.topic_id)
        )
    return found


def _topic_id(uuid: Any) -> str | None:
    """A topic id as text; None for none (brokers before topic ids answer all zeros)."""
    if uuid is None:
        return None
    if uuid.get_most_significant_bits() == 0 and uuid.get_least_significant_bits() == 0:
        return None
    return str(uuid)


def topic_ids(client_conf: dict[str, str], topics: list[str]) -> dict[str, str]:
    """The ids of those of ``topics`` that exist and have one.

    Raises:
        KafkaUnavailableError: the cluster did not answer, or refused to describe a topic.
    """
    client = admin(client_conf)
    described = describe_topics(client, topics)
    return {
        name: facts.topic_id
        for name, facts in described.items()
        if facts is not None and facts.topic_id is not None
    }


def create_topics(
    client_conf: dict[str, str],
    topics: dict[str, int],
    replication: int | None = -1,
    *,
    configs: dict[str, dict[str, str]] | None = None,
) -> None:
    """Create the topics that do not exist yet, with the given partition counts.

    ``replication`` is their replication factor; -1: the broker's default; None (``[kafka]
    replication_factor`` unset): the broker's default on the embedded broker, where there is
    one broker, and a refusal anywhere else, where the broker's default may be less than the
    cluster's durability needs (Kafka's own is 1). ``configs``: a topic's settings, by its
    name (``cleanup.policy``, ...). A refusal of the broker is raised as
    :class:`KafkaUnavailableError` from the client's exception (its error code names the
    refusal).

    Raises:
        ConfigError: topics are missing, ``replication`` is None and the cluster is not the
            embedded broker.
    """
    # Late: confluent_kafka loads with the first client (daemon.model.constants says why).
    from confluent_kafka.admin import NewTopic

    present = existing_topics(client_conf)
    missing = {name: partitions for name, partitions in topics.items() if name not in present}
    if not missing:
        return
    if replication is None:
        if not is_embedded(client_conf):
            raise ConfigError(
                f"topics {', '.join(map(repr, missing))} do not exist, and [kafka] "
                "replication_factor is not set; create them with the replication your "
                "cluster needs, or set replication_factor (3 on most production clusters; "
                "-1: the broker's default.replication.factor) for enrichd to create them"
            )
        replication = -1
    wanted = [
        NewTopic(name, partitions, replication, config=(configs or {}).get(name, {}))
        for name, partitions in missing.items()
    ]
    client = admin(client_conf)  # must outlive the futures it answers
    for name, future in client.create_topics(wanted).items():
        try:
            future.result(timeout=30)
        except Exception as exc:
            if "already exists" not in str(exc).lower():
                raise KafkaUnavailableError(f"cannot create topic {name!r}: {exc}") from exc


def delete_topics(client_conf: dict[str, str], topics: list[str]) -> dict[str, Exception]:
    """Delete the topics; the ones that could not be, with the client's exception for each."""
    if not topics:
        return {}
    client = admin(client_conf)  # must outlive the futures it answers
    failed: dict[str, Exception] = {}
    for name, future in client.delete_topics(topics).items():
        try:
            future.result(timeout=30)
        except Exception as exc:
            failed[name] = exc
    return failed


def groups_starting(client_conf: dict[str, str], prefix: str) -> list[str]:
    """The cluster's consumer groups whose names start with ``prefix``, sorted.

    Raises:
        KafkaUnavailableError: the cluster would not list them (no ACL to, say).
    """
    client = admin(client_conf)  # must outlive the futures it answers
    try:
        listed = client.list_consumer_groups(request_timeout=30).result(timeout=30)
    except Exception as exc:
        raise KafkaUnavailableError(f"cannot list the groups {prefix}*: {exc}") from None
    return sorted(group.group_id for group in listed.valid if group.group_id.startswith(prefix))


def delete_groups(client_conf: dict[str, str], starting_with: list[str]) -> list[str]:
    """Delete every consumer group whose name starts with one of ``starting_with``.

    Returns:
        The groups deleted, in order.

    Raises:
        KafkaUnavailableError: the cluster would not list or delete them (the message says
            why: no ACL to, say).
    """
    if not starting_with:
        return []
    client = admin(client_conf)  # must outlive the futures it answers
    try:
        listed = client.list_consumer_groups(request_timeout=30).result(timeout=30)
        doomed = sorted(
            group.group_id
            for group in listed.valid
            if any(group.group_id.startswith(prefix) for prefix in starting_with)
        )
        if not doomed:
            return []
        for future in client.delete_consumer_groups(doomed, request_timeout=30).values():
            future.result(timeout=30)
    except Exception as exc:
        names = ", ".join(f"{prefix}*" for prefix in starting_with)
        raise KafkaUnavailableError(f"cannot delete the groups {names}: {exc}") from None
    return doomed
