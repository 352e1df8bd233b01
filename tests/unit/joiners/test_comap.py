"""The comap joiner's logic alone, without Spark: what it emits for one key's records."""

from __future__ import annotations

from typing import Any

from daemon.joiners.comap import CoMap, CoMapOptions
from daemon.plugin.joiner import DeadLetter, Emit, InputRecord, JoinerContext
from daemon.testing import by_key, run_joiner

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


def test_fan_out_cap_dead_letters_the_newest_id_only_and_counts_it() -> None:
    context = JoinerContext(pipeline="t", fields={"one": "author", "many": "tweet"})
    j = CoMap(CoMapOptions(many_id="id", max_many_per_key=2), context)
    records = [tweet(10, 1), tweet(11, 2), tweet(12, 3), tweet(10, 4), tweet(13, 5)]
    state = j.initial_state()
    out = list(j.process("1", state, records, context))
    dead = [o for o in out if isinstance(o, DeadLetter)]
    assert [(d.record.offset, d.kind) for d in dead] == [
        (3, "FanOutCapExceeded"),
        (5, "FanOutCapExceeded"),
    ]
    assert sorted(state["many"]) == ["10", "11"]
    # The overflow is counted for the metrics (enrichd_joiner_events_total), once per record.
    assert context.metrics["fanout_cap_exceeded"] == 2


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


def test_output_sequence_per_tweet_does_not_depend_on_micro_batching() -> None:
    """Down to one record per micro-batch, where the engine test stops at four micro-batches:
    the same views, in the same order per tweet, as one batch."""
    ada = {"id": 1, "name": "ada", "avatar": None, "updated_at": 1}
    bob = {"id": 2, "name": "bob", "avatar": None, "updated_at": 2}
    order = ["t", "u", "t", "t", "u", "u", "t", "t"]  # t: a tweet next, u: a user next
    users = [ada, bob, {**ada, "name": "ada2"}]
    tweets = [
        {"id": 100 + i, "author_id": a, "content": str(i)} for i, a in enumerate([1, 2, 1, 3, 1])
    ]
    inputs: dict[str, list[dict[str, Any]]] = {"one": [], "many": []}
    for t, pick in enumerate(order, start=1):
        role, pool = ("one", users) if pick == "u" else ("many", tweets)
        value = pool[len(inputs[role])]
        inputs[role].append({"key": value["id"], "value": value, "timestamp": t})
    keys = {"one": "id", "many": "author_id"}
    options = {"many_id": "id"}
    fields = {"one": "author", "many": "tweet"}

    def views(batch_size: int | None) -> dict[str, list[Any]]:
        run = run_joiner(
            CoMap, inputs, keys=keys, options=options, fields=fields, batch_size=batch_size
        )
        return by_key(run.outputs)

    whole = views(None)
    assert sorted(whole) == ["100", "101", "102", "104"]  # 103's author never appears
    assert whole["100"][-1]["author"]["name"] == "ada2"  # the rename reached a stored tweet
    for batch_size in (1, 2, 3):
        assert views(batch_size) == whole
