"""Topic checks and creation at pipeline start-up."""

from __future__ import annotations

from typing import Any

from daemon.errors import KafkaUnavailableError, KafkaUnreachableError


def admin_client(client_conf: dict[str, str]) -> Any:
    """An AdminClient for the configured cluster.

    Its own log is off: librdkafka logs every failed connection attempt (about twenty a
    second), which would bury the one-line error enrichd gives when the broker is away.
    """
    from confluent_kafka.admin import AdminClient

    return AdminClient({**client_conf, "log_level": 0})


def existing_topics(client_conf: dict[str, str], timeout: float = 10.0) -> dict[str, int]:
    """Every topic of the cluster and its partition count.

    Raises:
        KafkaUnreachableError: the broker did not answer in time.
    """
    try:
        metadata = admin_client(client_conf).list_topics(timeout=timeout)
    except Exception as exc:
        raise KafkaUnreachableError(
            f"cannot reach Kafka at {client_conf.get('bootstrap.servers')!r} ({exc}); "
            "check [kafka] bootstrap_servers and that the broker is running"
        ) from None
    return {name: len(topic.partitions) for name, topic in metadata.topics.items()}


def create_topics(client_conf: dict[str, str], topics: dict[str, int]) -> None:
    """Create the topics that do not exist yet, with the given partition counts."""
    from confluent_kafka.admin import NewTopic

    present = existing_topics(client_conf)
    wanted = [
        NewTopic(name, partitions) for name, partitions in topics.items() if name not in present
    ]
    if not wanted:
        return
    admin = admin_client(client_conf)  # must outlive the futures it answers
    for name, future in admin.create_topics(wanted).items():
        try:
            future.result(timeout=30)
        except Exception as exc:
            if "already exists" not in str(exc).lower():
                raise KafkaUnavailableError(f"cannot create topic {name!r}: {exc}") from None
