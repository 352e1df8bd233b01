"""A joiner that fails, through the test kit: each way is seen, and a call is all or nothing.

The kit runs the engine's own apply loop (``daemon.operator.core``), so what holds here holds
in the engine: a failed call sends nothing it yielded, leaves the key's state as it was,
dead-letters its records as ``JoinerFailed`` and names the call; a failed ``advance`` (no
records) keeps its key's clock going. ``tests/unit/operator/test_processor.py`` shows the rows
the engine writes for them, ``tests/joins/test_joiner_failure.py`` the whole way through
Spark and the broker.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from daemon.operator.core import ContractBreach
from daemon.plugin.joiner import (
    DeadLetter,
    Emit,
    InputRecord,
    Joiner,
    JoinerContext,
    JoinerOptions,
)
from daemon.testing import JoinerHarness, run_joiner

SCHEMAS = Path(__file__).resolve().parents[3] / "schemas"


class FlakyOptions(JoinerOptions):
    wakeup: int | None = None


class Flaky(Joiner[FlakyOptions, dict[str, Any]]):
    """Counts each key's records and echoes them; a record's ``do`` field says how to fail.

    ``raise``: raise after yielding its echo; ``int``: yield an int; ``output``: emit to an
    output it does not declare; ``key``: emit an int key; ``lock``: keep a lock in its state.
    ``advance`` echoes the count, then raises once the key has seen ``tick-fails``.
    """

    name = "flaky"
    description = "fails on demand"
    roles = ("a",)
    outputs = ("side",)

    def initial_state(self) -> dict[str, Any]:
        return {"n": 0}

    def process(
        self, key: str, state: dict[str, Any], records: Sequence[InputRecord], ctx: JoinerContext
    ) -> Iterator[Emit | DeadLetter]:
        for record in records:
            state["n"] += 1
            do = (record.value or {}).get("do")
            yield Emit(key, {"n": state["n"]}, record)
            if do == "raise":
                raise RuntimeError("boom")
            if do == "int":
                yield 5  # type: ignore[misc]
            if do == "output":
                yield Emit(key, {"n": state["n"]}, record, output="elsewhere")
            if do == "key":
                yield Emit(7, {"n": state["n"]}, record)  # type: ignore[arg-type]
            if do == "lock":
                state["lock"] = threading.Lock()
            if do == "tick-fails":
                state["tick fails"] = True

    def advance(
        self, key: str, state: dict[str, Any], to: int, ctx: JoinerContext
    ) -> Iterator[Emit | DeadLetter]:
        state["advanced"] = to
        yield Emit(key, {"n": state["n"], "advanced": True})
        if state.get("tick fails"):
            raise RuntimeError("tick")

    def wakeup_ms(self, state: dict[str, Any]) -> int | None:
        return self.options.wakeup


def record(key: int, do: str | None, timestamp: int) -> dict[str, Any]:
    return {"key": None, "value": {"k": key, "do": do}, "timestamp": timestamp}


def run(*lines: dict[str, Any]) -> Any:
    return run_joiner(Flaky, {"a": list(lines)}, keys={"a": "k"}, end_of_input=False)


def test_a_process_that_raises_sends_nothing_and_dead_letters_its_records() -> None:
    result = run(record(1, None, 1), record(1, "raise", 2), record(2, None, 3))

    # Key 1's call yielded an echo before it raised: not sent. Key 2 goes on.
    assert [(out.key, out.value) for out in result.outputs] == [("2", {"n": 1})]
    assert [(d.kind, d.record.offset) for d in result.dead_letters] == [
        ("JoinerFailed", 0),
        ("JoinerFailed", 1),
    ]
    assert result.dead_letters[0].reason == (
        "joiner 'flaky' raised RuntimeError('boom') in process of key '1'"
    )
    (failure,) = result.failures
    assert (failure.key, failure.call, type(failure.error)) == ("1", "process", RuntimeError)
    assert "1" not in result.states  # its state rolled back: it had none before
    with pytest.raises(RuntimeError, match="boom"):
        raise failure.error  # the traceback a test author wants to see


def test_the_calls_before_and_after_a_failed_one_keep_their_outputs_and_state() -> None:
    harness = JoinerHarness(Flaky, keys={"a": "k"})
    harness.feed({"a": [record(1, None, 1)]})
    harness.feed({"a": [record(1, "raise", 2)]})
    harness.feed({"a": [record(1, None, 3)]})

    assert [out.value for out in harness.run.outputs] == [{"n": 1}, {"n": 2}]
    assert harness.run.states == {"1": {"n": 2}}
    assert [d.record.offset for d in harness.run.dead_letters] == [1]


@pytest.mark.parametrize(
    ("do", "breach"),
    [
        ("int", "it yielded 5 (int), not an Emit or a DeadLetter"),
        (
            "output",
            "it emitted to output 'elsewhere', which it does not declare (its outputs: 'side')",
        ),
        ("key", "it emitted the key 7 (int): a key is a str, bytes or None"),
        ("lock", "its state cannot be pickled (TypeError: cannot pickle '_thread.lock' object)"),
    ],
)
def test_a_call_that_breaks_the_contract_fails_with_a_line_that_says_how(
    do: str, breach: str
) -> None:
    result = run(record(1, None, 1), record(2, do, 2))

    assert [out.key for out in result.outputs] == ["1"]  # not key 2's good echo either
    (failure,) = result.failures
    assert isinstance(failure.error, ContractBreach)
    (letter,) = result.dead_letters
    assert (letter.kind, letter.record.offset) == ("JoinerFailed", 1)
    assert letter.reason.startswith(
        f"joiner 'flaky' broke the joiner contract in process of key '2': {breach}"
    )
    assert "2" not in result.states


def test_an_advance_that_fails_at_a_wake_up_is_told_and_the_key_wakes_up_again() -> None:
    harness = JoinerHarness(Flaky, keys={"a": "k"}, options={"wakeup": 1_000})
    harness.feed({"a": [record(1, "tick-fails", 5)]})

    harness.wait(1_000)
    harness.wait(1_000)

    run = harness.run
    assert [(f.key, f.call, f.records) for f in run.failures] == [
        ("1", "advance at event time 1005", ()),
        ("1", "advance at event time 2005", ()),
    ]
    assert [out.value for out in run.outputs] == [{"n": 1}]  # neither advance's echo
    assert "advanced" not in run.states["1"]  # what they did to the state is gone
    assert run.dead_letters == []  # no record to dead-letter (the engine keys one by '1')


def test_an_advance_that_fails_at_the_end_still_ends_the_key() -> None:
    harness = JoinerHarness(Flaky, keys={"a": "k"})
    harness.feed({"a": [record(1, "tick-fails", 5)]})
    harness.end()
    assert [(f.key, f.call) for f in harness.run.failures] == [("1", "advance at the end of input")]
    harness.feed({"a": [record(1, None, 6)]})  # after the end: applied and flushed at once

    assert [out.value for out in harness.run.outputs] == [{"n": 1}, {"n": 2}]
    assert harness.run.metrics == {"after_end_of_input": 1}
    assert [f.call for f in harness.run.failures][-1] == "advance at the end of input"
    assert harness.run.states["1"]["n"] == 2  # the process of the late record kept its state


def test_a_value_the_schema_refuses_with_no_record_to_blame_fails_the_call() -> None:
    result = run_joiner(
        Flaky,
        {"a": [record(1, None, 1)]},
        keys={"a": "k"},
        output_schema=SCHEMAS / "user.avsc",
    )
    # The echo of the record has a source: a dead letter. The end's echo has none.
    assert [d.kind for d in result.dead_letters] == ["UnencodableOutput"]
    (failure,) = result.failures
    assert failure.call == "advance at the end of input"
    assert "the schema of its output refuses a value it emitted" in failure.reason()
    assert result.states == {"1": {"n": 1}}
