"""The codecs of an input's or output's values and keys, from schema files or the registry.

How it works: plain Avro needs only the ``.avsc`` file. With the registry (Confluent framing)
the subject comes from :mod:`daemon.formats.subjects`, and then:

- no schema file: the subject's latest version is the schema (an input's reader schema, an
  output's writer schema and its id);
- a schema file on an input: it is the reader schema; records still name their writer's id;
- a schema file on an output: it is the writer schema. With ``auto_register`` it is
  registered under the subject at start, and the registry's compatibility rule decides;
  without, it must already be registered there (Confluent's serializers with
  ``auto.register.schemas = false`` look it up the same way).

A registry that refuses the credentials or does not answer is a
:class:`~daemon.errors.SchemaRegistryUnavailableError`; an answer about the subject or schema
(not found, incompatible) is a one-line :class:`~daemon.errors.ConfigError` naming both.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from daemon.errors import ConfigError
from daemon.formats.avro.codec import AvroCodec, load_schema_file, parse_schema_text
from daemon.formats.kafka_keys import KafkaKeyCodec
from daemon.formats.registry import access_failure, client_settings, is_not_found, new_client
from daemon.formats.subjects import key_subject, value_subject
from daemon.model.config import InputConfig, OutputConfig, PipelineFile
from daemon.secrets import display_url, redact

if TYPE_CHECKING:
    from fastavro.types import Schema

Spec = InputConfig | OutputConfig


def codec_for(file: PipelineFile, spec: Spec, *, writing: bool) -> AvroCodec:
    """The codec of one input's or output's values (see the module docstring).

    ``writing``: the codec writes records (an output, or replay's producer of an input), so
    it needs its schema's id.

    Raises:
        SchemaError: a schema file is missing or invalid.
        ConfigError: no registry is configured for a subject, or the registry does not know
            the subject or schema, or refuses to register it.
        SchemaRegistryUnavailableError: the registry refused the credentials, failed the TLS
            handshake or did not answer.
    """
    subject = value_subject(spec)
    if subject is None:
        assert spec.schema_file is not None  # noqa: S101 - plain Avro always has its file
        writer = (
            load_schema_file(spec.writer_schema)
            if isinstance(spec, InputConfig) and spec.writer_schema is not None
            else None
        )
        return AvroCodec(load_schema_file(spec.schema_file), writer_schema=writer)
    return registry_codec(
        file, subject, spec.schema_file, writing=writing, register=spec.auto_registers
    )


def key_codec_for(file: PipelineFile, spec: Spec, *, writing: bool) -> KafkaKeyCodec:
    """The codec of one input's or output's Kafka keys, in its ``key_format``.

    Raises:
        SchemaError, ConfigError, SchemaRegistryUnavailableError: as :func:`codec_for`, for
            an Avro key's schema.
    """
    if spec.key_format != "avro":
        return KafkaKeyCodec(spec.key_format)
    subject = key_subject(spec)
    if subject is None:
        assert spec.key_schema is not None  # noqa: S101 - plain Avro always has its file
        return KafkaKeyCodec("avro", AvroCodec(load_schema_file(spec.key_schema)))
    codec = registry_codec(
        file, subject, spec.key_schema, writing=writing, register=spec.auto_registers
    )
    return KafkaKeyCodec("avro", codec)


def registry_codec(
    file: PipelineFile, subject: str, schema_file: Path | None, *, writing: bool, register: bool
) -> AvroCodec:
    """A Confluent-framed codec for ``subject`` (see the module docstring).

    Raises:
        ConfigError, SchemaRegistryUnavailableError: as :func:`codec_for`.
    """
    client, url, settings = registry_client(file, subject)
    if schema_file is None:
        latest = latest_version(client, url, subject)
        return AvroCodec(
            parse_schema_text(str(latest.schema.schema_str)),
            registry_url=url,
            schema_id=latest.schema_id if writing else None,
            registry_settings=settings,
        )
    schema = load_schema_file(schema_file)
    if not writing:
        return AvroCodec(schema, registry_url=url, registry_settings=settings)
    return AvroCodec(
        schema,
        registry_url=url,
        schema_id=schema_id(client, url, subject, schema_file, register=register),
        registry_settings=settings,
    )


def registry_client(file: PipelineFile, subject: str) -> tuple[Any, str, dict[str, Any]]:
    """The registry client of ``file``, its URL and settings, to serve ``subject``.

    Raises:
        ConfigError: the file has no ``[schema_registry]``.
    """
    if file.schema_registry is None:
        raise ConfigError(
            f"{file.source}: subject {subject!r} needs a [schema_registry]; add one, or give "
            "`schema` (an .avsc file) for plain Avro"
        )
    settings = client_settings(file.schema_registry, file.kafka)
    return new_client(settings), file.schema_registry.url, settings


def schema_id(client: Any, url: str, subject: str, schema_file: Path, *, register: bool) -> int:
    """The id of the schema in ``schema_file`` under ``subject``, registering it if ``register``.

    Raises:
        ConfigError: the registry refuses to register it (incompatible, invalid), or without
            ``register``, it is not registered under the subject.
        SchemaRegistryUnavailableError: the registry cannot be used.
    """
    # The registry client is heavy (its HTTP and auth libraries): only registry users load it.
    from confluent_kafka.schema_registry import Schema

    schema = Schema(Path(schema_file).read_text(encoding="utf-8"), "AVRO")
    if register:
        try:
            return int(client.register_schema(subject, schema))
        except Exception as exc:
            unavailable = access_failure(url, exc)
            if unavailable is not None:
                raise unavailable from None
            raise ConfigError(
                f"schema registry {display_url(url)} refused to register {schema_file} under "
                f"subject {subject!r}: {reason(exc)}"
            ) from None
    try:
        found = ask(url, f"subject {subject!r}", client.lookup_schema, subject, schema)
    except NotFound as missing:
        raise ConfigError(
            f"{schema_file} is not registered under subject {subject!r} at {display_url(url)} "
            f"({missing.reason}); register it, or set auto_register = true"
        ) from None
    return int(found.schema_id)


def latest_version(client: Any, url: str, subject: str) -> Any:
    """The latest version of ``subject`` (a ``RegisteredSchema``).

    Raises:
        ConfigError: the subject is not registered, or another answer.
        SchemaRegistryUnavailableError: the registry cannot be used.
    """
    try:
        return ask(url, f"subject {subject!r}", client.get_latest_version, subject)
    except NotFound as missing:
        raise ConfigError(
            f"schema registry subject {subject!r} not found at {display_url(url)} "
            f"({missing.reason}); register it first"
        ) from None


class NotFound(ConfigError):
    """The registry answered "not found" (404 and its error code): ``reason`` holds its words."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def ask(url: str, what: str, call: Any, *args: Any) -> Any:
    """``call(*args)`` on the registry client, its failures sorted out.

    Raises:
        SchemaRegistryUnavailableError: the registry cannot be used.
        NotFound: the registry answered "not found".
        ConfigError: any other answer, naming ``what``.
    """
    try:
        return call(*args)
    except Exception as exc:
        unavailable = access_failure(url, exc)
        if unavailable is not None:
            raise unavailable from None
        if is_not_found(exc):
            raise NotFound(redact(" ".join(str(exc).split()))) from None
        raise ConfigError(f"schema registry {display_url(url)}: {what}: {reason(exc)}") from None


def compatibility_problems(client: Any, url: str, subject: str, schema_file: Path) -> list[str]:
    """Why the registry would refuse to register ``schema_file`` under ``subject``; [] if not.

    Asks the registry's compatibility endpoint with its reasons (``verbose``), which the
    client's ``test_compatibility`` leaves out. A subject without versions takes any schema.

    Raises:
        SchemaRegistryUnavailableError: the registry cannot be used.
    """
    body = {"schema": Path(schema_file).read_text(encoding="utf-8"), "schemaType": "AVRO"}
    path = f"compatibility/subjects/{quote(subject, safe='')}/versions/latest?verbose=true"
    # The client's REST client: its test_compatibility returns the verdict without reasons.
    try:
        answer = ask(url, f"subject {subject!r}", client._rest_client.post, path, body)
    except NotFound:
        return []  # no such subject yet: the schema will be its first version
    if answer.get("is_compatible", True):
        return []
    messages = "; ".join(str(m) for m in answer.get("messages") or []) or "no reason given"
    return [f"{schema_file} is incompatible with subject {subject!r}: {redact(messages)}"]


def latest_schema(client: Any, url: str, subject: str) -> Schema:
    """The latest schema of ``subject``, parsed.

    Raises:
        SchemaRegistryUnavailableError: the registry cannot be used.
        ConfigError: the subject is not registered, its schema is not valid Avro, or another
            answer.
    """
    return parse_schema_text(str(latest_version(client, url, subject).schema.schema_str))


def reason(exc: BaseException) -> str:
    """The registry's own words for a refusal, on one line, secrets redacted."""
    text = getattr(exc, "error_message", None) or str(exc)
    return redact(" ".join(str(text).split()))
