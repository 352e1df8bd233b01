"""The plugin test kit ``daemon.testing`` on its own, without Spark."""

from __future__ import annotations

import doctest
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

import daemon.testing
from daemon.joiners.comap import CoMap
from daemon.plugin.joiner import END_OF_TIME, DeadLetter, Emit, InputRecord, Joiner, JoinerContext
from daemon.testing import JoinerHarness, by_key, run_joiner

SCHEMAS = Path(__file__).resolve().parents[3] / "schemas"
COMAP = {"keys": {"one": "id", "many": "author_id"}, "options": {"many_id": "id"}}


class Echo(Joiner):
    """Emits each record's value under its join key, with the batch it was seen in."""

    name = "echo"
    description = "Echo."
    roles = ("a", "b")

    def initial_state(self) -> dict[str, int]:
        return {"seen": 0}

    def process(
        self, key: str, state: Any, records: Sequence[InputRecord], ctx: JoinerContext
    ) -> Iterator[Emit | DeadLetter]:
        for record in records:
            state["seen"] += 1
            yield Emit(key, {"role": record.role, "n": state["seen"]}, record)


def line(key: Any, value: dict | None, timestamp: int) -> dict[str, Any]:
    return {"key": key, "value": value, "timestamp": timestamp}


def test_module_docstring_example_runs() -> None:
    assert doctest.testmod(daemon.testing).failed == 0


def test_apply_order_is_time_then_role_order_and_state_spans_batches() -> None:
    inputs = {
        "b": [line(None, {"k": 1}, 5), line(None, {"k": 1}, 1)],
        "a": [line(None, {"k": 1}, 5)],
    }
    for batch_size in (None, 1, 2):
        run = run_joiner(Echo, inputs, keys={"a": "k", "b": "k"}, batch_size=batch_size)
        assert by_key(run.outputs) == {
            "1": [{"role": "b", "n": 1}, {"role": "a", "n": 2}, {"role": "b", "n": 3}]
        }
        assert run.states == {"1": {"seen": 3}}


def test_tombstones_route_by_kafka_key_only_for_keyed_roles() -> None:
    user = {"id": 1, "name": "ada", "avatar": None, "updated_at": 1}
    tweet = {"id": 7, "author_id": 1, "content": "hi"}
    run = run_joiner(
        CoMap,
        {
            "one": [line(1, user, 1), line(1, None, 3)],
            "many": [line(7, tweet, 2), line(7, None, 4)],
        },
        schemas={"one": SCHEMAS / "user.avsc", "many": SCHEMAS / "tweet.avsc"},
        output_schema=SCHEMAS / "tweet_view.avsc",
        fields={"one": "author", "many": "tweet"},
        **COMAP,
    )
    assert by_key(run.outputs) == {"7": [{"id": 7, "tweet": tweet, "author": user}, None]}
    assert [(d.kind, d.record.role) for d in run.dead_letters] == [("UnroutableTombstone", "many")]


def test_outputs_the_schema_rejects_become_dead_letters() -> None:
    run = run_joiner(
        Echo, {"a": [line(None, {"k": 1}, 1)]}, keys={"a": "k"}, output_schema=SCHEMAS / "user.avsc"
    )
    assert run.outputs == []
    assert [d.kind for d in run.dead_letters] == ["UnencodableOutput"]


def test_bad_inputs_are_refused_with_the_role_and_index() -> None:
    with pytest.raises(ValueError, match="no role 'c'"):
        run_joiner(Echo, {"c": []}, keys={"c": "k"})
    with pytest.raises(ValueError, match="no join key field for role 'a'"):
        run_joiner(Echo, {"a": []}, keys={})
    with pytest.raises(ValueError, match=r"a\[0\]: 'timestamp'"):
        run_joiner(Echo, {"a": [line(None, {"k": 1}, 0)]}, keys={"a": "k"})
    with pytest.raises(ValueError, match=r"many\[0\]: value does not match"):
        run_joiner(
            CoMap,
            {"many": [line(1, {"id": 1}, 1)]},
            schemas={"many": SCHEMAS / "tweet.avsc"},
            **COMAP,
        )


class Holding(Joiner):
    """Holds each record until event time passes it by 10 ms; wakes quiet keys after 1 s."""

    name = "holding"
    description = "Holding."
    roles = ("a",)

    def initial_state(self) -> dict[str, Any]:
        return {"held": [], "time": 0}

    def process(
        self, key: str, state: Any, records: Sequence[InputRecord], ctx: JoinerContext
    ) -> Iterator[Emit | DeadLetter]:
        for record in records:
            state["held"].append(record.event_time)
            state["time"] = max(state["time"], record.event_time)
        yield from self.advance(key, state, state["time"], ctx)

    def advance(self, key: str, state: Any, to: int, ctx: JoinerContext) -> Iterator[Emit]:
        due = [t for t in state["held"] if t + 10 <= to]
        state["held"] = [t for t in state["held"] if t + 10 > to]
        for t in due:
            yield Emit(key, {"t": t, "to": to})

    def wakeup_ms(self, state: Any) -> int | None:
        return 1000 if state["held"] else None


