"""``daemon demo``: sample users and tweets, out of order, through the ``comap`` example."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from daemon.errors import EnrichdError

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"

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


def write_sample(folder: Path) -> dict[str, Path]:
    """Write the sample inputs as replay files; return them by role."""
    files = {"one": folder / "users.jsonl", "many": folder / "tweets.jsonl"}
    for role, items, times in (("one", USERS, USER_TIMES), ("many", TWEETS, TWEET_TIMES)):
        lines = [json.dumps({**item, "timestamp": t}) for item, t in zip(items, times, strict=True)]
        files[role].write_text("\n".join(lines) + "\n", encoding="utf-8")
    return files


def latest_by_key(outputs: list[dict[str, Any]]) -> dict[str, dict[str, Any] | None]:
    """What a compacted topic keeps: the last value per key (None: deleted)."""
    latest: dict[str, dict[str, Any] | None] = {}
    for record in outputs:
        latest[record["key"]] = record["value"]
    return latest


def example_file() -> Path:
    """The demo's pipeline file from ``examples/``."""
    path = EXAMPLES / "tweet-views.toml"
    if not path.exists():
        raise EnrichdError(f"{path} is missing; run the demo from a source checkout")
    return path
