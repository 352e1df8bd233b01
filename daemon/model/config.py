"""The pipeline file: its shape as pydantic models, and loading it with every problem reported.

Relative paths in the file (schemas, checkpoints) are resolved against the file's own folder,
so a pipeline file works the same from any working directory.

Why this module is long: it is the pipeline file's one schema, every table and setting with
its checks and the one line each problem gets; split by table, a reader would lose the
cross-table checks (a joiner's options against its inputs, names against names).
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any, Literal, get_args

from pydantic import (
    BaseModel,
    ByteSize,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
    field_validator,
    model_validator,
)

from daemon import secrets
from daemon.errors import ConfigError
from daemon.model.constants import (
    DEFAULT_ID_PREFIX,
    DEFAULT_STATE_BUCKETS,
    DEFAULT_TRANSACTION_TIMEOUT_MS,
)
from daemon.model.durations import DurationMs
from daemon.model.envelope import Envelope
from daemon.model.environment import expand_environment
from daemon.model.headers import DEFAULT_FROM, DEFAULT_POLICY, HeaderPolicy, HeadersFrom
from daemon.model.keys import KeyFormat
from daemon.model.selection import SelectField, select_entries

Delivery = Literal["exactly_once", "at_least_once"]
"""How output is written: one Kafka transaction per micro-batch and task (``exactly_once``),
or the idempotent producer without transactions (``at_least_once``)."""

Mode = Literal["micro_batch", "continuous"]
"""How a pipeline runs: a Spark micro-batch after another, each committing its output
(``micro_batch``, the default), or long micro-batches in which each task reads on by itself
and commits its output every ``commit_interval`` (``continuous``: docs/architecture.md,
"Continuous mode")."""

DEFAULT_COMMIT_INTERVAL_MS = 100
"""How often a continuous pipeline commits what it joined: Kafka Streams' default under
exactly-once."""

DEFAULT_LONG_BATCH_MS = 120_000
"""How long a continuous pipeline's long batch lasts: its state is written once per long
batch, and a task that dies replays at most one (docs/operations.md, "Continuous mode")."""

DEFAULT_HELD_STATE_BUDGET = 1536 << 20
"""How many bytes of state a continuous pipeline's lease may hold decoded in its Python
worker before its long batch ends early and writes it (estimated as the bucket cache
estimates: :mod:`daemon.continuous.held_buckets`). A 1,000,000-key ``comap`` lease holds
about 800 MiB by the estimate with as many tweets, 925 MiB with three tweets a user (835 and
970 bytes a user, measured on the benchmarks' users and tweets through the test kit's
harness), and must fit whole, or every long batch would end after its first sub-batch. The
estimate overstates a comap bucket's objects 1.8 times (and a lookup bucket's less: the
factor of four was measured on those), so at the budget they take about 0.9 GiB, and the
service, with Spark's JVM, stays under 4 GB: draining 1,000,000 users and as many tweets
in one lease, it peaked at 3.84 GB PSS with no long batch ending early (``python -m bench
continuous --users 1000000 --no-latency --runs 1``)."""

MissingOffsets = Literal["fail", "earliest", "latest"]
"""What a pipeline does when an input partition no longer has the offset it is to read next
(retention or DeleteRecords removed the records, or the topic was deleted and created again):
``fail`` stops the pipeline with a line naming the partition, the offset it needed and the
earliest the broker has (as Spark's ``failOnDataLoss`` and Kafka Streams' missing reset policy
do); ``earliest`` goes on from the earliest offset the partition has, ``latest`` from its log
end, each with a warning and the skipped offsets counted."""


_SIZE = TypeAdapter(ByteSize)
"""A size in bytes as the pipeline file writes it: ``"256MiB"``, or a number of bytes."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)


ClientValue = str | bool | int | float
"""A client setting's value, as TOML gives it."""

PATH_SETTINGS = frozenset(
    {
        "ssl.ca.location",
        "ssl.certificate.location",
        "ssl.key.location",
        "ssl.crl.location",
        "ssl.keystore.location",
        "sasl.kerberos.keytab",
    }
)
"""Client settings that name a file: a relative path is taken from the pipeline file's folder."""


