"""The fit of a micro-batch's cost against its size (``bench/batch_cost.py``): a fixed part per
batch and a part per record, by least squares."""

from __future__ import annotations

import pytest

from bench.batch_cost import FIT_RECORDS, fit, fit_batches, in_range
from bench.enrichd import Batch


def _batch(rows: int, add_batch_ms: int) -> Batch:
    return Batch(0, rows, 0.0, {"addBatch": add_batch_ms, "triggerExecution": add_batch_ms + 40})


def test_points_on_a_line_give_its_fixed_and_per_record_parts_exactly() -> None:
    # 500 ms per batch and 20 us per record.
    cost = fit([(1_000, 520.0), (3_000, 560.0), (10_000, 700.0)])

    assert cost is not None
    assert (cost.fixed_ms, cost.per_record_ms) == (pytest.approx(500.0), pytest.approx(0.02))
    assert (cost.batches, cost.smallest, cost.largest) == (3, 1_000, 10_000)
    assert cost.r_squared == pytest.approx(1.0)
    assert cost.at(5_000) == pytest.approx(600.0)
    assert cost.fixed_share(5_000) == pytest.approx(500 / 600)


def test_scattered_points_give_the_least_squares_line_and_a_lower_r_squared() -> None:
    cost = fit([(1_000, 600.0), (1_000, 400.0), (3_000, 640.0), (3_000, 480.0)])

    assert cost is not None
    # The means at each size are 500 and 560 ms: the line through them.
    assert (cost.fixed_ms, cost.per_record_ms) == (pytest.approx(470.0), pytest.approx(0.03))
    assert 0.0 < cost.r_squared < 1.0


def test_one_batch_size_cannot_separate_the_parts() -> None:
    assert fit([(3_000, 560.0), (3_000, 600.0)]) is None
    assert fit([]) is None


def test_the_fit_is_over_the_batches_of_the_size_range_and_their_add_batch_time() -> None:
    batches = [_batch(999, 9_999), _batch(1_000, 520), _batch(10_000, 700), _batch(10_001, 1)]

    assert [b.rows for b in in_range(batches)] == [1_000, 10_000]  # the ends are in
    cost = fit_batches(batches)
    assert cost is not None and cost.batches == 2
    assert (cost.fixed_ms, cost.per_record_ms) == (pytest.approx(500.0), pytest.approx(0.02))
    assert FIT_RECORDS == (1_000, 10_000)
    assert fit_batches(batches, (1, 100)) is None
