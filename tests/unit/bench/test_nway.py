"""Issue 65's ratio in continuous mode, as ``python -m bench nway --continuous`` words it
(``bench/nway.py``).

Pure logic on made-up drains; the real drains run only with ``--continuous``, which the
bench smoke leaves out.
"""

from __future__ import annotations

from bench.drain import Drained
from bench.nway import drain_lines, drain_ratio
from bench.resources import Peaks


def drained(records: int, seconds: float) -> Drained:
    return Drained("continuous", records, seconds, Peaks(), output_topic="out")


DRAINS = {
    1: [drained(110_000, 10.0), drained(110_000, 11.0), drained(110_000, 20.0)],
    3: [drained(110_250, 30.0), drained(110_250, 25.0), drained(110_250, 22.05)],
}
"""One table at 11,000, 10,000 and 5,500 records/s; three at 3,675, 4,410 and 5,000."""


def test_the_ratio_is_of_the_median_drains_of_each_lookup() -> None:
    assert drain_ratio(DRAINS) == 4_410 / 10_000


def test_the_lines_give_each_drain_and_the_ratio_beside_micro_batchs() -> None:
    lines = drain_lines(DRAINS, 600_000, (0.33, 0.35))
    assert "| three tables, continuous 2 | 110,250 | 25.0 | 4,410 | 0.44 | 0 |" in lines
    assert "| one table, continuous 3 | 110,000 | 20.0 | 5,500 | 0.55 | 0 |" in lines
    (ratio,) = [line for line in lines if line.startswith("- Three tables against one")]
    assert "(median records/s of 3 drain(s) each): 0.44 (4,410 against 10,000 records/s)" in ratio
    assert "continuous mode misses it. Micro-batch mode in this run: 0.33 sustained" in ratio
    assert not any("long batch may have ended" in line for line in lines)


def test_a_drain_as_long_as_a_long_batch_is_said_to_have_maybe_crossed_one() -> None:
    lines = drain_lines(DRAINS, 30_000, (0.33, 0.35))
    assert "- The longest drain took 30.0 s, not shorter than a long batch" in "\n".join(lines)


def test_no_drains_no_lines() -> None:
    assert drain_lines({}, 600_000, (0.33, 0.35)) == []
