"""The answer a workload must give, computed by the joiner's own logic through the engine core.

:func:`daemon.testing.run_joiner` runs the joiner's ``process`` and ``advance`` through
:class:`daemon.operator.core.EngineCore`, the loop the Spark operator runs, over the workload
in arrival order, with the pipeline's keys, options, fields and schemas, and ends every key's
input as the markers verify sends do. A joiner's second stage (``lookup``'s running totals)
runs the same way over the first stage's answer. Poison bytes never reach a joiner: the
source sends each to the dead-letter topic as ``UndecodableRecord``.

Each expected record is named by what identifies it in the output: its Kafka key, its value
and the workload record that made it. A second stage's totals are named by group and the
timestamp of the record that moved them, with the final total per group beside them: their
intermediate values depend on how the first stage's output fell into the second stage's
micro-batches (docs/semantics.md, Running totals), their number and finals do not.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from daemon.model.config import PipelineConfig
from daemon.plugin.configured import pipeline_joiner
from daemon.plugin.joiner import Emit, InputRecord
from daemon.testing import run_joiner
from daemon.verify.workload import Workload

UNDECODABLE = "UndecodableRecord"
"""The dead-letter class of bytes that do not decode with the input's schema."""

Identity = tuple[Any, ...]
"""What names one record in a comparison (see the module docstring)."""


def canonical(value: Any) -> str:
    """A value as text that is equal exactly when the values are."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


@dataclass
class Answer:
    """What one pipeline must write.

    Attributes:
        outputs: main output records, as ``(key, canonical value, item index or None)``.
        dead_letters: dead letters, as ``(class, item index)``.
        totals: second-stage updates, as ``(group, timestamp of the moving record)``.
        final_totals: each group's last total, as a canonical value.
        item_at: item index by Kafka timestamp, to name the scenario of a total.
    """

    outputs: Counter[Identity] = field(default_factory=Counter)
    dead_letters: Counter[Identity] = field(default_factory=Counter)
    totals: Counter[Identity] = field(default_factory=Counter)
    final_totals: dict[str, str] = field(default_factory=dict)
    item_at: dict[int, int] = field(default_factory=dict)


def text_key(key: str | bytes | None) -> str | None:
    """An output key as the text a consumer reads (UTF-8)."""
    return key.decode("utf-8", "replace") if isinstance(key, bytes) else key


def compute(work: Workload, pipe: PipelineConfig) -> Answer:
    """The answer of ``work`` through the pipeline ``pipe`` (its joiner must be installed)."""
    joiner = pipeline_joiner(pipe)
    lines, where = work.inputs()
    run = run_joiner(
        type(joiner),
        lines,
        keys={role: spec.key for role, spec in pipe.inputs.items()},
        options=pipe.options,
        fields={role: spec.field or role for role, spec in pipe.inputs.items()},
        times={role: spec.time for role, spec in pipe.inputs.items() if spec.time},
        schemas={role: spec.schema_file for role, spec in pipe.inputs.items() if spec.schema_file},
        output_schema=pipe.output.schema_file,
        output_schemas={
            name: spec.schema_file for name, spec in pipe.outputs.items() if spec.schema_file
        },
    )

    def item(record: InputRecord | None) -> int | None:
        return None if record is None else where[(record.role, record.offset)]

    answer = Answer(item_at={it.timestamp: index for index, it in enumerate(work.items)})
    main: list[Emit] = []
    for out in run.outputs:
        if out.output is None:
            main.append(out)
            answer.outputs[(text_key(out.key), canonical(out.value), item(out.source))] += 1
    for letter in run.dead_letters:
        answer.dead_letters[(letter.kind, item(letter.record))] += 1
    for index, it in enumerate(work.items):
        if it.poison is not None:
            answer.dead_letters[(UNDECODABLE, index)] += 1
    stage = joiner.downstream()
    if stage is not None:
        _second_stage(answer, stage, main, pipe)
    return answer


def _second_stage(answer: Answer, stage: Any, main: list[Emit], pipe: PipelineConfig) -> None:
    """The second stage's totals over the first stage's output, in timestamp order."""
    joined: list[dict[str, Any]] = sorted(
        (
            {"key": text_key(out.key), "value": out.value, "timestamp": out.source.timestamp}
            for out in main
            if out.source is not None and out.value is not None
        ),
        key=lambda line: int(line["timestamp"]),
    )
    totals_schema = pipe.outputs[stage.output].schema_file if stage.output in pipe.outputs else None
    run = run_joiner(
        type(stage.joiner),
        {"joined": joined},
        keys={"joined": stage.key},
        options=stage.joiner.options,
        output_schema=totals_schema,
    )
    for letter in run.dead_letters:  # their source is the first stage's output, no item
        answer.dead_letters[(letter.kind, None)] += 1
    for out in run.outputs:
        group = text_key(out.key)
        stamp = out.source.timestamp if out.source is not None else None
        answer.totals[(group, stamp)] += 1
        answer.final_totals[str(group)] = canonical(out.value)
