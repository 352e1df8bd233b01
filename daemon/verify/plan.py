"""What ``daemon verify`` runs: each joiner's example pipeline on topics of its own.

A pipeline's workload and its known answer come with it (:mod:`~daemon.verify.workload`,
:mod:`~daemon.verify.answer`), and, once produced, where each workload item landed, so that an
output's ``enrichd.source.*`` headers name the item it came from.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from daemon.demos import example_file
from daemon.errors import EnrichdError
from daemon.model.config import Mode, PipelineConfig, load_pipeline_file
from daemon.model.keys import key_parts
from daemon.plugin.configured import pipeline_joiner
from daemon.replay import key_bytes
from daemon.source.key_router import KeyRouter
from daemon.verify.answer import Answer, compute
from daemon.verify.check import Received
from daemon.verify.workload import EXAMPLES, OPTIONS, Workload, build

JOINERS = tuple(EXAMPLES)
"""The joiners ``--joiner all`` verifies."""
LONG_BATCH_MS = 4000
"""A continuous pipeline's long batch under verify: seconds, not the default minutes, so that
its kills land inside long batches and as they end, and a restart replays little."""


@dataclass(frozen=True)
class VerifyOptions:
    """What ``daemon verify`` was asked to do (its command-line options)."""

    joiners: tuple[str, ...] = JOINERS
    records: int = 2000
    kills: int = 3
    zombie: bool = True
    partitions: int = 2
    replication: int = -1
    keep: bool = False
    prefix: str = "enrichd-verify"
    seed: int = 1
    timeout_s: float = 900.0
    mode: Mode = "micro_batch"
    """The pipelines' ``mode``: ``continuous`` runs them in long batches
    (:mod:`daemon.verify.continuous_kills`)."""


@dataclass
class VerifiedPipeline:
    """One joiner's part of a run: its pipeline, workload and answer, and where it went."""

    joiner: str
    config: PipelineConfig
    work: Workload
    answer: Answer
    ends: dict[str, int] = field(default_factory=dict)
    items: dict[tuple[str, int, int], int] = field(default_factory=dict)
    """Item index by the ``(topic, partition, offset)`` it was produced at."""

    def source_item(self, record: Received) -> int | None:
        """The workload item the record's ``enrichd.source.*`` headers name, if any."""
        where = record.source
        return None if where is None else self.items.get(where)

    def topics(self) -> list[str]:
        """Every topic of the pipeline: inputs, outputs and dead letters."""
        spec = self.config
        names = [s.topic for s in spec.inputs.values()] + [spec.output.topic, spec.dead_letters]
        return names + [s.topic for s in spec.outputs.values()]


def plan_pipeline(joiner: str, base: str, folder: Path, options: VerifyOptions) -> VerifiedPipeline:
    """The joiner's example pipeline on topics of its own, its workload and its answer."""
    if joiner not in EXAMPLES:
        raise EnrichdError(f"--joiner {joiner}: choose one of {', '.join(JOINERS)} or all")
    example = load_pipeline_file(example_file(EXAMPLES[joiner])).pipeline[0]
    name = f"{base}.{joiner}"  # what its topics' names start with
    config = example.model_copy(
        update={
            # Dots separate the parts of the transactional ids and groups a pipeline's name
            # goes into: a pipeline's name has none (daemon.model.config.id_part).
            "name": re.sub(r"[^A-Za-z0-9_-]", "-", name),
            "checkpoint": folder / "checkpoints" / joiner,
            "dead_letter_topic": f"{name}.dlq",
            "inputs": {
                role: spec.model_copy(update={"topic": f"{name}.{role}"})
                for role, spec in example.inputs.items()
            },
            "output": example.output.model_copy(update={"topic": f"{name}.out"}),
            "outputs": {
                out: spec.model_copy(update={"topic": f"{name}.{out}"})
                for out, spec in example.outputs.items()
            },
            "options": {**example.options, **OPTIONS.get(joiner, {})},
            # Several micro-batches a pipeline, so that kills land between and inside them;
            # each batch of the five queries costs seconds of fixed work on two cores.
            "max_records_per_batch": max(10, options.records // 8),
            **_mode_settings(options),
        }
    )
    start = int(time.time() * 1000) - options.records - 60_000  # past, within retention
    work = build(joiner, records=options.records, seed=options.seed, start_ms=start)
    return VerifiedPipeline(joiner, config, work, compute(work, config))


def _mode_settings(options: VerifyOptions) -> dict[str, Any]:
    """The settings of the mode asked for (micro-batch: the example's own, none added).

    In continuous mode ``max_records_per_batch`` above caps each sub-batch, so that a
    long batch commits several even while a workload's part is read at once.
    """
    if options.mode == "micro_batch":
        return {}
    return {"mode": options.mode, "long_batch": LONG_BATCH_MS}


def child_table(config: PipelineConfig) -> dict[str, Any]:
    """A ``[[pipeline]]`` table of the child's file."""
    table = config.model_dump(mode="json", by_alias=True, exclude_none=True, exclude_defaults=True)
    table["checkpoint"] = str(config.checkpoint)
    table["max_records_per_batch"] = config.max_records_per_batch
    return table


def join_keys(pipe: VerifiedPipeline) -> tuple[str, list[str]]:
    """Where the markers go (the first input that does not bootstrap) and every join key."""
    joiner = pipeline_joiner(pipe.config)
    inputs = pipe.config.inputs
    found: dict[str, None] = {}
    for item in pipe.work.items:
        if item.poison is not None:
            continue
        spec = inputs[item.role]
        router = KeyRouter(
            item.role, key_parts(spec.key), spec.time, item.role in joiner.keyed_tombstones
        )
        routing = router.route(item.value, key_bytes(item.key), item.timestamp)
        if routing.error is None and routing.key is not None:
            found[routing.key] = None
    first = joiner.bootstrap_roles()
    role = next((r for r in joiner.roles if r not in first), joiner.roles[0])
    return inputs[role].topic, list(found)