def test_harness_wakes_a_quiet_key_with_event_time_moved_by_the_time_that_passed() -> None:
    harness = JoinerHarness(Holding, keys={"a": "k"})
    harness.feed({"a": [line(None, {"k": 1}, 100), line(None, {"k": 2}, 100)]})
    harness.wait(500)
    harness.feed({"a": [line(None, {"k": 2}, 105)]})  # key 2's quiet time starts again
    harness.wait(499)
    assert harness.run.outputs == []
    harness.wait(1)  # key 1 has been quiet 1000 ms: event time 100 + 1000
    assert [(o.key, o.value) for o in harness.run.outputs] == [("1", {"t": 100, "to": 1100})]
    harness.wait(500)  # key 2: quiet since clock 500, latest event time 105
    assert [(o.key, o.value) for o in harness.run.outputs[1:]] == [
        ("2", {"t": 100, "to": 1105}),
        ("2", {"t": 105, "to": 1105}),
    ]
    harness.wait(10_000)  # nothing held, so no wake-up was asked for
    assert len(harness.run.outputs) == 3


def test_run_joiner_ends_input_by_advancing_every_key_to_the_end_of_time() -> None:
    inputs = {"a": [line(None, {"k": 1}, 100), line(None, {"k": 1}, 105)]}
    ended = run_joiner(Holding, inputs, keys={"a": "k"})
    assert [o.value for o in ended.outputs] == [
        {"t": 100, "to": END_OF_TIME},
        {"t": 105, "to": END_OF_TIME},
    ]
    held = run_joiner(Holding, inputs, keys={"a": "k"}, end_of_input=False)
    assert held.outputs == [] and held.states["1"]["held"] == [100, 105]


def test_composite_keys_and_kafka_key_parts_route_as_in_a_pipeline_file() -> None:
    run = run_joiner(
        CoMap,
        {
            "one": [
                {"key": "acme", "value": {"id": 1, "name": "ada"}, "timestamp": 1},
                {"key": "globex", "value": {"id": 1, "name": "hank"}, "timestamp": 1},
            ],
            "many": [
                {"key": 7, "value": {"id": 7, "org": "acme", "author": 1}, "timestamp": 2},
                {"key": 8, "value": {"id": 8, "org": "acme", "author": None}, "timestamp": 2},
            ],
        },
        keys={"one": ["kafka_key", "id"], "many": ["org", "author"]},
        options={"many_id": "id"},
    )
    assert [(out.key, out.value["one"]["name"]) for out in run.outputs] == [("7", "ada")]
    assert sorted(run.states) == ['["acme","1"]', '["globex","1"]']
    (missing,) = run.dead_letters
    assert (missing.kind, missing.reason) == ("MissingKey", "no join key field 'author'")


def test_harness_drops_a_key_whose_state_ttl_ran_out_as_the_engine_does() -> None:
    """The harness runs the engine's loop, state TTL included: a user stored a second ago is
    gone when the TTL is a second, so the tweet after it waits unjoined."""
    options = {**COMAP["options"], "state_ttl": "1s"}
    user = {"one": [line(1, {"id": 1, "name": "ada"}, 1)]}
    tweet = {"many": [line(7, {"id": 7, "author_id": 1}, 2)]}

    harness = JoinerHarness(CoMap, keys=COMAP["keys"], options=options)
    harness.feed(user)
    harness.wait(999)
    assert sorted(harness.run.states) == ["1"]
    harness.wait(1)  # the key's TTL timer fires
    assert harness.run.states == {}
    harness.feed(tweet)
    assert harness.run.outputs == []

    kept = JoinerHarness(CoMap, keys=COMAP["keys"], options=options)
    kept.feed(user)
    kept.wait(999)
    kept.feed(tweet)  # in time: joined
    assert [out.value["one"]["name"] for out in kept.run.outputs] == ["ada"]  # type: ignore[index]


def test_harness_flushes_a_record_after_its_keys_end_at_once_and_counts_it() -> None:
    harness = JoinerHarness(Holding, keys={"a": "k"})
    harness.feed({"a": [line(None, {"k": 1}, 100)]})
    harness.end()
    assert [o.value for o in harness.run.outputs] == [{"t": 100, "to": END_OF_TIME}]
    harness.feed({"a": [line(None, {"k": 1}, 200)]})  # after the end: held, then flushed
    assert [o.value for o in harness.run.outputs[1:]] == [{"t": 200, "to": END_OF_TIME}]
    assert harness.run.metrics == {"after_end_of_input": 1}
    assert harness.run.states["1"]["held"] == []


def test_a_state_put_in_the_run_is_where_the_key_goes_on_from() -> None:
    """docs/plugins.md: to test that an older release's state still loads, put it in
    ``harness.run.states[key]`` and feed the key records."""
    harness = JoinerHarness(Echo, keys={"a": "k"})
    harness.feed({"a": [line(None, {"k": 1}, 1)]})
    harness.run.states["1"] = {"seen": 41}  # replaces the stored state
    harness.run.states["2"] = {"seen": 6}  # a key the harness has not seen
    harness.feed({"a": [line(None, {"k": 1}, 2), line(None, {"k": 2}, 2)]})
    assert [(o.key, o.value["n"]) for o in harness.run.outputs] == [  # type: ignore[index]
        ("1", 1),
        ("1", 42),
        ("2", 7),
    ]
    assert harness.run.states == {"1": {"seen": 42}, "2": {"seen": 7}}
