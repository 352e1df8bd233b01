"""Topic checks and creation at pipeline start-up."""

from __future__ import annotations

import time

from daemon.errors import KafkaUnavailableError, KafkaUnreachableError
from daemon.kafka.connect import ClientErrors, admin, connection_failure


def existing_topics(client_conf: dict[str, str], timeout: float = 10.0) -> dict[str, int]:
    """Every topic of the cluster and its partition count.

    Raises:
        KafkaUnreachableError: the broker did not answer in time (it may yet: the service
            tries again).
        KafkaUnavailableError: the broker refused the credentials or failed the TLS
            handshake (the message says which): only the operator can fix that.
    """
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
    return {name: len(topic.partitions) for name, topic in metadata.topics.items()}


def create_topics(
    client_conf: dict[str, str], topics: dict[str, int], replication: int = -1
) -> None:
    """Create the topics that do not exist yet, with the given partition counts.

    ``replication`` is their replication factor; -1: the broker's default. A refusal is
    raised as :class:`KafkaUnavailableError` from the client's exception (its error code
    names the refusal).
    """
    # Late: confluent_kafka loads with the first client (daemon.model.constants says why).
    from confluent_kafka.admin import NewTopic

    present = existing_topics(client_conf)
    wanted = [
        NewTopic(name, partitions, replication)
        for name, partitions in topics.items()
        if name not in present
    ]
    if not wanted:
        return
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
