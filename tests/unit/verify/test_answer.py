"""The answer: the joiner's own logic over the workload, the same for every cut into batches."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from daemon.demos import example_file
from daemon.model.config import PipelineConfig, load_pipeline_file
from daemon.plugin.host import registry
from daemon.testing import run_joiner
from daemon.verify.answer import UNDECODABLE, canonical, compute, text_key
from daemon.verify.workload import EXAMPLES, OPTIONS, build


def example(joiner: str) -> PipelineConfig:
    pipe = load_pipeline_file(example_file(EXAMPLES[joiner])).pipeline[0]
    return pipe.model_copy(update={"options": {**pipe.options, **OPTIONS.get(joiner, {})}})


@pytest.mark.parametrize("joiner", sorted(EXAMPLES))
def test_the_whole_output_is_the_same_for_every_cut_into_micro_batches(joiner: str) -> None:
    """What verify rests on: with distinct increasing timestamps, a run killed and restarted
    anywhere (so cut into any micro-batches) must write exactly the one-pass answer."""
    pipe = example(joiner)
    work = build(joiner, records=240, seed=5, start_ms=1_000)
    lines, _ = work.inputs()

    def outputs(batch_size: int | None) -> Counter[tuple[object, ...]]:
        run = run_joiner(
            registry().get(joiner).cls,
            lines,
            keys={role: spec.key for role, spec in pipe.inputs.items()},
            options=pipe.options,
            fields={role: spec.field or role for role, spec in pipe.inputs.items()},
            times={role: spec.time for role, spec in pipe.inputs.items() if spec.time},
            batch_size=batch_size,
        )
        found = Counter(
            (text_key(o.key), canonical(o.value), o.source and (o.source.role, o.source.offset))
            for o in run.outputs
        )
        found.update((d.kind, d.record.role, d.record.offset) for d in run.dead_letters)
        return found

    whole = outputs(None)
    assert whole and outputs(1) == whole and outputs(17) == whole


def test_poison_is_an_undecodable_dead_letter_and_totals_follow_the_joined_clicks() -> None:
    pipe = example("lookup")
    work = build("lookup", records=200, seed=2, start_ms=1_000)
    answer = compute(work, pipe)
    poisoned = {index for index, item in enumerate(work.items) if item.poison is not None}
    assert {index for kind, index in answer.dead_letters if kind == UNDECODABLE} == poisoned
    # Every joined click moves its region's total once; the finals add every click up.
    assert sum(answer.totals.values()) == sum(answer.outputs.values())
    clicks = sum(
        item.value["clicks"]
        for index, item in enumerate(work.items)
        if item.value is not None
        and item.role == "stream"
        and any(source == index for _, _, source in answer.outputs)
    )
    finals = sum(json.loads(text)["clicks"] for text in answer.final_totals.values())
    assert finals == clicks


def test_every_output_names_the_record_that_made_it() -> None:
    work = build("comap", records=120, seed=4, start_ms=1_000)
    answer = compute(work, example("comap"))
    assert answer.outputs
    for _, _, index in answer.outputs:
        assert index is not None and work.items[index].poison is None
