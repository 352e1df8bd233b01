"""The comap joiner through `daemon replay`, the real broker and the real Spark engine.

Many interleavings run in one replay, each in its own key space (ids offset by 1000 * n), so
one pipeline run checks them all.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from daemon.cli import app
from daemon.demos import latest_by_key
from daemon.model.config import PipelineFile, load_pipeline_file
from daemon.replay import ReplayResult, replay

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "tweet-views.toml"


def users_of(space: int) -> list[dict[str, Any]]:
    """Per-key ordered user events: ada created then renamed; bob created."""
    a, b = space * 1000 + 1, space * 1000 + 2
    return [
        {"id": a, "name": f"ada-{space}", "avatar": None, "updated_at": 1},
        {"id": b, "name": f"bob-{space}", "avatar": "b.png", "updated_at": 2},
        {"id": a, "name": f"ada-{space}-renamed", "avatar": "a.png", "updated_at": 3},
    ]


def tweets_of(space: int) -> list[dict[str, Any]]:
    """Tweets of ada, bob and of an author who never appears."""
    a, b, ghost = space * 1000 + 1, space * 1000 + 2, space * 1000 + 3
    return [
        {"id": space * 1000 + 100 + i, "author_id": author, "content": f"tweet {i}"}
        for i, author in enumerate([a, b, a, ghost, a])
    ]


def interleave(space: int, picks: list[bool], t0: int) -> tuple[list[dict], list[dict]]:
    """Merge users and tweets of one key space in the order ``picks`` says (True: a user next),
    keeping each topic's own order; timestamps follow the merged order."""
    users, tweets = users_of(space), tweets_of(space)
    user_lines, tweet_lines = [], []
    ui = ti = 0
    t = t0
    for pick_user in picks + [True] * len(users) + [False] * len(tweets):
        if pick_user and ui < len(users):
            user_lines.append({"key": users[ui]["id"], "value": users[ui], "timestamp": t})
            ui += 1
        elif not pick_user and ti < len(tweets):
            tweet_lines.append({"key": tweets[ti]["id"], "value": tweets[ti], "timestamp": t})
            ti += 1
        else:
            continue
        t += 1
    return user_lines, tweet_lines


def batch_join(users: list[dict], tweets: list[dict]) -> dict[str, dict[str, Any]]:
    """The plain batch join: each tweet with the final version of its author, if any."""
    final_user = {u["value"]["id"]: u["value"] for u in users}
    return {
        str(t["value"]["id"]): {
            "id": t["value"]["id"],
            "tweet": t["value"],
            "author": final_user[t["value"]["author_id"]],
        }
        for t in tweets
        if t["value"]["author_id"] in final_user
    }


def write_jsonl(path: Path, lines: list[dict]) -> Path:
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def example(broker) -> PipelineFile:  # type: ignore[no-untyped-def]
    return load_pipeline_file(EXAMPLE)


def run(
    example: PipelineFile, tmp: Path, users: list, tweets: list, broker: Any, **kw: Any
) -> ReplayResult:
    files = {
        "one": write_jsonl(tmp / "users.jsonl", users),
        "many": write_jsonl(tmp / "tweets.jsonl", tweets),
    }
    return replay(example, files, bootstrap_servers=broker.bootstrap_servers, **kw)


picks_strategy = st.lists(st.booleans(), min_size=8, max_size=8)


