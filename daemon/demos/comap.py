"""``daemon demo``: sample users and tweets, out of order, through the ``comap`` example."""

from __future__ import annotations

from typing import Any

from rich.table import Table

from daemon.demos import latest_by_key, replay_sample

USERS = [
    {"key": 1, "value": {"id": 1, "name": "Ada", "avatar": None, "updated_at": 1000}},
    {"key": 2, "value": {"id": 2, "name": "Grace", "avatar": "grace.png", "updated_at": 1500}},
    # A profile update: every earlier tweet of Ada's gets a new view.
    {"key": 1, "value": {"id": 1, "name": "Ada L.", "avatar": "ada.png", "updated_at": 6000}},
]
USER_TIMES = [1000, 1500, 6000]

TWEETS = [
    # Tweet 100 arrives before its author exists: no view until Ada's first profile.
    {"key": 100, "value": {"id": 100, "author_id": 1, "content": "first!"}},
    {"key": 101, "value": {"id": 101, "author_id": 2, "content": "compilers are friends"}},
    {"key": 102, "value": {"id": 102, "author_id": 1, "content": "notes on the engine"}},
    # Author 3 never shows up: this tweet waits in state, unjoined.
    {"key": 103, "value": {"id": 103, "author_id": 3, "content": "who am I?"}},
]
TWEET_TIMES = [500, 2000, 3000, 4000]


def sample() -> dict[str, tuple[str, list[dict[str, Any]]]]:
    """The sample inputs as replay lines, with their files' names, by role."""
    return {
        role: (name, [{**item, "timestamp": t} for item, t in zip(items, times, strict=True)])
        for role, name, items, times in (
            ("one", "users.jsonl", USERS, USER_TIMES),
            ("many", "tweets.jsonl", TWEETS, TWEET_TIMES),
        )
    }


def show(console: Any) -> None:
    """Replay the sample users and tweets through ``comap`` and print the views."""
    path, result = replay_sample(console, "tweet-views.toml", sample(), "the comap pipeline")
    emitted = Table(title=f"Every view emitted to tweet-views ({path.name})")
    for column in ("#", "tweet", "content", "author", "avatar", "caused by"):
        emitted.add_column(column)
    for n, record in enumerate(result.outputs, start=1):
        view = record["value"] or {}
        author = view.get("author") or {}
        cause = record["headers"].get("enrichd.source.topic", "").split(".replay-")[0]
        emitted.add_row(
            str(n),
            record["key"],
            (view.get("tweet") or {}).get("content", "(deleted)"),
            author.get("name", "-"),
            author.get("avatar") or "-",
            cause,
        )
    console.print(emitted)
    final = Table(title="Latest view per tweet (what a compacted topic holds)")
    for column in ("tweet", "content", "author"):
        final.add_column(column)
    for key, view in sorted(latest_by_key(result.outputs).items()):
        view = view or {}
        final.add_row(
            key,
            (view.get("tweet") or {}).get("content", "-"),
            (view.get("author") or {}).get("name", "-"),
        )
    console.print(final)
    console.print(
        f"{result.input_records} input records, {len(result.outputs)} views, "
        f"{len(result.dead_letters)} dead letters. Tweet 103's author never arrived, so it has "
        "no view yet; tweet 100 came before its author and was joined when Ada appeared."
    )
