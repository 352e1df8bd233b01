"""A joiner as a pipeline configures it: the one place enrichd makes one.

A start (:mod:`daemon.pipeline.plan`), ``daemon validate``, ``daemon verify``, ``daemon
plugins describe`` and the test kit (:mod:`daemon.testing`) all make their joiner through
:func:`configure`, so that each sees the options, the fields and the pipeline name a running
pipeline's joiner sees. :func:`pipeline_joiner` is the way from a pipeline file's
``[[pipeline]]`` table: it looks the joiner up among the installed plugins and refuses, one
line naming the field, what a start must not run.

Example:
    The ``comap`` joiner of a pipeline whose ``many`` input goes in the ``tweet`` field:

    >>> from daemon.joiners.comap import CoMap
    >>> joiner = configure(CoMap, {"many_id": "id"}, pipeline="tweets", fields={"many": "tweet"})
    >>> joiner.options.many_id, joiner.context.fields
    ('id', {'one': 'one', 'many': 'tweet'})
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import ValidationError

from daemon.errors import ConfigError, HeadersFromRefused
from daemon.model.config import PipelineConfig
from daemon.model.headers import DEFAULT_FROM, HeadersFrom
from daemon.plugin.host import JoinerRegistry, registry
from daemon.plugin.joiner import Joiner, JoinerContext, JoinerOptions


def configure(
    cls: type[Joiner],
    options: Mapping[str, Any] | JoinerOptions | None,
    *,
    pipeline: str,
    fields: Mapping[str, str] | None = None,
    output_fields: Sequence[str] = (),
    headers_from: HeadersFrom = DEFAULT_FROM,
) -> Joiner:
    """Make a joiner of ``cls`` with its options validated and its context filled in.

    Args:
        cls: the joiner class.
        options: ``[pipeline.options]`` as written, or options already made (used as they
            are: ``daemon plugins describe`` shows a joiner with placeholder options).
        pipeline: the pipeline's name.
        fields: per role, the output field that holds its records; a role left out gets
            its own name, as a pipeline input without ``field`` does.
        output_fields: the main output schema's fields, where known.
        headers_from: whose headers its outputs carry (the pipeline's ``headers_from``).

    Returns:
        The joiner.

    Raises:
        pydantic.ValidationError: the options do not fit the joiner's ``Options``.
        HeadersFromRefused: ``headers_from = "inputs"`` of a joiner that carries one
            record's headers only (:attr:`Joiner.merges_headers`).
        ConfigError: the joiner refuses this configuration (its ``__init__`` says why).
    """
    made = (
        options
        if isinstance(options, JoinerOptions)
        else cls.Options.model_validate(dict(options or {}))
    )
    context = JoinerContext(
        pipeline=pipeline,
        fields={role: (fields or {}).get(role, role) for role in _roles(cls, options)},
        output_fields=tuple(output_fields),
        headers_from=headers_from,
    )
    joiner = cls(made, context)
    if headers_from == "inputs" and not joiner.merges_headers:
        raise HeadersFromRefused(
            f"pipeline {pipeline!r}: joiner {cls.name!r}{_as_configured(joiner)} carries the "
            'headers of one record per output, not of every input: use headers_from = "record"'
        )
    return joiner


def _as_configured(joiner: Joiner) -> str:
    """How a refusal names a joiner whose options, not its class, decide what it carries."""
    return "" if type(joiner).merges_headers == joiner.merges_headers else " as configured"


def pipeline_joiner(
    pipe: PipelineConfig, output_fields: Sequence[str] = (), joiners: JoinerRegistry | None = None
) -> Joiner:
    """The joiner of a pipeline file's ``[[pipeline]]`` table, as a start makes it.

    Args:
        pipe: the pipeline.
        output_fields: the main output schema's fields, where known.
        joiners: the registry to find the joiner in; by default the installed plugins.

    Returns:
        The joiner.

    Raises:
        ConfigError: the joiner is not installed or not implemented yet, the inputs are not
            its roles, its options do not fit (the first problem, naming the option), or it
            refuses this configuration.
    """
    cls = (joiners or registry()).get(pipe.joiner).cls
    if not cls.implemented:
        raise ConfigError(f"pipeline {pipe.name!r}: joiner {cls.name!r} is not implemented yet")
    roles = set(_roles(cls, pipe.options))
    if set(pipe.inputs) != roles:
        raise ConfigError(
            f"pipeline {pipe.name!r}: joiner {cls.name!r} needs inputs {sorted(roles)}, "
            f"got {sorted(pipe.inputs)}"
        )
    fields = {role: pipe.field_of(role) for role in pipe.inputs}
    try:
        return configure(
            cls,
            pipe.options,
            pipeline=pipe.name,
            fields=fields,
            output_fields=output_fields,
            headers_from=pipe.headers_from,
        )
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise ConfigError(f"pipeline {pipe.name!r}: options.{where}: {first['msg']}") from None


def _roles(cls: type[Joiner], options: Mapping[str, Any] | JoinerOptions | None) -> tuple[str, ...]:
    """The joiner's roles with these options (made options: the class's own roles)."""
    if options is None or isinstance(options, JoinerOptions):
        return cls.roles
    return cls.roles_for(options)