@settings(
    # Each example is a whole pipeline run, mostly a query's start: one example of 24
    # interleavings (each in a key space of its own) costs half of two of 12.
    max_examples=1,
    deadline=None,
    # Report the failing one as generated, unshrunk.
    phases=[Phase.explicit, Phase.generate],
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(interleavings=st.lists(picks_strategy, min_size=24, max_size=24))
def test_latest_view_per_tweet_equals_batch_join_for_every_interleaving(
    interleavings: list[list[bool]], example: PipelineFile, broker: Any, spark: Any, tmp_path: Path
) -> None:
    users: list[dict] = []
    tweets: list[dict] = []
    for space, picks in enumerate(interleavings):
        u, t = interleave(space, picks, t0=1 + space * 100)
        users += u
        tweets += t
    expected = batch_join(users, tweets)

    result = run(example, tmp_path, users, tweets, broker)

    assert latest_by_key(result.outputs) == expected
    assert result.dead_letters == []
    # A view is emitted only once its author is known: never a view with a null author.
    assert all(r["value"] and r["value"]["author"] for r in result.outputs)


def test_outputs_do_not_depend_on_max_batch(
    example: PipelineFile, broker: Any, spark: Any, tmp_path: Path
) -> None:
    users, tweets = interleave(0, [False, True, False, False, True, True, False, False], 1)
    u2, t2 = interleave(1, [True, True, True, False, False, False, False, False], 100)
    users, tweets = users + u2, tweets + t2

    # One micro-batch: each key's users and tweets meet in it, and are applied in event-time
    # (here: timestamp) order across the two topics, whatever order Spark hands them over in.
    whole = run(example, tmp_path, users, tweets, broker)
    # One record per micro-batch, as `daemon replay --max-batch 1`: in space 0, bob's tweet
    # waits in a batch of its own for bob, who comes later.
    singles = run(example, tmp_path, users, tweets, broker, max_batch=1)

    assert (whole.batches, singles.batches) == (1, 16)

    # Timestamps follow arrival, so apply order is arrival order in every batching: the whole
    # output sequence per tweet, not just the latest view, is the same.
    def per_key(result: ReplayResult) -> dict[str, list]:
        seen: dict[str, list] = {}
        for record in result.outputs:
            seen.setdefault(record["key"], []).append(record["value"])
        return seen

    assert per_key(singles) == per_key(whole)
    assert latest_by_key(whole.outputs) == batch_join(users, tweets)


def test_profile_update_re_emits_every_stored_tweet(
    example: PipelineFile, broker: Any, spark: Any, tmp_path: Path
) -> None:
    ada = {"id": 1, "name": "ada", "avatar": None, "updated_at": 1}
    renamed = {**ada, "name": "ada lovelace"}
    users = [
        {"key": 1, "value": ada, "timestamp": 10},
        {"key": 1, "value": renamed, "timestamp": 50},
    ]
    tweets = [
        {"key": i, "value": {"id": i, "author_id": 1, "content": str(i)}, "timestamp": 10 + i}
        for i in (1, 2, 3)
    ]
    result = run(example, tmp_path, users, tweets, broker, max_batch=2)
    renamed_views = [r for r in result.outputs if r["value"]["author"]["name"] == "ada lovelace"]
    assert sorted(r["key"] for r in renamed_views) == ["1", "2", "3"]
    assert all(r["headers"]["enrichd.source.topic"].startswith("users.") for r in renamed_views)
    # A view carries the timestamp of the record that caused it, as Kafka Streams' do.
    assert all(r["timestamp"] == 50 for r in renamed_views)
    first_views = [r for r in result.outputs if r["value"]["author"]["name"] == "ada"]
    assert sorted((r["key"], r["timestamp"]) for r in first_views) == [
        ("1", 11),
        ("2", 12),
        ("3", 13),
    ]


def test_fan_out_after_the_stash_log_was_compacted(broker: Any, spark: Any, tmp_path: Path) -> None:
    """1,100 tweets, then 1,098 of them deleted: the dead stashed tweets outnumber what the
    log keeps, so it is compacted. A rewrite after that, and a rename that fans out, read
    back exactly the tweets still there, with their latest content."""
    schemas = EXAMPLE.parent.parent / "schemas"
    deleted = {"name": "__deleted", "type": "boolean", "default": False}
    tweet_schema = json.loads((schemas / "tweet.avsc").read_text())
    tweet_schema["fields"].append(deleted)
    view_schema = json.loads((schemas / "tweet_view.avsc").read_text())
    next(f for f in view_schema["fields"] if f["name"] == "tweet")["type"][1]["fields"].append(
        deleted
    )
    (tmp_path / "tweet.avsc").write_text(json.dumps(tweet_schema))
    (tmp_path / "tweet_view.avsc").write_text(json.dumps(view_schema))
    text = EXAMPLE.read_text()
    for name in ("tweet", "tweet_view"):
        text = text.replace(f'"../schemas/{name}.avsc"', f'"{tmp_path}/{name}.avsc"')
    text = text.replace('many_id = "id"', 'many_id = "id"\nmany_deleted_field = "__deleted"')
    pipeline = tmp_path / "deleting.toml"
    pipeline.write_text(text.replace('"../', f'"{EXAMPLE.parent.parent}/'))
    ada = {"id": 1, "name": "ada", "avatar": None, "updated_at": 1}

    def tweet(i: int, t: int, content: str, deleted: bool = False, author: int = 1) -> dict:
        value = {"id": i, "author_id": author, "content": content, "__deleted": deleted}
        return {"key": i, "value": value, "timestamp": t}

    tweets = [tweet(i, 10 + i, f"first {i}") for i in range(1, 1101)]
    tweets += [tweet(i, 2000 + i, "", deleted=True) for i in range(1, 1099)]
    # another author's tweets, so that the rest comes in a batch after the compaction
    tweets += [tweet(i, 3000 + i, "", author=2) for i in range(5000, 5400)]
    tweets.append(tweet(1099, 9000, "rewritten"))
    users = [
        {"key": 1, "value": ada, "timestamp": 1},
        {"key": 1, "value": {**ada, "name": "renamed"}, "timestamp": 9001},
    ]
    result = run(load_pipeline_file(pipeline), tmp_path, users, tweets, broker, max_batch=400)

    fan_out = [
        r for r in result.outputs if r["headers"]["enrichd.source.topic"].startswith("users.")
    ]
    assert {r["key"]: r["value"]["tweet"]["content"] for r in fan_out} == {
        "1099": "rewritten",
        "1100": "first 1100",
    }
    assert len(fan_out) == 2 and not result.dead_letters
    assert sum(r["value"] is None for r in result.outputs) == 1098  # a tombstone per delete


def test_deletes_and_fan_out_cap(broker: Any, spark: Any, tmp_path: Path) -> None:
    text = EXAMPLE.read_text().replace('many_id = "id"', 'many_id = "id"\nmax_many_per_key = 2')
    pipeline = tmp_path / "capped.toml"
    pipeline.write_text(text.replace('"../', f'"{EXAMPLE.parent.parent}/'))
    file = load_pipeline_file(pipeline)
    ada = {"id": 1, "name": "ada", "avatar": None, "updated_at": 1}
    users = [
        {"key": 1, "value": ada, "timestamp": 1},
        {"key": 1, "value": None, "timestamp": 20},  # the user is deleted
    ]
    tweets = [
        {"key": i, "value": {"id": i, "author_id": 1, "content": str(i)}, "timestamp": 1 + i}
        for i in (1, 2, 3)  # the third id for key 1 exceeds the cap of 2
    ] + [{"key": 2, "value": None, "timestamp": 30}]  # a many-side tombstone: unroutable
    result = run(file, tmp_path, users, tweets, broker)

    assert latest_by_key(result.outputs) == {"1": None, "2": None}
    classes = sorted(d["headers"]["enrichd.error.class"] for d in result.dead_letters)
    assert classes == ["FanOutCapExceeded", "UnroutableTombstone"]
    capped = next(
        d for d in result.dead_letters if d["headers"]["enrichd.error.class"] == "FanOutCapExceeded"
    )
    assert capped["key"] == "3" and capped["headers"]["enrichd.source.offset"].isdigit()


def test_replay_cli_rejects_bad_input_with_file_and_line(tmp_path: Path) -> None:
    good = write_jsonl(tmp_path / "users.jsonl", [])
    bad = tmp_path / "tweets.jsonl"
    bad.write_text('{"key": 1, "value": {"id": 1, "content": "no author"}, "timestamp": 1}\n')
    runner = CliRunner()

    unknown_role = runner.invoke(app, ["replay", str(EXAMPLE), "--input", f"users={good}"])
    assert "no input role 'users'" in str(unknown_role.exception)
    assert "one, many" in str(unknown_role.exception)

    mismatch = runner.invoke(
        app, ["replay", str(EXAMPLE), "--input", f"one={good}", "--input", f"many={bad}"]
    )
    assert f"{bad}:1: value does not match the 'many' schema" in str(mismatch.exception)


@pytest.mark.parametrize(
    ("inputs", "message"),
    [
        (["users={good}"], "error: --input users=...: pipeline 'tweet-views' has no input role"),
        (["one={good}", "many={bad}"], "error: {bad}:1: value does not match the 'many' schema"),
    ],
    ids=["unknown role", "line not matching the schema"],
)
def test_replay_command_reports_bad_input_in_one_line_and_exits_1(
    tmp_path: Path, inputs: list[str], message: str
) -> None:
    """What a user sees from the ``daemon`` command itself: one line on stderr, exit code 1,
    before any broker or Spark starts."""
    good = write_jsonl(tmp_path / "users.jsonl", [])
    bad = tmp_path / "tweets.jsonl"
    bad.write_text('{"key": 1, "value": {"id": 1, "content": "no author"}, "timestamp": 1}\n')
    arguments = [a.format(good=good, bad=bad) for a in inputs]
    command = [sys.executable, "-m", "daemon", "replay", str(EXAMPLE)]
    for argument in arguments:
        command += ["--input", argument]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)

    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith(message.format(bad=bad)), lines[0]
    assert done.stdout == ""


