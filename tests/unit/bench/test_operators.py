"""A micro-batch's stateful operators from its progress report (``bench/operators.py``):
source first, and averaged over batches."""

from __future__ import annotations

from types import SimpleNamespace

from bench.operators import Operator, mean_operators, operators_of


def _operator(updates: int, commit: int, sst: int) -> SimpleNamespace:
    return SimpleNamespace(
        allUpdatesTimeMs=updates,
        commitTimeMs=commit,
        numShufflePartitions=2,
        customMetrics={"rocksdbSstFileSize": sst},
    )


def test_operators_come_source_first_as_spark_lists_them_from_the_sink() -> None:
    report = SimpleNamespace(stateOperators=[_operator(30, 3, 300), _operator(10, 1, 100)])

    assert operators_of(report) == (Operator(10, 1, 100, 2), Operator(30, 3, 300, 2))


def test_each_operator_is_averaged_over_the_batches_its_state_taken_from_the_last() -> None:
    batches = [(Operator(10, 2, 100, 2), Operator(40, 4, 5, 2)), (Operator(20, 4, 200, 2),
               Operator(60, 6, 7, 2))]  # fmt: skip

    assert mean_operators(batches) == [Operator(15, 3, 200, 2), Operator(50, 5, 7, 2)]
    assert mean_operators([]) == []