_ID_PART = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*")


def id_part(value: str) -> str:
    """``value`` if it may be a part of the names enrichd gives on a cluster.

    Pipeline names and ``id_prefix`` are parts of transactional ids and group names, whose
    parts a dot separates (:mod:`daemon.kafka.names`): with dots in them, pipeline
    ``a.totals`` would share its ids with pipeline ``a``'s ``totals`` stage.

    Raises:
        ValueError: it holds anything but letters, digits, ``_`` and ``-``.
    """
    if _ID_PART.fullmatch(value) is None:
        raise ValueError(
            f"{value!r} may hold only letters, digits, '_' and '-', starting with a letter or "
            "digit: it is part of the transactional ids and groups enrichd names, where a '.' "
            "would let two pipelines' names meet (pipeline 'a.totals' and the totals stage of "
            "pipeline 'a')"
        )
    return value


class KafkaConfig(_Strict):
    """``[kafka]``: where the broker is and how to connect; omitted bootstrap: the embedded one.

    ``client_conf`` holds librdkafka settings (``security.protocol``, ``sasl.*``, ``ssl.*``,
    ...) given to every Kafka client enrichd makes, on the driver and on every executor.
    ``id_prefix`` starts every transactional id and consumer group enrichd makes
    (``enrichd``: the names before it existed); give each environment that shares a cluster
    its own. ``commit_turn`` forces the commit turn on or off (docs/semantics.md).
    ``replication_factor`` is that of the topics enrichd creates (outputs, dead letters);
    unset, it creates them only on the embedded broker (:func:`daemon.kafka.admin.create_topics`).
    ``transaction_timeout`` is the producers' ``transaction.timeout.ms``.
    """

    bootstrap_servers: str | None = None
    client_conf: dict[str, ClientValue] = Field(default_factory=dict)
    id_prefix: str = Field(
        default=DEFAULT_ID_PREFIX,
        description="what every transactional id and group enrichd makes starts with: one "
        "per environment sharing a cluster (daemon.kafka.names)",
    )
    commit_turn: bool | None = Field(
        default=None,
        description="whether transactions on one host end one at a time; unset: on the "
        "embedded broker only (daemon.sink.commit_turn)",
    )
    transaction_timeout: DurationMs = Field(
        default=DEFAULT_TRANSACTION_TIMEOUT_MS,
        ge=1000,
        description="how long a task's transaction may stay open before the broker aborts it "
        "(the producers' transaction.timeout.ms); at most the brokers' "
        "transaction.max.timeout.ms, which a start checks",
    )

    replication_factor: int | None = Field(
        default=None,
        description="replication factor of the topics enrichd creates (outputs, dead "
        "letters); -1: the broker's default.replication.factor; unset: it creates topics on "
        "the embedded broker only",
    )

    _id_prefix = field_validator("id_prefix")(id_part)

    @field_validator("replication_factor")
    @classmethod
    def _replication(cls, value: int | None) -> int | None:
        if value is not None and value != -1 and value < 1:
            raise ValueError(
                f"{value} is no replication factor; give 1 or more (3 on most production "
                "clusters), or -1 for the broker's default.replication.factor"
            )
        return value


REGISTRY_SETTINGS = (
    "basic.auth.user.info",
    "basic.auth.credentials.source",
    "bearer.auth.credentials.source",
    "bearer.auth.token",
    "bearer.auth.logical.cluster",
    "bearer.auth.identity.pool.id",
    "bearer.auth.client.id",
    "bearer.auth.client.secret",
    "bearer.auth.scope",
    "bearer.auth.issuer.endpoint.url",
    "bearer.auth.issuer.endpoint.query",
    "ssl.ca.location",
    "ssl.certificate.location",
    "ssl.key.location",
    "ssl.key.password",
    "proxy",
    "timeout",
    "cache.capacity",
    "cache.latest.ttl.sec",
    "max.retries",
    "retries.wait.ms",
    "retries.max.wait.ms",
)
"""The Confluent Schema Registry client's settings that ``[schema_registry]`` takes beside
``url``."""

