"""The comap joiner's logic alone, without Spark: what it emits for one key's records."""

from __future__ import annotations

from typing import Any

from daemon.joiners.base import DeadLetter, Emit, InputRecord, JoinerContext
from daemon.joiners.comap import CoMap, CoMapOptions

CONTEXT = JoinerContext(pipeline="t", fields={"one": "author", "many": "tweet"})


def joiner(**options: Any) -> CoMap:
    return CoMap(CoMapOptions(many_id="id", **options), CONTEXT)


def user(name: str, offset: int, value: bool = True) -> InputRecord:
    body = {"id": 1, "name": name} if value else None
    return InputRecord("one", "1", body, offset, "users", 0, offset, b"1")


def tweet(tweet_id: int, offset: int, **extra: Any) -> InputRecord:
    body = {"id": tweet_id, "author_id": 1, "content": f"t{tweet_id}", **extra}
    return InputRecord("many", "1", body, offset, "tweets", 0, offset)


def run(j: CoMap, records: list[InputRecord], state: Any = None) -> tuple[Any, list[Any]]:
    state = j.initial_state() if state is None else state
    return state, list(j.process("1", state, records, CONTEXT))


def test_tweet_before_user_waits_then_joins() -> None:
    j = joiner()
    state, out = run(j, [tweet(10, 1)])
    assert out == []
    state, out = run(j, [user("ada", 2)], state)
    assert [(e.key, e.value["author"]["name"]) for e in out] == [("10", "ada")]


def test_profile_update_fans_out_to_every_stored_tweet() -> None:
    j = joiner()
    _, out = run(j, [user("ada", 1), tweet(10, 2), tweet(11, 3), user("ada2", 4)])
    assert [(e.key, e.value["author"]["name"]) for e in out] == [
        ("10", "ada"),
        ("11", "ada"),
        ("10", "ada2"),
        ("11", "ada2"),
    ]


def test_one_side_tombstone_emits_view_tombstones() -> None:
    j = joiner()
    state, _ = run(j, [user("ada", 1), tweet(10, 2)])
    state, out = run(j, [user("", 3, value=False)], state)
    assert [(e.key, e.value) for e in out] == [("10", None)]
    assert state["one"] is None and "10" in state["many"]


def test_deleting_an_unknown_user_emits_nothing() -> None:
    j = joiner()
    _, out = run(j, [tweet(10, 1), user("", 2, value=False)])
    assert out == []


def test_many_side_delete_marker_removes_the_tweet_and_its_view() -> None:
    j = joiner(many_deleted_field="__deleted")
    state, out = run(j, [user("ada", 1), tweet(10, 2), tweet(10, 3, __deleted=True)])
    assert [(e.key, e.value is None) for e in out] == [("10", False), ("10", True)]
    assert j.is_empty(state) is False and state["many"] == {}


def test_fan_out_cap_dead_letters_the_newest_id_only() -> None:
    j = joiner(max_many_per_key=2)
    state, out = run(j, [tweet(10, 1), tweet(11, 2), tweet(12, 3), tweet(10, 4)])
    dead = [o for o in out if isinstance(o, DeadLetter)]
    assert [(d.record.offset, d.kind) for d in dead] == [(3, "FanOutCapExceeded")]
    assert sorted(state["many"]) == ["10", "11"]


def test_many_record_without_its_id_is_dead_lettered() -> None:
    j = joiner()
    bad = InputRecord("many", "1", {"author_id": 1}, 1, "tweets", 0, 7)
    _, out = run(j, [bad])
    assert len(out) == 1 and isinstance(out[0], DeadLetter) and out[0].kind == "MissingId"


def test_emits_carry_their_source_record() -> None:
    j = joiner()
    _, out = run(j, [tweet(10, 1), user("ada", 2)])
    assert isinstance(out[0], Emit) and out[0].source is not None
    assert out[0].source.topic == "users"
