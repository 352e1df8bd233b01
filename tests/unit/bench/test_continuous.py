"""Issue 64's targets at many keys, as ``python -m bench continuous --scale-users`` words
them (``bench/continuous.py``).

Pure logic on made-up rates; ``tests/bench/test_bench_smoke.py`` runs the real drains.
"""

from __future__ import annotations

from bench.continuous import (
    HERE_TREE,
    SCALE_TARGET,
    SERVICE_TREE,
    memory_line,
    modes_line,
    scale_line,
)
from bench.resources import MIB
from bench.runs import MEMORY_TARGET


def test_the_rate_at_many_keys_is_a_share_of_the_rate_at_few() -> None:
    line = scale_line(20_000, 1_000_000, 50_000.0, 46_000.0)
    assert "at 1,000,000 keys 46,000 records/s, 0.92 of the 20,000-key rate" in line
    assert "(50,000; target 0.9): this run meets it." in line


def test_a_share_under_the_target_misses_it_even_when_rounded_up_to_it() -> None:
    rate = 50_000.0
    assert scale_line(20_000, 1_000_000, rate, rate * SCALE_TARGET).endswith("meets it.")
    line = scale_line(20_000, 1_000_000, rate, rate * (SCALE_TARGET - 0.001))
    assert "0.90 of the 20,000-key rate" in line and line.endswith("misses it.")


def test_the_peak_at_many_keys_is_judged_against_4_gb() -> None:
    under = memory_line(1_000_000, 3_661 * MIB)
    assert "under 4 GB at 1,000,000 keys" in under
    assert ": 3,661 MiB (3.84 GB): this run meets it." in under
    assert memory_line(1_000_000, MEMORY_TARGET).endswith("(4.00 GB): this run misses it.")
    # Whose memory it is: each drain's own process, or with --drain-here the benchmark's.
    assert f"({SERVICE_TREE})" in under
    assert f"({HERE_TREE})" in memory_line(1_000_000, 3_661 * MIB, HERE_TREE)


def test_continuous_is_judged_against_micro_batch_only_when_its_drains_ran() -> None:
    both = modes_line(20_000, {"continuous": 33_000.0, "micro_batch": 30_000.0})
    assert "continuous 33,000 records/s, micro-batch 30,000 records/s: 1.10 of it." in both
    alone = modes_line(50, {"continuous": 88.0})
    assert alone.endswith("Not judged: micro-batch's drains left out (--no-micro-batch).")
