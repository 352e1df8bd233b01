"""A joiner's headline: which of a run's results it takes, and the hidden line that carries
it in the run's section (``bench/headline.py``).

Pure logic on made-up results; ``tests/bench/test_bench_smoke.py`` runs the real thing.
"""

from __future__ import annotations

import dataclasses

import pytest

from bench import headline
from bench.enrichd import EnrichdResult
from bench.headline import MILLION, NO_MILLION, NOT_MEASURED, NOT_RUN, Headline
from bench.latency import YARDSTICK, LatencyResult
from bench.quix import QuixResult
from bench.resources import MIB, Peaks
from bench.runs import Repeated, SweepPoint


def _point(keys: int, peak_mib: int) -> SweepPoint:
    run = EnrichdResult(input_records=1, session_start_s=0.0, query_started=0.0)
    run.peaks = Peaks(total=peak_mib * MIB)
    return SweepPoint(keys, 50_000.0, Repeated([run]))


def _latency(
    trigger_ms: int, p99_ms: float, rate: int = 5_000, reason: str = "", for_fit: bool = False
) -> LatencyResult:
    return LatencyResult(rate, 30.0, trigger_ms, p99_ms=p99_ms, reason=reason, for_fit=for_fit)


def _yardstick(p99_ms: float, rate: int = 5_000, reason: str = "") -> LatencyResult:
    return LatencyResult(rate, 30.0, 0, p99_ms=p99_ms, reason=reason, contender=YARDSTICK)


QUIX = QuixResult(input_records=30_000, version="3.28.1", seconds=10.0, processes=2)
"""3,000 records/s in 2 processes: 1,500 per process."""


def _measured(**changes: object) -> Headline:
    given: dict[str, object] = {
        "joiner": "comap",
        "sustained": 36_000.0,
        "ceiling": 60_000.0,
        "cores": 2,
        "quix": QUIX,
        "latencies": [_yardstick(200.0), _latency(0, 1_396.0)],
        "points": [_point(20_000, 3_800), _point(MILLION, 4_277)],
        "date": "2026-11-26 22:15 UTC",
        "commit": "3762234",
    }
    given.update(changes)
    return headline.measured(**given)  # type: ignore[arg-type]


def test_the_figures_are_the_runs_own_against_the_ceiling_and_the_peer_of_the_same_run() -> None:
    figures = _measured()
    assert figures == Headline(
        joiner="comap",
        sustained=36_000.0,
        ceiling_ratio=0.6,
        quix_per_core=12.0,  # 18,000 per core against 1,500 per process
        p99_ms=1_396.0,
        offered_rate=5_000,
        trigger_ms=0,
        memory_mib=4_277.0,
        date="2026-11-26 22:15 UTC",
        commit="3762234",
        yardstick_p99_ms=200.0,
    )
    assert figures.p99_ratio == pytest.approx(6.98)


def test_the_peer_is_compared_per_core_when_it_ran_in_fewer_processes_than_spark_has_cores() -> (
    None
):
    one_process = dataclasses.replace(QUIX, processes=1)  # 3,000 in one process
    assert _measured(cores=4, quix=one_process).quix_per_core == pytest.approx(3.0)


def test_the_default_triggers_latency_run_is_shown_before_any_other() -> None:
    latencies = [_latency(1_000, 900.0), _latency(0, 1_396.0)]
    figures = _measured(latencies=latencies)
    assert (figures.p99_ms, figures.trigger_ms) == (1_396.0, 0)


def test_without_a_measured_default_trigger_the_first_measured_run_is_shown_with_its_trigger() -> (
    None
):
    latencies = [_latency(0, 0.0, reason="the pipeline fell behind"), _latency(1_000, 900.0, 200)]
    figures = _measured(latencies=latencies)
    assert (figures.p99_ms, figures.offered_rate, figures.trigger_ms) == (900.0, 200, 1_000)


def test_the_yardstick_is_the_one_at_the_rate_of_the_run_shown_and_fit_runs_are_never_shown() -> (
    None
):
    latencies = [
        _yardstick(210.0),
        _latency(1_000, 900.0),
        _yardstick(150.0, rate=2_000),
        _latency(0, 700.0, rate=2_000, for_fit=True),
    ]
    figures = _measured(latencies=latencies)
    assert (figures.p99_ms, figures.trigger_ms, figures.offered_rate) == (900.0, 1_000, 5_000)
    assert figures.yardstick_p99_ms == 210.0


def test_the_yardstick_alone_gives_its_p99_and_no_enrichd_p99() -> None:
    figures = _measured(latencies=[_yardstick(210.0)])
    assert (figures.p99_ms, figures.yardstick_p99_ms, figures.p99_ratio) == (
        NOT_RUN,
        210.0,
        NOT_RUN,
    )


def test_a_yardstick_that_failed_or_did_not_run_says_so() -> None:
    failed = _measured(latencies=[_yardstick(0.0, reason="the loop failed"), _latency(0, 900.0)])
    assert (failed.yardstick_p99_ms, failed.p99_ratio) == (NOT_MEASURED, NOT_MEASURED)
    assert _measured(latencies=[_latency(0, 900.0)]).yardstick_p99_ms == NOT_RUN


def test_a_part_left_out_says_not_run_and_one_that_failed_says_not_measured() -> None:
    failed = _latency(0, 0.0, reason="no output named a known record")
    assert _measured(latencies=[]).p99_ms == NOT_RUN
    assert _measured(latencies=[failed]).p99_ms == NOT_MEASURED
    assert _measured(quix=QuixResult(input_records=1, reason="--no-quix")).quix_per_core == NOT_RUN


def test_memory_is_the_million_key_points_and_a_run_without_one_says_so() -> None:
    assert _measured(points=[_point(20_000, 3_800), _point(200_000, 3_900)]).memory_mib == (
        NO_MILLION
    )
    assert _measured(points=[]).memory_mib == NO_MILLION
    assert _measured(points=[_point(MILLION, 3_266)]).memory_mib == 3_266.0


def test_the_hidden_line_carries_the_headline_back_unchanged() -> None:
    figures = _measured(latencies=[], quix=QuixResult(input_records=1, reason="--no-quix"))
    line = headline.comment(figures)
    assert line.startswith("<!-- headline {") and line.endswith("} -->")
    section = f"<!-- bench:comap -->\n{line}\n## comap\n\nbody\n<!-- /bench:comap -->"
    assert headline.read(section) == figures


def test_a_section_without_the_line_has_no_headline() -> None:
    assert headline.read("<!-- bench:comap -->\n## comap\n<!-- /bench:comap -->") is None


def test_a_line_edited_into_something_else_is_refused() -> None:
    line = headline.comment(_measured()).replace('"sustained": 36000.0', '"sustained": "fast"')
    with pytest.raises(ValueError, match="not valid"):
        headline.read(line)
