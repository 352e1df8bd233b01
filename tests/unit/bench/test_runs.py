"""The benchmark's arithmetic: medians over runs, the steady-batch check, Spark's cores, and
how the Quix children add up (``bench/runs.py``, ``bench/quix.py``).

Pure logic on made-up progress; ``tests/bench/test_bench_smoke.py`` runs the real thing.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from bench.enrichd import Batch, EnrichdResult
from bench.quix import Tally, _combined
from bench.runs import MIN_STEADY_BATCHES, Repeated, local_cores, steady_check


def _run(seconds_per_batch: float, batches: int, rows: int = 1_000) -> EnrichdResult:
    """A run of ``batches`` equal batches, one after the other, each ``seconds_per_batch``."""
    ms = int(seconds_per_batch * 1000)
    result = EnrichdResult(input_records=rows * batches, session_start_s=0.0, query_started=0.0)
    result.batches = [
        Batch(i, rows, i * seconds_per_batch, {"triggerExecution": ms}) for i in range(batches)
    ]
    return result


def test_the_sustained_figure_is_the_median_run_with_the_lowest_and_highest_beside_it() -> None:
    fast, middle, slow = _run(0.5, 7), _run(1.0, 7), _run(2.0, 7)
    repeated = Repeated([slow, fast, middle])
    assert repeated.sustained == pytest.approx(1_000.0)
    assert repeated.typical is middle
    assert repeated.spread == "500-2,000"
    assert repeated.note() == "median of 3 runs, 500-2,000; 6 batch(es) after the first"


def test_an_even_number_of_runs_shows_the_lower_middle_run() -> None:
    runs = [_run(1.0, 7), _run(2.0, 7)]
    repeated = Repeated(runs)
    assert repeated.sustained == pytest.approx(750.0)
    assert repeated.typical is runs[1]


def test_fewer_steady_batches_than_the_minimum_in_any_run_fail_the_check() -> None:
    enough = _run(1.0, MIN_STEADY_BATCHES + 1)
    line, passed = steady_check(Repeated([enough, enough]))
    assert passed, line
    short = _run(1.0, MIN_STEADY_BATCHES)
    line, passed = steady_check(Repeated([enough, short]))
    assert not passed
    assert f"only {MIN_STEADY_BATCHES - 1} batch(es)" in line and "too few to trust" in line


@pytest.mark.parametrize(
    ("master", "cores"), [("local", 1), ("local[2]", 2), ("local[3,2]", 3), ("local[16]", 16)]
)
def test_the_cores_of_a_local_master(master: str, cores: int) -> None:
    assert local_cores(master) == cores


def test_local_star_is_every_core_and_a_cluster_is_refused() -> None:
    assert local_cores("local[*]") >= 1
    with pytest.raises(ValueError, match="not a local Spark master"):
        local_cores("spark://host:7077")


def test_children_answers_add_up_on_one_clock() -> None:
    answers = [
        {
            "started": 1.0,
            "first": 3.0,
            "committed": 9.0,
            "returned": 9.5,
            "views": 40,
            "consumed": 45,
        },
        {
            "started": 1.2,
            "first": 2.5,
            "committed": 8.0,
            "returned": 10.0,
            "views": 60,
            "consumed": 65,
        },
    ]
    combined = _combined(answers)
    assert combined["views"] == 100 and combined["consumed"] == 110
    assert (combined["started"], combined["first"]) == (1.0, 2.5)
    assert (combined["committed"], combined["returned"]) == (9.0, 10.0)


class _App:
    """Stands in for a Quix ``Application``: records when it was told to stop."""

    def __init__(self) -> None:
        self.stopped = threading.Event()

    def stop(self) -> None:
        self.stopped.set()


def test_every_child_stops_once_the_children_together_reach_the_target(tmp_path: Path) -> None:
    clocks = [{"views": 0}, {"views": 0}]
    tallies = [
        Tally({"tally_dir": str(tmp_path), "index": i}, clock, "views", 10)
        for i, clock in enumerate(clocks)
    ]
    apps = [_App(), _App()]
    for tally, app in zip(tallies, apps, strict=True):
        tally.watch(app)
    clocks[0]["views"] = 6
    time.sleep(0.3)
    assert not any(app.stopped.is_set() for app in apps)  # 6 of 10: not yet
    clocks[1]["views"] = 4
    for app in apps:
        assert app.stopped.wait(5)
    assert all(tally.done for tally in tallies)
    assert tallies[0].total() == 10
