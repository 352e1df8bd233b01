"""Every Kafka client enrichd makes, made here, from the pipeline file's client settings.

``conf`` is always :func:`daemon.pipeline.plan.client_conf`'s dict: ``bootstrap.servers``
and ``[kafka] client_conf`` (``security.protocol``, ``sasl.*``, ``ssl.*``, ...). Each client
adds only the settings of its own job on top, so the connection settings reach every
consumer, producer and admin client, on the driver and on the executors alike (a test
checks that no module makes a client any other way).

:func:`connection_failure` turns what librdkafka reported while a first request failed
into one line that names the cluster and the reason: refused credentials, a TLS handshake
that failed, or no answer at all.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from daemon.errors import ConfigError
from daemon.secrets import redact

if TYPE_CHECKING:
    from daemon.model.config import PipelineFile

_AUTHENTICATION = -169  # librdkafka's RD_KAFKA_RESP_ERR__AUTHENTICATION
_SSL = -181  # RD_KAFKA_RESP_ERR__SSL
_TRANSPORT = -195  # RD_KAFKA_RESP_ERR__TRANSPORT: also a TLS alert from the broker's side
_QUIET = {"log_level": 0}
"""librdkafka logs every failed connection attempt (about twenty a second), which would bury
the one-line error enrichd gives; what went wrong comes through :class:`ClientErrors`."""


def client_conf(file: PipelineFile, bootstrap_servers: str | None = None) -> dict[str, str]:
    """The confluent-kafka settings shared by every client of the pipelines in ``file``."""
    servers = bootstrap_servers or file.kafka.bootstrap_servers
    if servers is None:
        raise ConfigError(
            f"{file.source}: [kafka] bootstrap_servers is not set; set it, or use "
            "`daemon replay`/`daemon demo`, which start the embedded broker"
        )
    settings = {key: _setting_text(value) for key, value in file.kafka.client_conf.items()}
    return {**settings, "bootstrap.servers": servers}


def _setting_text(value: str | bool | int | float) -> str:
    """A client setting as librdkafka's text (it takes every setting as a string)."""
    return str(value).lower() if isinstance(value, bool) else str(value)


def consumer(conf: dict[str, str], own: Mapping[str, Any] | None = None) -> Any:
    """A Consumer with the cluster's settings and ``own`` settings of its job."""
    # Late: confluent_kafka loads with the first client (daemon.model.constants says why).
    from confluent_kafka import Consumer

    return Consumer({**conf, **(own or {})})


def producer(conf: dict[str, str], own: Mapping[str, Any] | None = None) -> Any:
    """A Producer with the cluster's settings and ``own`` settings of its job."""
    # Late: confluent_kafka loads with the first client (daemon.model.constants says why).
    from confluent_kafka import Producer

    return Producer({**conf, **(own or {})})


def admin(conf: dict[str, str], errors: ClientErrors | None = None) -> Any:
    """An AdminClient with the cluster's settings, its log off; its errors go to ``errors``."""
    # Late: confluent_kafka loads with the first client (daemon.model.constants says why).
    from confluent_kafka.admin import AdminClient

    extra: dict[str, Any] = {} if errors is None else {"error_cb": errors}
    return AdminClient({**conf, **_QUIET, **extra})


class ClientErrors:
    """A client's ``error_cb``: keeps the errors librdkafka reports (served by ``poll()``)."""

    def __init__(self) -> None:
        self.errors: list[Any] = []

    def __call__(self, error: Any) -> None:
        """Keep one reported error."""
        self.errors.append(error)

    def first(self, code: int, containing: str = "") -> str | None:
        """The text of the first error with ``code`` (and ``containing``), without framing."""
        for error in self.errors:
            if error.code() == code and containing in str(error.str()):
                return _reason(str(error.str()))
        return None

    def refused(self) -> bool:
        """Whether the cluster refused the credentials or the TLS handshake failed."""
        return _refused_credentials(self) is not None or _failed_handshake(self) is not None


def _refused_credentials(errors: ClientErrors) -> str | None:
    return errors.first(_AUTHENTICATION)


def _failed_handshake(errors: ClientErrors) -> str | None:
    return errors.first(_SSL) or errors.first(_TRANSPORT, "SSL routines")


def _reason(text: str) -> str:
    """A librdkafka error's text without the broker's name before and the timing after."""
    text = re.sub(r"^\S+://\S+?: ", "", text)
    text = re.sub(r"\s*\(after \d+ms in state [A-Z_]+[^)]*\)\s*$", "", text)
    text = re.sub(r", verify that ssl\.ca\.location is correctly configured.*$", "", text)
    return text.removeprefix("SASL authentication error: ")


def connection_failure(servers: str, errors: ClientErrors, exc: BaseException) -> str:
    """One line saying why the cluster at ``servers`` did not answer, and what to check."""
    refused = _refused_credentials(errors)
    if refused is not None:
        return redact(
            f"Kafka at {servers} refused the credentials ({refused}); check "
            "security.protocol, sasl.mechanism, sasl.username and sasl.password in "
            "[kafka] client_conf"
        )
    handshake = _failed_handshake(errors)
    if handshake is not None:
        return redact(
            f"Kafka at {servers}: the TLS handshake failed ({handshake}); check ssl.ca.location "
            "(the CA that signed the broker's certificate) and, for mutual TLS, "
            "ssl.certificate.location and ssl.key.location in [kafka] client_conf"
        )
    return redact(
        f"cannot reach Kafka at {servers!r} ({exc}); "
        "check [kafka] bootstrap_servers and that the broker is running"
    )
