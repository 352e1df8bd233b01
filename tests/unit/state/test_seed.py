"""A seed's due times: each bucket's timer is its earliest due key, as its first batch sets it;
and where each stateful operator's state is in a seed.

``tests/state/test_state_commands.py`` runs ``daemon rescale`` through Spark and reads the map
it writes; here the per-bucket rule, on rows shaped as the seed's Parquet reads back.
"""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import pytest

from daemon.checkpoint.layout import seed_folder
from daemon.errors import EnrichdError
from daemon.operator.chain_step import TIMER_LABEL_BITS, operator_id, timer_label
from daemon.operator.state_format import encode_portable
from daemon.state.seed import _bucket_timer, seed_of, write_seed


def _entry(due: int | None) -> dict[str, Any]:
    return {"key": "k", "entry": encode_portable((0, 0, 0, 0, b""), due, {"held": [1, 2]})}


def test_a_buckets_timer_is_its_earliest_due_key() -> None:
    row = {"bucket": 5, "keys": [_entry(9_000), _entry(None), _entry(4_000)]}
    assert _bucket_timer(row) == (5, 4_000)


def test_a_bucket_with_no_due_key_gets_no_timer() -> None:
    assert _bucket_timer({"bucket": 2, "keys": [_entry(None)]}) == (2, None)


def test_a_moved_state_of_an_unknown_format_is_refused() -> None:
    entry = {"key": "k", "entry": pickle.dumps((99, 0, 0, 0, 0, 5, b""))}
    with pytest.raises(EnrichdError, match="state format 99"):
        _bucket_timer({"bucket": 1, "keys": [entry]})


def test_a_seed_labels_each_operators_timers_as_its_reports_do() -> None:
    # Spark numbers a chain's operators from the sink back; the due-time map labels them by
    # their place in the query, the writing (last) one's with its buckets' own labels.
    operators = 3
    labels = [timer_label(operator_id(op, operators), operators, 5) for op in range(operators)]
    assert labels == [5, (2 << TIMER_LABEL_BITS) + 5, (1 << TIMER_LABEL_BITS) + 5]
    assert timer_label(0, 1, 5) == 5  # a one-joiner query's only operator


def test_each_operator_reads_the_state_folder_of_its_own(tmp_path: Path) -> None:
    """Operator 0 (a one-joiner query's only one, a chain's last) reads ``state/`` as seeds
    did before chains; operator N reads ``state.N/``, and holds state only if that is there."""
    folder = seed_folder(tmp_path)
    write_seed(folder, {"orders/0": 4}, "rescale")
    (folder / "state").mkdir()
    (folder / "state.2").mkdir()
    seed = seed_of(tmp_path)
    assert seed is not None and seed.operator == 0
    assert seed.state_folder == folder / "state" and seed.has_state
    assert seed.of_operator(2).state_folder == folder / "state.2"
    assert seed.of_operator(2).has_state and not seed.of_operator(1).has_state
    assert seed.of_operator(2).offsets == {"orders/0": 4}