CredentialsSource = Literal["USER_INFO", "URL", "SASL_INHERIT"]
"""Where basic auth credentials come from, as Confluent's clients name it: ``USER_INFO``
(``basic.auth.user.info``), ``URL`` (the URL's ``user:password@``), ``SASL_INHERIT``
(``[kafka] client_conf``'s ``sasl.username`` and ``sasl.password``)."""


class SchemaRegistryConfig(BaseModel):
    """``[schema_registry]``: a Confluent Schema Registry, for inputs and outputs by subject.

    Beside ``url`` it takes the registry client's settings by their Confluent names
    (:data:`REGISTRY_SETTINGS`): basic auth, bearer auth, TLS, timeouts.
    """

    model_config = ConfigDict(extra="allow", frozen=True)

    url: str

    @model_validator(mode="after")
    def _known_settings(self) -> SchemaRegistryConfig:
        for key, value in self.settings.items():
            if key not in REGISTRY_SETTINGS:
                raise ValueError(
                    f"unknown setting {key!r}; the registry client's settings: url, "
                    + ", ".join(REGISTRY_SETTINGS)
                )
            if not isinstance(value, ClientValue):
                raise ValueError(f"{key!r} must be a string, number or boolean")
        source = self.settings.get("basic.auth.credentials.source", "USER_INFO")
        choices = get_args(CredentialsSource)
        if source not in choices:
            raise ValueError(
                f"basic.auth.credentials.source {source!r} is not one of {', '.join(choices)}"
            )
        return self

    @property
    def settings(self) -> dict[str, Any]:
        """The client settings given beside ``url``."""
        return dict(self.model_extra or {})


class ServiceConfig(_Strict):
    """``[service]``: how ``daemon run`` serves its operator."""

    http: str | None = Field(
        default=None,
        pattern=r"^[^:\s]*:\d+$",
        description="HOST:PORT of /healthz, /readyz and /metrics; unset: no endpoint",
    )
    stuck_after_failures: int = Field(
        default=5,
        ge=2,
        description=(
            "failures in a row of one micro-batch, with the same error, after which its "
            "pipeline is reported stuck (/readyz, enrichd_pipeline_stuck)"
        ),
    )


class SparkConfig(_Strict):
    """``[spark]``: the Spark master, its scratch folder and extra Spark configuration."""

    master: str = "local[2]"
    local_dir: Path | None = Field(
        default=None,
        description=(
            "Spark's scratch space on this host: the join state's working copy (RocksDB) and "
            "shuffle files; unset: $ENRICHD_SPARK_LOCAL_DIR, else the temporary folder "
            "(daemon.spark.scratch)"
        ),
    )
    conf: dict[str, str] = Field(default_factory=dict)


class StateConfig(_Strict):
    """``[state]``: how the joiner operators keep their state in Spark's Python workers.

    Spark's state store is always the durable copy. With ``cache`` on, each Python worker also
    keeps the buckets it decoded, and uses one in the next micro-batch only when a stamp
    written with the store's copy says it is that copy (docs/operations.md, State). With
    ``deltas`` on, a micro-batch that changed a few keys of a bucket writes only those.
    """

    cache: bool = Field(
        default=True,
        description="keep decoded state buckets in the Python workers between micro-batches",
    )
    cache_size: ByteSize | None = Field(
        default=None,
        gt=0,
        description=(
            'bytes of decoded buckets each Python worker may keep ("512MiB"); unset: a quarter '
            "of spark.executor.pyspark.memory if set, else 1/128 of the machine's memory, "
            "at most 256 MiB"
        ),
    )
    deltas: bool = Field(
        default=True,
        description=(
            "write only the keys a micro-batch changed, as a delta after the state bucket, "
            "folded into it now and then; off: write every changed bucket whole"
        ),
    )


