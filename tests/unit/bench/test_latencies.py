"""A joiner's latency section (``bench/latencies.py``): which runs it makes, the batch-cost fit
over their batches, and the section's ratios to the yardstick and its verdicts.

Pure logic on made-up results; ``tests/bench/test_bench_smoke.py`` runs the real thing.
"""

from __future__ import annotations

import argparse
import shlex

from bench.cpu import CpuShare
from bench.enrichd import Batch
from bench.latencies import (
    add_latency_arguments,
    fit_line,
    fit_of,
    latencies_ok,
    latency_checks,
    latency_command,
    latency_section,
    plan,
)
from bench.latency import YARDSTICK, LatencyResult, LatencyWorkload

WORKLOAD = LatencyWorkload("comap", "tweets", "views", "every user already read", print)
CPU = CpuShare(seconds=30.0, cores=2, broker=9.0, generator=3.0, machine=45.0)


def _parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_latency_arguments(parser, "tweets")
    return parser.parse_args(list(argv))


def _batches(*sizes: int, fixed: int = 500, per_record_us: int = 20) -> tuple[Batch, ...]:
    return tuple(
        Batch(i, rows, float(i), {"addBatch": fixed + rows * per_record_us // 1000})
        for i, rows in enumerate(sizes)
    )


def _result(rate: int, trigger_ms: int, p99: float, **more: object) -> LatencyResult:
    """A run of 30 s that read back all it offered, its p50 half its p99."""
    fields: dict[str, object] = {
        "offered": rate * 30,
        "outputs": rate * 30,
        "p50_ms": p99 / 2,
        "p99_ms": p99,
        "max_ms": p99 * 1.5,
        "cpu": CPU,
        **more,
    }
    return LatencyResult(rate, 30.0, trigger_ms, **fields)  # type: ignore[arg-type]


def _enrichd(
    rate: int, trigger_ms: int, p99: float, batches: tuple[Batch, ...] = (), **more: object
) -> LatencyResult:
    return _result(rate, trigger_ms, p99, batches=batches, **more)


def _yardstick(rate: int, p99: float) -> LatencyResult:
    return _result(rate, 0, p99, max_ms=p99 * 2, contender=YARDSTICK, transactions=300)


def test_each_rate_gets_a_yardstick_and_the_latency_rate_every_trigger() -> None:
    args = _parse("--fit-rates", "2000", "5000", "10000", "2000")
    assert plan(args) == [(5_000, (0, 1_000), False), (2_000, (0,), True), (10_000, (0,), True)]
    alone = _parse("--trigger-ms", "--fit-rates")
    assert plan(alone) == [(5_000, (), False)]  # the yardstick alone


def test_the_command_a_section_shows_gives_the_same_options_back() -> None:
    for argv in (
        (),
        ("--trigger-ms", "--fit-rates", "--latency-seconds", "2.5"),
        ("--trigger-ms", "0", "--fit-rates", "3000", "--fit-records", "1", "99"),
    ):
        args = _parse(*argv)
        assert _parse(*shlex.split(latency_command(args))) == args
    assert latency_command(_parse("--no-latency")) == " --no-latency"


def test_the_fit_takes_enrichd_batches_after_each_runs_first_in_the_size_range() -> None:
    # Each run's first batch is far off the line (it may carry the start of offering), and a
    # batch of 50,000 records is out of the range: neither may move the fit.
    main = _enrichd(
        5_000, 0, 900.0, (Batch(0, 3_000, 0.0, {"addBatch": 9_000}), *_batches(3_000, 3_200))
    )
    fit = _enrichd(10_000, 0, 900.0, (*_batches(8_000), *_batches(8_000, 50_000)), for_fit=True)
    cost, found = fit_of([_yardstick(5_000, 200.0), main, fit])

    assert cost is not None and found == 3  # 3,000 and 3,200 of the first, 8,000 of the other
    assert (round(cost.fixed_ms), round(cost.per_record_ms * 1000)) == (500, 20)
    line = fit_line([_yardstick(5_000, 200.0), main, fit])
    assert "F = 500 ms per batch, c = 20.0 us per record" in line
    # At the average batch of the default trigger's run at 5,000/s, 3,067 records, F is 89%.
    assert (
        "the 3,067 records of an average batch of the enrichd, default trigger run at "
        "5,000/s, F is 89%" in line
    )
    assert "the fixed part F dominates" in line


def test_without_two_batch_sizes_the_fit_says_what_would_give_them() -> None:
    line = fit_line([_enrichd(5_000, 0, 900.0, _batches(3_000, 3_000, 3_000))])
    assert line.startswith("- Batch cost: no fit")
    assert "(2 batch(es) of those sizes)" in line and "`--fit-rates`" in line


def test_the_section_gives_each_enrichd_run_its_ratio_to_the_yardstick_of_its_rate() -> None:
    latencies = [
        _yardstick(5_000, 200.0),
        _enrichd(5_000, 0, 1_300.0, _batches(3_000, 3_100, 3_200)),
        _enrichd(5_000, 1_000, 1_100.0, _batches(5_000, 5_000)),
        _yardstick(10_000, 250.0),
        _enrichd(10_000, 0, 1_000.0, _batches(8_000, 8_000), for_fit=True),
    ]
    text = "\n".join(latency_section(latencies, WORKLOAD, 500_000, 40_000.0))

    assert (
        "| yardstick (raw loop, exactly once) | 5,000 | 150,000 | 100 | 200 | 400 | - | - |" in text
    )
    assert (
        "| enrichd, default trigger | 5,000 | 150,000 | 650 | 1,300 | 1,950 | 6.50x | 6.50x |"
        in text
    )
    assert (
        "| enrichd, default trigger | 10,000 | 300,000 | 500 | 1,000 | 1,500 | 4.00x | 4.00x |"
        in text
    )
    # Costs: the yardstick's transactions as its batches; cores as CPU seconds over 30 s.
    assert (
        "| yardstick (raw loop, exactly once) | 5,000 | 300 | 500 | - | - | 0.30 | 0.10 | 1.10 |"
        in text
    )
    assert "| enrichd, default trigger | 5,000 | 3 | 3,100 | 0 | 562 | 0.30 | 0.10 | 1.10 |" in text
    assert (
        "this run misses it: p99 6.50x the yardstick's (1,300 against 200 ms). With the 1,000 "
        "ms trigger this run meets it: p99 5.50x the yardstick's (1,100 against 200 ms)."
    ) in text
    assert "- Batch cost: addBatch = F + c x records" in text


def test_a_run_without_a_yardstick_at_its_rate_has_no_ratio_and_is_not_judged() -> None:
    text = "\n".join(latency_section([_enrichd(5_000, 0, 1_300.0)], WORKLOAD, 500_000, 40_000.0))
    assert "| enrichd, default trigger | 5,000 | 150,000 | 650 | 1,300 | 1,950 | - | - |" in text
    assert "not judged: the yardstick gave no p99 at this rate" in text


def test_every_run_the_yardstick_too_must_read_back_every_output() -> None:
    good = [_yardstick(5_000, 200.0), _enrichd(5_000, 0, 1_300.0)]
    assert latencies_ok(good, WORKLOAD)
    assert latency_checks(good, WORKLOAD)[0] == (
        "latency run (yardstick (raw loop, exactly once), 5,000/s): 150,000 views of 150,000 "
        "read back (150,000 tweets offered)"
    )
    short = LatencyResult(5_000, 30.0, 0, offered=150_000, outputs=149_999, contender=YARDSTICK)
    assert not latencies_ok([short], WORKLOAD)
