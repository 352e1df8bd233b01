"""Checking a pipeline file beyond its shape: joiners, roles, options, fields, schemas, topics.

How it works: :func:`validate_pipeline_file` loads the file (its shape problems end the check
there, since nothing further can be trusted), then checks every pipeline against the
installed joiners and its schema files and collects every problem instead of stopping at the
first, so one run of ``daemon validate`` shows everything to fix. Each problem is one line
naming the file and the field, in the same ``FILE: pipeline[i] (name).FIELD: message`` form
as the shape problems of :func:`daemon.model.config.load_pipeline_file`.

No Spark is started and, unless asked with ``check_topics``, no broker is contacted. The
Schema Registry of ``[schema_registry]``, when there is one, is asked what a start would
ask (:mod:`daemon.formats.checks`), unless ``check_registry`` is off.

Example:
    The tweet-views example that ships with enrichd has nothing to fix:

    >>> import daemon
    >>> example = Path(daemon.__file__).parent / "examples" / "tweet-views.toml"
    >>> parsed, problems = validate_pipeline_file(example)
    >>> problems, [pipeline.name for pipeline in parsed.pipeline]
    ([], ['tweet-views'])
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import ValidationError

from daemon.errors import (
    ConfigError,
    HeadersFromRefused,
    KafkaUnavailableError,
    SchemaError,
    UnknownJoinerError,
)
from daemon.formats.avro.codec import load_schema_file, record_fields
from daemon.formats.checks import RegistryCheck, serde_problems
from daemon.formats.registry import client_settings, new_client
from daemon.kafka.admin import existing_topics
from daemon.kafka.connect import client_conf
from daemon.model.config import ConfigProblems, PipelineConfig, PipelineFile, load_pipeline_file
from daemon.pipeline.chain_checks import chain_problems
from daemon.pipeline.continuous_checks import continuous_problems, slot_problems
from daemon.pipeline.field_checks import field_problems
from daemon.pipeline.select_checks import select_problems
from daemon.plugin.configured import configure
from daemon.plugin.describe import describe_joiner
from daemon.plugin.host import JoinerRegistry, registry
from daemon.plugin.joiner import Joiner

_TOPIC_TIMEOUT_S = 5.0


def validate_pipeline_file(
    path: Path,
    joiners: JoinerRegistry | None = None,
    check_topics: bool = False,
    check_registry: bool = True,
) -> tuple[PipelineFile | None, list[str]]:
    """Check a pipeline file and collect every problem.

    Args:
        path: the pipeline file.
        joiners: the joiner registry to check against; by default the installed plugins.
        check_topics: also ask the broker of ``[kafka] bootstrap_servers`` whether every
            input topic exists (output and dead-letter topics may be created on first run,
            so they are not required).
        check_registry: ask the Schema Registry of ``[schema_registry]``, when there is one,
            about every subject (off: no network at all, unless ``check_topics``).

    Returns:
        The parsed file (None when its shape is broken) and the problems, one line each;
        no problems means the file is valid.
    """
    try:
        parsed = load_pipeline_file(path)
    except ConfigProblems as exc:
        return None, list(exc.problems)
    joiners = joiners if joiners is not None else registry()
    problems = _registry_problems(parsed, path)
    asked = None
    if check_registry and parsed.schema_registry is not None and not problems:
        asked = RegistryCheck(parsed)
    seen: dict[str, int] = {}
    for index, pipeline in enumerate(parsed.pipeline):
        where = f"{path}: pipeline[{index}] ({pipeline.name})"
        if pipeline.name in seen:
            problems.append(
                f"{where}.name: pipeline[{seen[pipeline.name]}] has the same name; "
                "pipeline names must be unique"
            )
        seen.setdefault(pipeline.name, index)
        problems += _pipeline_problems(parsed, pipeline, where, joiners, asked)
    problems += [f"{path}: {problem}" for problem in slot_problems(parsed)]
    if check_topics:
        problems += _topic_problems(parsed, path)
    return parsed, problems


def _registry_problems(parsed: PipelineFile, path: Path) -> list[str]:
    """Whether the registry client takes ``[schema_registry]``'s settings (no request made)."""
    if parsed.schema_registry is None:
        return []

    try:
        new_client(client_settings(parsed.schema_registry, parsed.kafka))
    except ConfigError as exc:
        return [f"{path}: schema_registry: {str(exc).removeprefix('[schema_registry]: ')}"]
    return []


