"""The comap rules the raw loops apply (``bench/raw.py``'s :class:`RawCoMap`): what enrichd's
comap emits, in the same order, on plain dicts."""

from __future__ import annotations

from typing import Any

from bench.raw import RawCoMap


def _join() -> tuple[RawCoMap, list[tuple[str, dict[str, Any]]]]:
    emitted: list[tuple[str, dict[str, Any]]] = []
    return RawCoMap({}, lambda key, value: emitted.append((key, value))), emitted


def test_a_tweet_of_a_known_author_emits_its_view_keyed_by_the_tweet() -> None:
    join, emitted = _join()
    ada = {"id": 1, "name": "ada"}
    tweet = {"id": 10, "author_id": 1, "content": "hello"}

    join.apply("one", ada)
    join.apply("many", tweet)

    assert emitted == [("10", {"id": 10, "tweet": tweet, "author": ada})]


def test_an_author_arriving_after_their_tweets_emits_a_view_for_each_and_again_when_changed() -> (
    None
):
    join, emitted = _join()
    first, second = {"id": 10, "author_id": 1}, {"id": 11, "author_id": 1}
    join.apply("many", first)
    join.apply("many", second)
    join.apply("many", {"id": 12, "author_id": 2})
    assert emitted == []  # nobody known yet

    ada, renamed = {"id": 1, "name": "ada"}, {"id": 1, "name": "ada l."}
    join.apply("one", ada)
    join.apply("one", renamed)

    assert [(key, view["author"]) for key, view in emitted] == [
        ("10", ada),
        ("11", ada),
        ("10", renamed),
        ("11", renamed),
    ]
    assert join.state_entries() == 4  # one user, three tweets