def test_state_ttl_forgets_a_key_between_micro_batches(
    broker: Any, spark: Any, tmp_path: Path
) -> None:
    """With a 1 ms state TTL (processing time), the user stored by the first micro-batch has
    expired when the tweet arrives in a later one, so the tweet waits unjoined; the same
    inputs without a TTL join (checked by the other tests)."""
    text = EXAMPLE.read_text().replace('many_id = "id"', 'many_id = "id"\nstate_ttl = "1ms"')
    pipeline = tmp_path / "ttl.toml"
    pipeline.write_text(text.replace('"../', f'"{EXAMPLE.parent.parent}/'))
    ada = {"id": 1, "name": "ada", "avatar": None, "updated_at": 1}
    users = [{"key": 1, "value": ada, "timestamp": 1}]
    tweets = [{"key": 7, "value": {"id": 7, "author_id": 1, "content": "x"}, "timestamp": 2}]
    result = run(load_pipeline_file(pipeline), tmp_path, users, tweets, broker, max_batch=1)
    assert result.batches == 2  # the user; the tweet (its key's end-of-input marker rides free)
    assert result.outputs == []


def test_the_test_kit_runs_the_engines_loop_state_ttl_included(
    broker: Any, spark: Any, tmp_path: Path
) -> None:
    """One interleaving through ``daemon replay`` and through ``JoinerHarness``, cut the same
    way (two records a micro-batch), with a 1 ms state TTL: both forget ada between the two
    micro-batches, so her rename re-emits no tweet of the first (without a TTL it would), and
    both write exactly the same views."""
    from daemon.joiners.comap import CoMap
    from daemon.testing import JoinerHarness, by_key

    text = EXAMPLE.read_text().replace('many_id = "id"', 'many_id = "id"\nstate_ttl = "1ms"')
    pipeline = tmp_path / "ttl.toml"
    pipeline.write_text(text.replace('"../', f'"{EXAMPLE.parent.parent}/'))
    ada = {"id": 1, "name": "ada", "avatar": None, "updated_at": 1}
    users = [
        {"key": 1, "value": ada, "timestamp": 1},
        {"key": 1, "value": {**ada, "name": "ada lovelace", "updated_at": 3}, "timestamp": 3},
    ]
    tweets = [
        {"key": i, "value": {"id": i, "author_id": 1, "content": str(i)}, "timestamp": 2 * i}
        for i in (1, 2)
    ]
    result = run(load_pipeline_file(pipeline), tmp_path, users, tweets, broker, max_batch=2)

    schemas = EXAMPLE.parent.parent / "schemas"
    harness = JoinerHarness(
        CoMap,
        keys={"one": "id", "many": "author_id"},
        options={"many_id": "id", "state_ttl": "1ms"},
        fields={"one": "author", "many": "tweet"},
        schemas={"one": schemas / "user.avsc", "many": schemas / "tweet.avsc"},
        output_schema=schemas / "tweet_view.avsc",
    )
    harness.feed({"one": users[:1], "many": tweets[:1]})
    harness.wait(1)  # processing time passes between micro-batches, as in Spark
    harness.feed({"one": users[1:], "many": tweets[1:]})
    harness.end()

    names = {"1": ["ada"], "2": ["ada lovelace"]}
    engine, kit = by_key(result.outputs), by_key(harness.run.outputs)
    assert {key: [v["author"]["name"] for v in views] for key, views in engine.items()} == names
    assert kit == engine
    assert harness.run.batches == result.batches == 2
    assert harness.run.dead_letters == result.dead_letters == []