SubjectNameStrategy = Literal["topic", "record", "topic_record"]
"""How a registry subject is named, as Confluent's serializers name it: ``topic``
(TopicNameStrategy: ``<topic>-value``, ``<topic>-key``), ``record`` (RecordNameStrategy: the
record's full name), ``topic_record`` (TopicRecordNameStrategy: ``<topic>-<full name>``)."""


class _Serde(_Strict):
    topic: str = Field(min_length=1)
    schema_file: Path | None = Field(default=None, alias="schema")
    subject: str | None = None
    subject_name_strategy: SubjectNameStrategy | None = None
    writer_schema: Path | None = None
    key_format: KeyFormat = "string"
    key_schema: Path | None = None
    key_subject: str | None = None

    @model_validator(mode="after")
    def _one_subject_source(self) -> _Serde:
        if self.subject is not None and self.subject_name_strategy is not None:
            raise ValueError("give `subject` or `subject_name_strategy`, not both")
        if self.writer_schema is not None and self.registry_value:
            raise ValueError(
                "`writer_schema` is for plain Avro (`schema` alone); with a registry every "
                "record names its writer schema"
            )
        if self.key_format != "avro" and (self.key_schema or self.key_subject):
            raise ValueError('`key_schema` and `key_subject` need key_format = "avro"')
        return self

    @property
    def auto_registers(self) -> bool:
        """Whether the schema files are registered under their subjects at start."""
        return False

    @property
    def registry_value(self) -> bool:
        """Whether values use the registry (Confluent framing), rather than plain Avro.

        Plain Avro when ``schema`` is given alone; the registry when a subject is named or
        is to be named by a strategy, when schemas are auto-registered, or when there is no
        ``schema`` (then the subject's latest version is the schema).
        """
        return (
            self.schema_file is None
            or self.subject is not None
            or self.subject_name_strategy is not None
            or self.auto_registers
        )

    @property
    def registry_key(self) -> bool:
        """Whether Avro keys use the registry: as :attr:`registry_value`, for the key."""
        return self.key_format == "avro" and (
            self.key_schema is None
            or self.key_subject is not None
            or self.subject_name_strategy is not None
            or self.auto_registers
        )


JoinKey = str | list[str]
"""A join key as configured: a field, or a list of fields for a composite key."""


class InputConfig(_Serde):
    """``[pipeline.inputs.ROLE]``: one input topic, named by the joiner's role it plays."""

    key: JoinKey
    time: str | None = None
    field: str | None = None
    envelope: Envelope | None = None

    @model_validator(mode="after")
    def _key_parts(self) -> InputConfig:
        names = [self.key] if isinstance(self.key, str) else self.key
        if not names or any(not name for name in names):
            raise ValueError("`key` needs a field name, or a list of them")
        if len(set(names)) != len(names):
            raise ValueError(f"`key` names a field twice: {names}")
        return self

    @property
    def key_fields(self) -> tuple[str, ...]:
        """The key's parts as written: one name, or each name of a composite key."""
        return (self.key,) if isinstance(self.key, str) else tuple(self.key)


class OutputConfig(_Serde):
    """``[pipeline.output]`` or ``[pipeline.outputs.NAME]``: an output topic and its schema."""

    auto_register: bool = False

    @model_validator(mode="after")
    def _registers_a_file(self) -> OutputConfig:
        if self.auto_register and self.schema_file is None and self.key_schema is None:
            raise ValueError(
                "auto_register registers the `schema` (and `key_schema`) .avsc file under its "
                "subject; give one"
            )
        if self.key_format == "bytes":
            # An output key is a text (the join key, whose bytes parts are hex digits): writing
            # it "as bytes" could only mean its UTF-8, which is key_format "string".
            raise ValueError(
                'key_format "bytes" is for reading keys: an output key is the join key\'s text '
                '(a bytes key part is its hex digits); write it as "string", "json" or "avro"'
            )
        return self

    @property
    def auto_registers(self) -> bool:
        """Whether the schema files are registered under their subjects at start."""
        return self.auto_register


