"""Which runs a latency result is compared with (``bench/latency.py``): the yardstick at the
same offered rate, the ratio to its percentiles, and the run a summary shows."""

from __future__ import annotations

import pytest

from bench.latency import YARDSTICK, LatencyResult, percentile, shown, versus, yardstick_of


def _enrichd(rate: int, trigger_ms: int = 0, p99: float = 1_200.0, **more: object) -> LatencyResult:
    return LatencyResult(rate, 30.0, trigger_ms, p50_ms=p99 / 2, p99_ms=p99, **more)  # type: ignore[arg-type]


def _yardstick(rate: int, p99: float = 200.0, reason: str = "") -> LatencyResult:
    return LatencyResult(
        rate, 30.0, 0, p50_ms=p99 / 2, p99_ms=p99, reason=reason, contender=YARDSTICK
    )


def test_a_run_is_compared_with_the_yardstick_measured_at_its_own_rate() -> None:
    slow, fast = _yardstick(2_000, 150.0), _yardstick(5_000, 200.0)
    results = [slow, _enrichd(2_000), fast, _enrichd(5_000, 1_000)]

    assert yardstick_of(_enrichd(5_000), results) is fast
    assert yardstick_of(_enrichd(2_000), results) is slow
    assert yardstick_of(_enrichd(10_000), results) is None


def test_a_yardstick_that_failed_is_no_reference() -> None:
    results = [_yardstick(5_000, reason="the yardstick loop failed")]
    assert yardstick_of(_enrichd(5_000), results) is None


def test_the_ratio_is_over_the_references_same_percentile() -> None:
    reference = _yardstick(5_000, 200.0)  # p50 100 ms, p99 200 ms

    assert versus(1_200.0, reference, "p99") == pytest.approx(6.0)
    assert versus(600.0, reference, "p50") == pytest.approx(6.0)
    assert versus(1_200.0, None, "p99") is None
    assert versus(1_200.0, _yardstick(5_000, 0.0), "p99") is None  # nothing to divide by


def test_a_summary_shows_the_default_triggers_run_at_the_latency_rate() -> None:
    one_second = _enrichd(5_000, 1_000)
    default = _enrichd(5_000, 0)
    fit = _enrichd(2_000, 0, for_fit=True)

    assert shown([_yardstick(5_000), one_second, default, fit]) is default
    assert shown([_yardstick(5_000), one_second, fit]) is one_second  # never a fit run
    assert shown([fit, _yardstick(5_000)]) is None
    assert shown([_enrichd(5_000, reason="the pipeline fell behind"), one_second]) is one_second


def test_runs_are_named_by_contender_and_trigger() -> None:
    assert _yardstick(5_000).name == "yardstick (raw loop, exactly once)"
    assert _enrichd(5_000, 0).name == "enrichd, default trigger"
    assert _enrichd(5_000, 1_000).name == "enrichd, 1,000 ms trigger"


def test_percentiles_are_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]
    assert (percentile(values, 0.5), percentile(values, 0.99)) == (50.0, 99.0)
    assert percentile([7.0], 0.99) == 7.0