def summary(parsed: PipelineFile) -> str:
    """One line saying what a valid file runs, e.g. for ``daemon validate``'s success output.

    Example: ``ok: 1 pipeline: tweet-views (comap: one=users, many=tweets -> tweet-views)``.
    """
    count = len(parsed.pipeline)
    described = "; ".join(
        f"{pipe.name} ({pipe.joiner}: "
        + ", ".join(f"{role}={spec.topic}" for role, spec in pipe.inputs.items())
        + f" -> {pipe.output.topic})"
        for pipe in parsed.pipeline
    )
    return f"ok: {count} pipeline{'s' if count != 1 else ''}: {described}"


def _pipeline_problems(
    parsed: PipelineFile,
    pipeline: PipelineConfig,
    where: str,
    joiners: JoinerRegistry,
    asked: RegistryCheck | None,
) -> list[str]:
    problems: list[str] = []
    cls: type[Joiner] | None
    try:
        cls = joiners.get(pipeline.joiner).cls
    except UnknownJoinerError as exc:
        problems.append(f"{where}.joiner: {exc}")
        cls = None
    joiner = None
    if cls is not None:
        if not cls.implemented:
            ready = ", ".join(sorted(n for n, r in joiners.joiners.items() if r.cls.implemented))
            problems.append(
                f"{where}.joiner: joiner {cls.name!r} is not implemented yet; "
                f"implemented joiners: {ready or 'none'}"
            )
        problems += _role_problems(pipeline, where, cls)
        problems += _option_problems(pipeline, where, joiners, cls)
        joiner, refused = _configured(pipeline, where, cls)
        problems += _output_problems(pipeline, where, cls, joiner) + refused
    if joiner is not None:
        refusals = continuous_problems(pipeline, joiner)
        problems += [f"{where}.mode: {problem}" for problem in refusals]
    mismatch = pipeline.key_parts_mismatch()
    if mismatch is not None:
        problems.append(f"{where}.inputs: {mismatch}")
    for role, spec in pipeline.inputs.items():
        problems += serde_problems(parsed, spec, f"{where}.inputs.{role}", asked)
    problems += serde_problems(parsed, pipeline.output, f"{where}.output", asked)
    for name, extra in pipeline.outputs.items():
        problems += serde_problems(parsed, extra, f"{where}.outputs.{name}", asked)
    # Fields are checked against a joiner that has every role's (the roles are reported).
    if joiner is not None and set(pipeline.inputs) == set(joiner.roles):
        problems += [f"{where}.{problem}" for problem in chain_problems(pipeline, joiner)]
        problems += field_problems(pipeline, where, joiner)
        problems += select_problems(pipeline, where, joiner)
    return problems


def _configured(
    pipeline: PipelineConfig, where: str, cls: type[Joiner]
) -> tuple[Joiner | None, list[str]]:
    """The pipeline's joiner with its options, as a start makes it, or why it refuses.

    None without a problem where the options do not fit (reported by the option checks). A
    joiner whose inputs are not its roles is still made, with the roles it has, so that what
    it writes is checked too.
    """
    # The output schema's fields, where it loads, for joiners that need some of them; with a
    # select the output record is the select's, and the joiner shapes nothing to it.
    fields: tuple[str, ...] = ()
    if pipeline.output.schema_file is not None and pipeline.select is None:
        try:
            fields = record_fields(load_schema_file(pipeline.output.schema_file))
        except SchemaError:
            pass  # reported by serde_problems
    try:
        joiner = configure(
            cls,
            pipeline.options,
            pipeline=pipeline.name,
            fields={role: pipeline.field_of(role) for role in pipeline.inputs},
            output_fields=fields,
            headers_from=pipeline.headers_from,
        )
    except ValidationError:
        return None, []  # reported by _option_problems
    except HeadersFromRefused as exc:
        return None, [f"{where}.headers_from: {exc}"]
    except ConfigError as exc:
        return None, [f"{where}.output: {exc}"]
    return joiner, []