DEFAULT_MAX_RECORDS_PER_BATCH = 500_000
"""The default cap on the records of one micro-batch. It matters only while a backlog is
read: each batch pays a fixed cost (planning, checkpoint commits, task start, one Kafka
transaction per task), and half a million records spread it thin (a pass-through sustained
a higher rate than with 100,000-record batches: ``BENCHMARKS.md``). A
pipeline that keeps up reads what arrived since its last batch, whatever the cap."""


class PipelineConfig(_Strict):
    """One ``[[pipeline]]``: a joiner, its inputs, its output and its options."""

    name: str
    joiner: str
    checkpoint: Path
    dead_letter_topic: str | None = None
    inputs: dict[str, InputConfig]
    output: OutputConfig
    outputs: dict[str, OutputConfig] = Field(default_factory=dict)
    """Secondary outputs by name, for joiners that write more than one stream (the running
    totals of ``lookup``'s aggregation); the joiner says which names it knows."""
    options: dict[str, Any] = Field(default_factory=dict)
    max_records_per_batch: int = Field(default=DEFAULT_MAX_RECORDS_PER_BATCH, gt=0)
    state_buckets: int = Field(default=DEFAULT_STATE_BUCKETS, ge=1, le=65_536)
    trigger: DurationMs = 0
    mode: Mode = "micro_batch"
    commit_interval: DurationMs = Field(default=DEFAULT_COMMIT_INTERVAL_MS, gt=0)
    long_batch: DurationMs = Field(default=DEFAULT_LONG_BATCH_MS, gt=0)
    leases: int = Field(default=1, ge=1, le=256)
    """Continuous mode: the tasks that share the state buckets, each reading every input
    partition and holding a task slot for the whole long batch."""
    held_state_budget: ByteSize = Field(default=ByteSize(DEFAULT_HELD_STATE_BUDGET), gt=0)
    """Continuous mode: the bytes of state a lease may hold in its Python worker (``"1.5GiB"``);
    past it, the long batch ends early and writes its state (docs/operations.md)."""
    delivery: Delivery = "exactly_once"
    on_missing_offsets: MissingOffsets = "fail"
    headers: HeaderPolicy = Field(
        default=DEFAULT_POLICY,
        description='input headers the outputs carry: "trace" (traceparent, tracestate), '
        '"none", "all", or a list of names (daemon.model.headers)',
    )
    headers_from: HeadersFrom = Field(
        default=DEFAULT_FROM,
        description='whose headers an output carries: "record" (the one it is about) or '
        '"inputs" (every input record that made it; daemon.model.headers.merge_headers)',
    )
    select: dict[str, SelectField] | None = Field(
        default=None,
        description="the output record's fields, each from a path into the joiner's value or "
        "a constant; unset: the joiner's value as it is (daemon.model.selection)",
    )

    @field_validator("select", mode="before")
    @classmethod
    def _select_entries(cls, value: Any) -> Any:
        return None if value is None else select_entries(value)

    @field_validator("headers", mode="before")
    @classmethod
    def _header_policy(cls, value: Any) -> Any:
        # One line for any wrong shape, rather than one per branch of the type.
        policies = get_args(get_args(HeaderPolicy)[0])
        named = isinstance(value, list) and all(isinstance(n, str) and n for n in value)
        if value in policies or (named and value):
            return value
        raise ValueError(
            f"{value!r} is not a header policy: "
            + ", ".join(f'"{p}"' for p in policies)
            + ' or a list of header names (["traceparent", "tenant"])'
        )

    @field_validator("headers_from", mode="before")
    @classmethod
    def _headers_from(cls, value: Any) -> Any:
        if value in get_args(HeadersFrom):
            return value
        raise ValueError(
            f'{value!r} is not whose headers an output carries: "record" (the record it is '
            'about) or "inputs" (every input record that made it)'
        )

    _name = field_validator("name")(id_part)

    @field_validator("held_state_budget", mode="before")
    @classmethod
    def _a_size(cls, value: Any) -> Any:
        try:
            return _SIZE.validate_python(value)
        except ValidationError:
            raise ValueError(
                f'{value!r} is not a size; write a number and a unit, e.g. "256MiB" or "1GiB"'
            ) from None

    @model_validator(mode="after")
    def _settings_of_its_mode(self) -> PipelineConfig:
        # A setting the mode does not read is refused, never ignored.
        given = self.model_fields_set
        if self.mode == "micro_batch":
            if given & {"commit_interval", "long_batch", "held_state_budget", "leases"}:
                raise ValueError(
                    "`commit_interval`, `long_batch`, `held_state_budget` and `leases` are "
                    'settings of mode = "continuous"'
                )
            return self
        if "trigger" in given:
            raise ValueError(
                '`trigger` is a micro-batch setting; mode = "continuous" commits what arrived '
                "every `commit_interval`, and cuts long batches every `long_batch`"
            )
        if self.commit_interval >= self.long_batch:
            raise ValueError(
                f"`commit_interval` ({self.commit_interval} ms) must be shorter than "
                f"`long_batch` ({self.long_batch} ms)"
            )
        if self.leases > self.state_buckets:
            raise ValueError(
                f"`leases` ({self.leases}) must not be more than `state_buckets` "
                f"({self.state_buckets}): a lease joins a share of the buckets"
            )
        if self.delivery != "exactly_once":
            raise ValueError(
                'mode = "continuous" writes exactly once: it commits a transaction every '
                "`commit_interval`; leave `delivery` out"
            )
        return self

    @property
    def continuous(self) -> bool:
        """Whether the pipeline runs in continuous mode."""
        return self.mode == "continuous"

    @property
    def dead_letters(self) -> str:
        """The dead-letter topic: as configured, else ``NAME.dlq``."""
        return self.dead_letter_topic or f"{self.name}.dlq"

    def field_of(self, role: str) -> str:
        """The output field that holds the record of the input playing ``role``."""
        return self.inputs[role].field or role

    def key_parts_mismatch(self) -> str | None:
        """Why the inputs' join keys cannot match (their numbers of parts differ), or None."""
        if self.options.get("tables"):
            # A lookup of several tables: each table's lookup_key is matched to that table's
            # key alone (daemon.pipeline.chain_checks).
            return None
        counts = {role: len(spec.key_fields) for role, spec in self.inputs.items()}
        if len(set(counts.values())) <= 1:
            return None
        described = ", ".join(f"{role} {count}" for role, count in counts.items())
        return (
            f"the inputs' keys have different numbers of parts ({described}); records match "
            "only when every part is equal, so give each input's `key` as many fields"
        )


