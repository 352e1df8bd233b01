"""The Confluent Schema Registry client of the pipeline file's ``[schema_registry]``.

How it works: :func:`client_settings` turns the section into the settings of confluent-kafka's
``SchemaRegistryClient`` (the ``basic.auth.credentials.source`` of Confluent's Java clients
is translated here, since the Python client knows only ``basic.auth.user.info`` and user info
in the URL). The settings travel with each codec to Spark's executors, which make their own
client from them (:meth:`daemon.formats.avro.codec.AvroCodec.registry`).

:func:`access_failure` tells a registry that cannot be used (credentials refused, access
denied, TLS handshake failed, no answer, too busy, failing, or something else answering in its
place) from one that answered about the subject or schema: the first is an operator's
problem, or an outage that passes, one line naming the registry and the reason; the second is
about the record or the subject. Only the registry's own "not found" answers
(:data:`NOT_FOUND_CODES`) say that a subject, version or schema does not exist: a 404 without
one of its error codes is a page of something in front of it (a proxy, a load balancer, a
wrong URL), and a 408 or 429 an answer to wait out.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from daemon.errors import ConfigError, SchemaRegistryUnavailableError
from daemon.secrets import display_url, redact

if TYPE_CHECKING:
    from daemon.model.config import KafkaConfig, SchemaRegistryConfig


def client_settings(registry: SchemaRegistryConfig, kafka: KafkaConfig) -> dict[str, Any]:
    """The settings of a ``SchemaRegistryClient`` for ``registry``.

    Raises:
        ConfigError: ``SASL_INHERIT`` without ``sasl.username`` and ``sasl.password`` in
            ``[kafka] client_conf``.
    """
    settings = registry.settings
    source = settings.pop("basic.auth.credentials.source", "USER_INFO")
    if source == "SASL_INHERIT":
        user, password = (kafka.client_conf.get(k) for k in ("sasl.username", "sasl.password"))
        if not user or not password:
            raise ConfigError(
                '[schema_registry] basic.auth.credentials.source = "SASL_INHERIT" needs '
                "sasl.username and sasl.password in [kafka] client_conf"
            )
        settings["basic.auth.user.info"] = f"{user}:{password}"
    return {"url": registry.url, **settings}


def new_client(settings: dict[str, Any]) -> Any:
    """A ``SchemaRegistryClient`` with ``settings`` (no request is made yet).

    Raises:
        ConfigError: the settings are not the client's (a malformed ``basic.auth.user.info``,
            a certificate file that cannot be read, ...).
    """
    # The registry client is heavy (its HTTP and auth libraries, most of a second): it
    # loads only for a pipeline file with a [schema_registry].
    from confluent_kafka.schema_registry import SchemaRegistryClient

    try:
        return SchemaRegistryClient(settings)
    except (ValueError, TypeError, OSError) as exc:
        raise ConfigError(f"[schema_registry]: {redact(str(exc))}") from None


NOT_FOUND_CODES = frozenset({40401, 40402, 40403})
"""The Schema Registry's error codes for "subject not found", "version not found" and "schema
not found" (with HTTP status 404)."""


def is_not_found(exc: BaseException) -> bool:
    """Whether ``exc`` is the registry's own answer that a subject, version or schema is unknown."""
    return getattr(exc, "http_status_code", None) == 404 and (
        getattr(exc, "error_code", None) in NOT_FOUND_CODES
    )


def access_failure(url: str, exc: BaseException) -> SchemaRegistryUnavailableError | None:
    """The error to raise when ``exc`` says the registry at ``url`` cannot be used, else None.

    None means the registry answered, with something other than a refusal, an outage or a
    server error (a subject or schema id it does not know, a schema it will not register): a
    problem of the data or the configuration, not of the connection.
    """
    shown = display_url(url)
    status = getattr(exc, "http_status_code", None)
    text = redact(" ".join(str(exc).split()))
    if status == 404 and not is_not_found(exc):
        message = (
            f"schema registry {shown} answered 404 without a registry error code ({text}): "
            "a proxy, load balancer or wrong path in front of it? check [schema_registry] url"
        )
    elif status in (408, 429):
        why = "timed out (408)" if status == 408 else "is too busy (429)"
        message = f"schema registry {shown} {why}: {text}"
    elif status == 401:
        message = (
            f"schema registry {shown} refused the credentials (401); check "
            "basic.auth.user.info or bearer.auth.* in [schema_registry]"
        )
    elif status == 403:
        message = (
            f"schema registry {shown} denied access (403); the credentials lack permission "
            "to read this subject or schema"
        )
    elif isinstance(status, int) and status >= 500:
        message = f"schema registry {shown} failed ({text})"
    elif status is not None:
        return None
    elif "CERTIFICATE_VERIFY_FAILED" in text or "SSL" in text or "TLS" in text:
        message = (
            f"schema registry {shown}: the TLS handshake failed ({text}); check "
            "ssl.ca.location (the CA that signed the registry's certificate) and, for mutual "
            "TLS, ssl.certificate.location and ssl.key.location in [schema_registry]"
        )
    elif isinstance(exc, OSError) or type(exc).__module__.split(".")[0].startswith("http"):
        message = f"cannot reach schema registry {shown} ({text}); check [schema_registry] url"
    else:
        return None
    return SchemaRegistryUnavailableError(message)


def unavailable(url: str, exc: BaseException, what: str) -> SchemaRegistryUnavailableError:
    """The error of an answer about ``what`` that is not the registry's "not found".

    Where only "not found" is an answer about the data (reading a record's writer schema),
    every other failure, :func:`access_failure`'s or not, is the registry's: the record is
    held back, not dead-lettered.
    """
    found = access_failure(url, exc)
    if found is not None:
        return found
    status = getattr(exc, "http_status_code", None)
    answered = f"answered {status}" if isinstance(status, int) else "failed"
    text = redact(" ".join(str(exc).split()))
    return SchemaRegistryUnavailableError(
        f"schema registry {display_url(url)} {answered} for {what} ({type(exc).__name__}: {text})"
    )
