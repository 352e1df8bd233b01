"""What the installed enrichd does with a joiner, for the joiner's tests.

Load it as the plugin host does (:func:`installed`), check a pipeline file as ``daemon
validate`` does (:func:`validate`), and run it through the real broker and Spark
(:func:`replay_joiner`).
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from daemon.model.config import JoinKey, Mode, PipelineFile, parse_pipeline_file
from daemon.pipeline.validation import validate_pipeline_file
from daemon.plugin.host import RegisteredJoiner, build_registry, registry
from daemon.plugin.joiner import Joiner
from daemon.replay import ReplayResult, replay
from daemon.testing.harness import Inputs


def pipeline_file(
    joiner: str,
    *,
    schemas: Mapping[str, Path],
    output_schema: Path,
    keys: Mapping[str, JoinKey],
    options: Mapping[str, Any] | None = None,
    fields: Mapping[str, str] | None = None,
    times: Mapping[str, str] | None = None,
    checkpoint: Path,
    bootstrap_servers: str | None = None,
    output_schemas: Mapping[str, Path] | None = None,
    settings: Mapping[str, Any] | None = None,
) -> PipelineFile:
    """A one-pipeline file for ``joiner``, built in code rather than read from TOML.

    Topics are named ``JOINER.ROLE``, ``JOINER.out`` and ``JOINER.NAME`` for a secondary
    output; replay suffixes them afresh per run.

    Args:
        joiner: the installed joiner's name.
        schemas: per role, its .avsc file (the roles of the pipeline).
        output_schema: the output's .avsc file.
        keys: per role, the join key, as ``key`` in a pipeline file.
        options: the joiner's options.
        fields: per role, its field in the output.
        times: per role, its event-time field.
        checkpoint: the pipeline's checkpoint folder.
        bootstrap_servers: the broker; None for the embedded one.
        output_schemas: per secondary output (``[pipeline.outputs.NAME]``), its .avsc file.
        settings: more settings of the ``[[pipeline]]`` table, as written there
            (``{"headers": "all", "headers_from": "inputs"}``).

    Raises:
        daemon.model.config.ConfigProblems: the pieces do not make a valid pipeline file.
    """
    inputs = {}
    for role, schema in schemas.items():
        spec: dict[str, Any] = {
            "topic": f"{joiner}.{role}",
            "schema": str(schema),
            "key": keys[role],
        }
        if fields and role in fields:
            spec["field"] = fields[role]
        if times and role in times:
            spec["time"] = times[role]
        inputs[role] = spec
    data: dict[str, Any] = {
        "kafka": {} if bootstrap_servers is None else {"bootstrap_servers": bootstrap_servers},
        "pipeline": [
            {
                "name": f"test-{joiner}",
                "joiner": joiner,
                "checkpoint": str(checkpoint),
                "inputs": inputs,
                "output": {"topic": f"{joiner}.out", "schema": str(output_schema)},
                "outputs": {
                    name: {"topic": f"{joiner}.{name}", "schema": str(path)}
                    for name, path in (output_schemas or {}).items()
                },
                "options": dict(options or {}),
                **(settings or {}),
            }
        ],
    }
    return parse_pipeline_file(Path(checkpoint) / "pipeline.toml", data)


def replay_joiner(
    joiner: str | type[Joiner],
    inputs: Inputs,
    *,
    schemas: Mapping[str, Path],
    output_schema: Path,
    keys: Mapping[str, JoinKey],
    options: Mapping[str, Any] | None = None,
    fields: Mapping[str, str] | None = None,
    times: Mapping[str, str] | None = None,
    max_batch: int | None = None,
    bootstrap_servers: str | None = None,
    output_schemas: Mapping[str, Path] | None = None,
    state_cache: bool = True,
    state_deltas: bool = True,
    mode: Mode = "micro_batch",
    settings: Mapping[str, Any] | None = None,
) -> ReplayResult:
    """Run an installed joiner over ``inputs`` through the real broker and Spark engine.

    Takes the same arguments as :func:`run_joiner` (``max_batch`` for ``batch_size``), so a
    test can check that both give the same :func:`by_key` outputs. Needs Java; reuses the
    process's Spark session (a session-scoped fixture keeps one for a test run), or starts
    one for the call and stops it after.

    Args:
        joiner: the joiner's name, or its class (its ``name`` is used).
        inputs: records per role, as for :func:`run_joiner`.
        schemas: per role, its .avsc file; every role of the joiner needs one.
        output_schema: the output's .avsc file.
        keys: per role, the join key, as ``key`` in a pipeline file.
        options: the joiner's options.
        fields: per role, its field in the output.
        times: per role, its event-time field.
        max_batch: cap on records per micro-batch; None for the engine's default.
        bootstrap_servers: a running broker; None starts the embedded one for this call.
        output_schemas: per secondary output, its .avsc file (its records come back in
            :attr:`ReplayResult.extra`).
        state_cache: whether the Python workers keep decoded state between micro-batches
            (``[state] cache``); the outputs are the same either way.
        state_deltas: whether a micro-batch writes only the keys it changed (``[state]
            deltas``); the outputs are the same either way.
        mode: ``"continuous"`` runs the pipeline in continuous mode, its sub-batches capped
            at ``max_batch``; event-time outputs are the same in either mode.
        settings: more settings of the ``[[pipeline]]`` table, as for :func:`pipeline_file`.

    Returns:
        The outputs and dead letters as JSON-ready dicts (see :class:`ReplayResult`).
    """
    cls = registry().get(joiner).cls if isinstance(joiner, str) else joiner
    schemas = {role: schemas[role] for role in cls.roles if role in schemas}
    with tempfile.TemporaryDirectory(prefix="enrichd-test-") as folder:
        work = Path(folder)
        file = pipeline_file(
            cls.name,
            schemas=schemas,
            output_schema=output_schema,
            keys=keys,
            options=options,
            fields=fields,
            times=times,
            checkpoint=work / "checkpoint",
            bootstrap_servers=bootstrap_servers,
            output_schemas=output_schemas,
            settings=settings,
        )
        state = {"cache": state_cache, "deltas": state_deltas}
        file = file.model_copy(update={"state": file.state.model_copy(update=state)})
        if mode != "micro_batch":
            pipe = file.pipeline[0].model_copy(update={"mode": mode})
            file = file.model_copy(update={"pipeline": [pipe]})
        files = {}
        for role, lines in inputs.items():
            path = work / f"{role}.jsonl"
            path.write_text("".join(json.dumps(dict(line)) + "\n" for line in lines), "utf-8")
            files[role] = path
        return replay(file, files, max_batch=max_batch, bootstrap_servers=bootstrap_servers)


def installed(name: str) -> RegisteredJoiner:
    """The joiner registered as ``name``, loaded afresh as ``daemon plugins list`` loads it.

    Its ``cls`` is the class and its ``plugin`` the entry point (``name``) and the
    distribution (``distribution``, ``version``) that registered it.

    Raises:
        daemon.errors.UnknownJoinerError: no installed plugin registers ``name``.
    """
    return build_registry().get(name)


def validate(path: Path) -> list[str]:
    """What ``daemon validate --offline`` says of a pipeline file: one line per problem.

    An empty list means the file is valid. No broker or Schema Registry is asked.
    """
    return validate_pipeline_file(path, check_registry=False)[1]
