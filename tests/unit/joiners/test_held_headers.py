"""``headers_from = "inputs"``: each built-in joiner's outputs carry every input's headers.

The joiners' logic through the test kit's harness, which pickles and loads each key's state
between micro-batches as the engine does; the real-engine runs are in
tests/joins/test_inputs_headers.py.
"""

from __future__ import annotations

import pickle
from typing import Any

import pytest

from daemon.errors import HeadersFromRefused
from daemon.joiners.asof import AsOf, AsOfState
from daemon.joiners.comap import CoMap
from daemon.joiners.lookup import Lookup, VersionedState
from daemon.joiners.table import Table
from daemon.joiners.window import Window
from daemon.plugin import Emit, Joiner
from daemon.plugin.configured import configure
from daemon.testing import run_joiner


def line(key: Any, t: int, tag: str, **value: Any) -> dict[str, Any]:
    """A record at time ``t`` whose ``tag`` header names it (and a shared trace header)."""
    headers = {"tag": tag, "traceparent": "00-same"}
    return {"key": key, "value": {"k": 1, **value}, "timestamp": t, "headers": headers}


def carried(emit: Emit) -> list[tuple[str, bytes | None]]:
    """The headers an emit's output carries (an emit without its own: its source's)."""
    headers = emit.headers if emit.headers is not None else emit.source.headers  # type: ignore[union-attr]
    return list(headers or ())


def tags(emit: Emit) -> list[str]:
    return [(value or b"").decode() for name, value in carried(emit) if name == "tag"]


def run(cls: type[Joiner], inputs: dict[str, list[dict[str, Any]]], **kw: Any) -> list[Emit]:
    result = run_joiner(
        cls, inputs, keys={role: "k" for role in inputs}, batch_size=1, headers_from="inputs", **kw
    )
    return [out for out in result.outputs if out.output is None]


def test_a_lookup_answer_carries_its_table_row_then_its_stream_record() -> None:
    outs = run(Lookup, {"stream": [line("s1", 2, "s1")], "table": [line("r1", 1, "r1")]})
    assert [tags(out) for out in outs] == [["r1", "s1"]]
    # One trace header: the exact duplicate is kept once, at its last place.
    assert [name for name, _ in carried(outs[0])].count("traceparent") == 1


def test_a_versioned_revision_carries_the_newly_matched_row() -> None:
    outs = run(
        Lookup,
        {
            "stream": [line("s1", 20, "s1", at=20)],
            "table": [line("r1", 10, "r1", at=10), line("r2", 30, "r2", at=15)],
        },
        times={"stream": "at", "table": "at"},
        options={"versioned": True, "revisions": True},
    )
    assert [tags(out) for out in outs] == [["r1", "s1"], ["r2", "s1"]]


def test_a_comap_view_carries_the_other_side_first_and_its_cause_last() -> None:
    outs = run(
        CoMap,
        {
            "one": [line(1, 1, "one-1"), line(1, 3, "one-2")],
            "many": [line(7, 2, "many-7", id=7)],
        },
        options={"many_id": "id"},
    )
    assert [tags(out) for out in outs] == [["one-1", "many-7"], ["many-7", "one-2"]]


def test_an_asof_answer_and_its_revision_carry_the_right_version_they_matched() -> None:
    outs = run(
        AsOf,
        {
            "left": [line("l", 20, "left", at=20)],
            "right": [line("a", 10, "right-a", at=10), line("b", 30, "right-b", at=15)],
        },
        times={"left": "at", "right": "at"},
    )
    assert [tags(out) for out in outs] == [["right-a", "left"], ["right-b", "left"]]


def test_a_window_pair_carries_its_held_partner_then_its_later_record() -> None:
    outs = run(
        Window,
        {"left": [line("l", 1, "left")], "right": [line("r", 2, "right")]},
        options={"window": "5ms"},
    )
    assert [tags(out) for out in outs] == [["left", "right"]]


def test_a_table_result_carries_the_other_row_then_the_updated_one() -> None:
    outs = run(
        Table,
        {"left": [line("l", 1, "left"), line("l", 3, "left-2")], "right": [line("r", 2, "right")]},
    )
    assert [tags(out) for out in outs] == [["left", "right"], ["right", "left-2"]]


def test_state_keeps_no_headers_unless_the_pipeline_carries_inputs() -> None:
    """Rows, right versions and held sides keep their headers in state only under "inputs";
    otherwise a state pickles to the bytes it always had, and those bytes still load."""
    plain = VersionedState(1, [1], [{"a": 1}])
    assert pickle.loads(pickle.dumps(plain)).row_headers is None  # noqa: S301 - its own bytes
    kept = VersionedState(1, [1], [{"a": 1}], row_headers=[(("tag", b"r"),)])
    assert pickle.loads(pickle.dumps(kept)).row_headers == [(("tag", b"r"),)]  # noqa: S301 - its own bytes
    assert len(plain.__reduce__()[1]) == 5
    asof = AsOfState(right_times=[1], right_values=[{"a": 1}])
    assert len(asof.__reduce__()[1]) == 8
    assert pickle.loads(pickle.dumps(asof)) == asof  # noqa: S301 - its own bytes
    # As the slotted dataclass pickled it before: its eight fields, in order.
    old = AsOfState.__new__(AsOfState)
    old.__setstate__([1, None, None, None, [1], [{"a": 1}], {}, None])
    assert old.right_headers is None and old.right_values == [{"a": 1}]
    result = run_joiner(
        Table,
        {"left": [line("l", 1, "left")], "right": [line("r", 2, "right")]},
        keys={"left": "k", "right": "k"},
    )
    assert "left.headers" not in result.states["1"]


class OneRecordsHeaders(Table):
    """A plugin's joiner that does not say it merges its inputs' headers."""

    name = "one-records-headers"
    merges_headers = False


def test_a_joiner_that_does_not_merge_headers_refuses_inputs_in_one_line() -> None:
    with pytest.raises(HeadersFromRefused, match="carries the headers of one record per output"):
        configure(OneRecordsHeaders, {}, pipeline="p", headers_from="inputs")
    assert configure(OneRecordsHeaders, {}, pipeline="p").context.headers_from == "record"