class PipelineFile(_Strict):
    """The whole pipeline file."""

    kafka: KafkaConfig = Field(default_factory=KafkaConfig)
    schema_registry: SchemaRegistryConfig | None = None
    spark: SparkConfig = Field(default_factory=SparkConfig)
    state: StateConfig = Field(default_factory=StateConfig)
    service: ServiceConfig = Field(default_factory=ServiceConfig)
    pipeline: list[PipelineConfig] = Field(min_length=1)
    source: Path | None = Field(default=None, exclude=True)


class ConfigProblems(ConfigError):
    """One or more problems in a pipeline file; ``problems`` holds one line each."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = problems


def _where(data: dict[str, Any], loc: tuple[int | str, ...]) -> str:
    parts: list[str] = []
    for i, part in enumerate(loc):
        if i == 1 and loc[0] == "pipeline" and isinstance(part, int):
            pipelines = data.get("pipeline") or []
            name = pipelines[part].get("name") if part < len(pipelines) else None
            parts[-1] = f"pipeline[{part}]" + (f" ({name})" if name else "")
        else:
            parts.append(str(part))
    return ".".join(parts)


def _describe(error: dict[str, Any]) -> str:
    if error["type"] == "extra_forbidden":
        return "unknown key; remove it or check its spelling"
    if error["type"] == "missing":
        return "required but missing"
    message = str(error["msg"])
    return message.removeprefix("Value error, ")


def _resolve(path: Path | None, base: Path) -> Path | None:
    return None if path is None else (path if path.is_absolute() else base / path)


def parse_pipeline_file(path: Path, data: dict[str, Any]) -> PipelineFile:
    """Validate parsed TOML against the models, resolving paths against ``path``'s folder.

    Raises:
        ConfigProblems: every shape problem, one line each, naming file and field.
    """
    data, missing = expand_environment(path, data)
    if missing:
        raise ConfigProblems(missing)
    try:
        parsed = PipelineFile.model_validate(data)
    except ValidationError as exc:
        problems = [
            f"{path}: {_where(data, tuple(err['loc']))}: {_describe(dict(err))}"
            for err in exc.errors()
        ]
        raise ConfigProblems(problems) from None
    base = path.resolve().parent
    pipelines = []
    for pipe in parsed.pipeline:
        inputs = {
            role: spec.model_copy(
                update={
                    "schema_file": _resolve(spec.schema_file, base),
                    "writer_schema": _resolve(spec.writer_schema, base),
                    "key_schema": _resolve(spec.key_schema, base),
                }
            )
            for role, spec in pipe.inputs.items()
        }
        output = _resolve_output(pipe.output, base)
        outputs = {name: _resolve_output(spec, base) for name, spec in pipe.outputs.items()}
        pipelines.append(
            pipe.model_copy(
                update={
                    "inputs": inputs,
                    "output": output,
                    "outputs": outputs,
                    "checkpoint": _resolve(pipe.checkpoint, base),
                }
            )
        )
    kafka = parsed.kafka.model_copy(
        update={"client_conf": _resolve_settings(parsed.kafka.client_conf, base)}
    )
    registry = parsed.schema_registry
    if registry is not None:
        registry = SchemaRegistryConfig.model_validate(
            {"url": registry.url, **_resolve_settings(registry.settings, base)}
        )
        secrets.remember(registry.settings, url=registry.url)
    secrets.remember(kafka.client_conf)
    secrets.remember(parsed.spark.conf)
    for pipe in pipelines:
        secrets.remember_nested(pipe.options)
    spark = parsed.spark.model_copy(update={"local_dir": _resolve(parsed.spark.local_dir, base)})
    return parsed.model_copy(
        update={
            "pipeline": pipelines,
            "source": path,
            "kafka": kafka,
            "spark": spark,
            "schema_registry": registry,
        }
    )


def _resolve_output(spec: OutputConfig, base: Path) -> OutputConfig:
    return spec.model_copy(
        update={
            "schema_file": _resolve(spec.schema_file, base),
            "key_schema": _resolve(spec.key_schema, base),
        }
    )


def _resolve_settings(settings: dict[str, Any], base: Path) -> dict[str, Any]:
    """Client settings with the relative paths of file settings resolved against ``base``."""
    return {
        key: (
            str(base / value)
            if key in PATH_SETTINGS
            and isinstance(value, str)
            and value not in ("", "probe")
            and not Path(value).is_absolute()
            else value
        )
        for key, value in settings.items()
    }


def load_pipeline_file(path: Path) -> PipelineFile:
    """Read and validate a pipeline file's shape (not yet its joiners, schemas or topics).

    Raises:
        ConfigProblems: the file is missing, is not TOML, or has shape problems.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigProblems([f"{path}: no such file"]) from None
    except OSError as exc:
        raise ConfigProblems([f"{path}: cannot read: {exc.strerror}"]) from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigProblems([f"{path}: not valid TOML: {exc}"]) from None
    return parse_pipeline_file(path, data)


def pick_pipeline(file: PipelineFile, name: str | None) -> PipelineConfig:
    """The pipeline a command works on: the one named, or the file's only one.

    Raises:
        ConfigError: no pipeline has that name, or none is named and the file has several.
    """
    names = [p.name for p in file.pipeline]
    if name is None:
        if len(file.pipeline) > 1:
            raise ConfigError(f"{file.source} has pipelines {names}; choose one with --pipeline")
        return file.pipeline[0]
    for pipe in file.pipeline:
        if pipe.name == name:
            return pipe
    raise ConfigError(f"no pipeline {name!r} in {file.source}; pipelines: {names}")