def _output_problems(
    pipeline: PipelineConfig, where: str, cls: type[Joiner], joiner: Joiner | None
) -> list[str]:
    known = ", ".join(cls.outputs) or "none"
    problems = [
        f"{where}.outputs.{name}: joiner {cls.name!r} has no output {name!r}; "
        f"its secondary outputs: {known}"
        for name in pipeline.outputs
        if name not in cls.outputs
    ]
    if joiner is None:
        return problems
    try:
        stage = joiner.downstream()
    except ConfigError as exc:
        return [*problems, f"{where}.output: {exc}"]
    if stage is not None and stage.output not in pipeline.outputs:
        problems.append(
            f"{where}.outputs: joiner {cls.name!r} writes output {stage.output!r} with these "
            f"options; add [pipeline.outputs.{stage.output}] with its topic and schema"
        )
    return problems


def _role_problems(pipeline: PipelineConfig, where: str, cls: type[Joiner]) -> list[str]:
    wanted = cls.roles_for(pipeline.options)
    roles = ", ".join(wanted)
    problems = [
        f"{where}.inputs.{role}: joiner {cls.name!r} has no role {role!r}; its roles: {roles}"
        for role in pipeline.inputs
        if role not in wanted
    ]
    problems += [
        f"{where}.inputs: no input for role {role!r} of joiner {cls.name!r}; "
        f"add [pipeline.inputs.{role}]"
        for role in wanted
        if role not in pipeline.inputs
    ]
    return problems


def _option_problems(
    pipeline: PipelineConfig, where: str, joiners: JoinerRegistry, cls: type[Joiner]
) -> list[str]:
    try:
        cls.Options.model_validate(pipeline.options)
    except ValidationError as exc:
        valid = ", ".join(describe_joiner(joiners.get(cls.name)).option_names()) or "none"
        return [
            f"{where}.{'.'.join(['options', *map(str, err['loc'])])}: "
            f"{_option_message(dict(err), cls.name, valid)}"
            for err in exc.errors()
        ]
    return []


def _option_message(error: dict[str, Any], joiner: str, valid: str) -> str:
    if error["type"] == "extra_forbidden":
        return f"joiner {joiner!r} has no such option; its options: {valid}"
    if error["type"] == "missing":
        return f"required by joiner {joiner!r} but missing"
    return str(error["msg"]).removeprefix("Value error, ")


def _topic_problems(parsed: PipelineFile, path: Path) -> list[str]:
    servers = parsed.kafka.bootstrap_servers
    if not servers:
        return [
            f"{path}: kafka.bootstrap_servers: checking topics needs a broker address; "
            "set [kafka] bootstrap_servers or leave out --check-topics"
        ]

    try:
        existing = set(existing_topics(client_conf(parsed), timeout=_TOPIC_TIMEOUT_S))
    except KafkaUnavailableError as exc:  # unreachable, credentials refused, TLS failed
        return [f"{path}: kafka.bootstrap_servers: cannot list topics: {exc}"]
    return [
        f"{path}: pipeline[{index}] ({pipe.name}).inputs.{role}.topic: "
        f"topic {spec.topic!r} does not exist on {servers}"
        for index, pipe in enumerate(parsed.pipeline)
        for role, spec in pipe.inputs.items()
        if spec.topic not in existing
    ]
