"""The numbering of a lookup of several tables, alone: what it counts and when it forgets.

The stages' side (what they count) is checked through the plain replay of whole chains in
test_lookup_chain.py; here the numbering's state after given partials and tallies.
"""

from __future__ import annotations

from typing import Any

from daemon.joiners.lookup_chain import META, Numbering, NumberingOptions
from daemon.plugin.joiner import InputRecord, JoinerContext

ID = "orders/0/7"


def numbering() -> Numbering:
    return Numbering(NumberingOptions(), JoinerContext("chain", {"joined": "joined"}))


def joined(gen: tuple[int, ...], opens: int, rank: int, **answer: Any) -> InputRecord:
    """A partial (an answer, or with nothing else a tally) of the stream record ID."""
    book: dict[str, Any] = {"id": ID, "t": 20, "gen": gen, "rank": (rank, 0, 0, 7)}
    book["open"] = opens
    if not answer:
        book["tally"] = True
    return InputRecord("joined", ID, {**answer, META: book}, 20, "", 0, 0, b"o1", rank)


def test_an_entry_is_forgotten_when_the_last_stage_lets_its_record_go() -> None:
    stage = numbering()
    state = stage.initial_state()
    # Two stages keep the order: its answer carries both.
    out = list(stage.process(ID, state, [joined((0, 0), 2, 5, order={"id": "o1"})], stage.context))
    assert [emit.value for emit in out] == [{"order": {"id": "o1"}, "revision": 0}]
    assert state["open"] == 2
    # The first stage drops it (past its retention): the second may still revise.
    assert list(stage.process(ID, state, [joined((0,), -1, 9)], stage.context)) == []
    assert state["open"] == 1 and state["next"] == 1
    # A tally alone writes nothing; the last one empties the entry, which the engine drops.
    assert list(stage.process(ID, state, [joined((0, 0), -1, 12)], stage.context)) == []
    assert stage.is_empty(state)


def test_an_entry_from_before_stages_counted_is_kept() -> None:
    stage = numbering()
    state = {"gen": (0, 0), "last": {"order": {"id": "o1"}}, "next": 1}
    assert list(stage.process(ID, state, [joined((0,), -1, 9)], stage.context)) == []
    # Without a count of what the stages kept, forgetting could renumber a revision.
    assert state == {"gen": (0, 0), "last": {"order": {"id": "o1"}}, "next": 1}
