"""The workloads: distinct increasing timestamps, every kind of record, values that fit."""

from __future__ import annotations

import pytest

from daemon.demos import example_file
from daemon.formats.avro.codec import AvroCodec, load_schema_file
from daemon.model.config import load_pipeline_file
from daemon.verify.workload import EXAMPLES, POISON, build

SCENARIOS = {
    "comap": {"tweet joins its user", "user update fans out", "user deleted", "poison record"},
    "lookup": {"click enriched", "region moved", "region deleted", "click without a user"},
    "window": {"pair within the window", "record later than the grace", "unroutable tombstone"},
    "asof": {"recommendation joins mood", "late mood revises", "recommendation past retention"},
}


@pytest.mark.parametrize("joiner", sorted(EXAMPLES))
def test_a_workload_has_every_scenario_and_distinct_increasing_timestamps(joiner: str) -> None:
    work = build(joiner, records=300, seed=3, start_ms=5_000)
    assert len(work.items) == 300
    assert [item.timestamp for item in work.items] == list(range(5_000, 5_300))
    assert SCENARIOS[joiner] | {"poison record"} <= {item.scenario for item in work.items}
    assert any(item.value is None and item.poison is None for item in work.items)  # tombstones


@pytest.mark.parametrize("joiner", sorted(EXAMPLES))
def test_every_value_fits_its_inputs_schema_and_poison_fits_none(joiner: str) -> None:
    pipe = load_pipeline_file(example_file(EXAMPLES[joiner])).pipeline[0]
    codecs = {
        role: AvroCodec(load_schema_file(spec.schema_file)) for role, spec in pipe.inputs.items()
    }  # type: ignore[arg-type]
    for item in build(joiner, records=200, seed=1, start_ms=1).items:
        codec = codecs[item.role]
        if item.poison is not None:
            assert item.poison == POISON
            with pytest.raises(Exception):  # noqa: B017 - any decoding error will do
                codec.decode(item.poison)
        elif item.value is not None:
            assert codec.decode(codec.encode(item.value)) == item.value


def test_the_same_seed_gives_the_same_workload_and_another_seed_another() -> None:
    first = build("lookup", records=100, seed=7, start_ms=1)
    assert build("lookup", records=100, seed=7, start_ms=1) == first
    assert build("lookup", records=100, seed=8, start_ms=1) != first


def test_inputs_are_replay_lines_per_role_without_poison() -> None:
    work = build("comap", records=60, seed=2, start_ms=1)
    lines, where = work.inputs()
    assert sum(map(len, lines.values())) == sum(1 for item in work.items if item.poison is None)
    for (role, position), index in where.items():
        assert lines[role][position] == work.items[index].line()
