"""The asof joiner through `daemon replay`, the real broker and the real Spark engine.

Scenarios and random interleavings each run in their own key space (consultant name), so a
few replays check them all; outputs are compared per output key, the only order the engine
defines.
"""

from __future__ import annotations

import functools
import io
import json
import random
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from daemon.demos import latest_by_key
from daemon.model.config import PipelineFile, load_pipeline_file
from daemon.replay import ReplayResult, replay
from daemon.testing import by_key
from tests.unit.joiners.test_asof import arrival_order, asof_batch

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "recommendations.toml"
HOUR = 3_600_000
MINUTE = 60_000
T0 = 1_699_999_200_000  # a whole hour (so also a whole minute) in epoch milliseconds
KEYS = {"left": "consultant", "right": "name"}
FIELDS = {"left": "recommendation", "right": "mood"}


def rec(who: str, minutes: float, arrival: int, what: str | None = None) -> dict[str, Any]:
    """A recommendation line made ``minutes`` after T0, reaching Kafka at ``arrival``."""
    made = T0 + int(minutes * MINUTE)
    value = {"consultant": who, "event_time": made, "ingestion_time": arrival}
    what = f"{who}/{minutes:g}" if what is None else what  # unique: also serves as left_id
    return {"key": who, "value": {**value, "recommendation": what}, "timestamp": arrival}


def mood(who: str, minutes: float, arrival: int, what: str) -> dict[str, Any]:
    """A mood line beginning ``minutes`` after T0, reaching Kafka at ``arrival``."""
    made = T0 + int(minutes * MINUTE)
    value = {"name": who, "event_time": made, "ingestion_time": arrival, "mood": what}
    return {"key": who, "value": value, "timestamp": arrival}


def ident(who: str, minutes: float) -> str:
    """The output key of a recommendation without an id field: consultant@event_time."""
    return f"{who}@{T0 + int(minutes * MINUTE)}"


def batch(
    inputs: dict[str, list[dict]], inclusive: bool = False, left_id: str | None = None
) -> dict[str, dict]:
    return asof_batch(
        inputs, inclusive=inclusive, keys=KEYS, time="event_time", fields=FIELDS, left_id=left_id
    )


def moods_of(result: ReplayResult) -> dict[str, list[tuple[str | None, int]]]:
    """Per recommendation: (mood, revision) of each revision, in order."""
    return {
        key: [((v["mood"] or {}).get("mood"), v["revision"]) for v in values]
        for key, values in by_key(result.outputs).items()
    }


def without_revision(latest: dict[str, Any]) -> dict[str, Any]:
    return {
        key: {k: v for k, v in value.items() if k != "revision"} for key, value in latest.items()
    }


def pipeline(tmp: Path, **options: str) -> PipelineFile:
    """The example pipeline with some options replaced or added (its options table is last)."""
    text = EXAMPLE.read_text().replace('"../', f'"{EXAMPLE.parent.parent}/')
    for name, value in options.items():
        start = text.find(f"\n{name} = ")
        if start < 0:
            text = text.rstrip("\n") + f"\n{name} = {value}\n"
            continue
        end = text.index("\n", start + 1)
        text = text[:start] + f"\n{name} = {value}" + text[end:]
    path = tmp / f"pipeline-{len(list(tmp.glob('*.toml')))}.toml"
    path.write_text(text)
    return load_pipeline_file(path)


def run(file: PipelineFile, tmp: Path, inputs: dict, broker: Any, **kw: Any) -> ReplayResult:
    files = {}
    for role, lines in inputs.items():
        path = tmp / f"{role}.jsonl"
        path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
        files[role] = path
    return replay(file, files, bootstrap_servers=broker.bootstrap_servers, **kw)


def random_space(
    who: str, rng: random.Random, first_arrival: int, stride: int = 1
) -> dict[str, list[dict]]:
    """Up to 7 recommendations and 7 moods of one consultant, event times within 8 minutes (so
    within the 10-minute horizon), arriving in a random order, ``stride`` ms apart."""
    events = [("left", rng.randrange(0, 25) * 20 / 60) for _ in range(rng.randrange(1, 8))]
    events += [("right", rng.randrange(0, 25) * 20 / 60) for _ in range(rng.randrange(0, 8))]
    rng.shuffle(events)
    inputs: dict[str, list[dict]] = {"left": [], "right": []}
    for n, (role, minutes) in enumerate(events):
        arrival = first_arrival + n * stride
        make = rec if role == "left" else mood
        inputs[role].append(make(who, minutes, arrival, f"{who}-{n}"))
    return inputs


@pytest.fixture(scope="module")
def example(broker: Any) -> PipelineFile:
    return load_pipeline_file(EXAMPLE)


def test_random_arrival_orders_end_at_the_batch_asof_join_for_any_max_batch(
    example: PipelineFile, broker: Any, spark: Any, tmp_path: Path
) -> None:
    """24 consultants, each with its own random arrival order of out-of-order moods and
    recommendations, in one replay; run whole and in four micro-batches. The consultants'
    arrivals take turns, so every micro-batch boundary cuts through every consultant's."""
    rng = random.Random(20261122)  # noqa: S311 - reproducible test data, not security
    inputs: dict[str, list[dict]] = {"left": [], "right": []}
    for space in range(24):
        part = random_space(f"c{space}", rng, T0 + space, stride=24)
        inputs["left"] += part["left"]
        inputs["right"] += part["right"]
    quarter = -(-sum(map(len, inputs.values())) // 4)

    whole = run(example, tmp_path, inputs, broker)
    fourths = run(example, tmp_path, inputs, broker, max_batch=quarter)

    assert (whole.batches, fourths.batches) == (1, 4)
    assert by_key(fourths.outputs) == by_key(whole.outputs)
    assert without_revision(latest_by_key(whole.outputs)) == batch(inputs)
    assert whole.dead_letters == []
    # Revisions count up from 0, each one a changed answer; the first answer used only what
    # had arrived before the recommendation.
    ordered = arrival_order(inputs)
    for key, history in by_key(whole.outputs).items():
        assert [h["revision"] for h in history] == list(range(len(history)))
        answers = [(h["recommendation"], h["mood"]) for h in history]
        assert all(a != b for a, b in zip(answers, answers[1:], strict=False))
        position = next(
            i
            for i, (role, line) in enumerate(ordered)
            if role == "left" and line["value"] == history[0]["recommendation"]
        )
        known = [line for role, line in ordered[:position] if role == "right"]
        first = batch({"left": [ordered[position][1]], "right": known})
        assert {**first[key], "revision": 0} == history[0]
    # Some answers really were corrected: late moods are in the sample.
    assert any(len(history) > 1 for history in by_key(whole.outputs).values())


def scenario_inputs() -> dict[str, list[dict]]:
    """Hand-made scenarios, one consultant each; arrivals are distinct Kafka timestamps."""
    a = T0 + 10_000  # arrivals: a + i, each consultant its own range
    return {
        "right": [
            # late: calm from 0:00; grumpy from 0:03 arrives after 0:05 was answered; glad
            # from 0:05:50 arrives after 0:06:10 was answered.
            mood("late", 0, a + 1, "calm"),
            mood("late", 3, a + 3, "grumpy"),
            mood("late", 5 + 50 / 60, a + 6, "glad"),
            # tie: calm at 0:00 exactly when a recommendation is made; two moods at 0:02.
            mood("tie", 0, a + 101, "calm"),
            mood("tie", 2, a + 103, "first"),
            mood("tie", 2, a + 104, "second"),
            # evict: a mood for 0:00:30 arrives after 0:01's recommendation left the horizon;
            # then a mood older than the retention (1h behind stream time 0:20).
            mood("evict", 0, a + 201, "calm"),
            mood("evict", 0.5, a + 204, "grumpy"),
            mood("evict", -45, a + 206, "ancient"),
            # arrival: grumpy from 0:05 arrives late; the next record arrives an hour later.
            mood("arrival", 0, a + 301, "calm"),
            mood("arrival", 5, a + 303, "grumpy"),
        ],
        "left": [
            rec("late", 5, a + 2),
            rec("late", 5.5, a + 4),
            rec("late", 6 + 10 / 60, a + 5),
            rec("tie", 0, a + 102),
            rec("tie", 2.5, a + 105),
            rec("evict", 1, a + 202),
            rec("evict", 20, a + 203),
            rec("evict", -50, a + 205),  # beyond the retention: a dead letter
            rec("evict", -30, a + 207),  # within retention, past the horizon: answered once
            rec("arrival", 10, a + 302),
            rec("arrival", 11, a + HOUR + 5),
        ],
    }


def test_scenarios_strict_event_time_and_inclusive_processing_time(
    example: PipelineFile, broker: Any, spark: Any, tmp_path: Path
) -> None:
    inputs = scenario_inputs()
    # Five records per micro-batch (five micro-batches): late's glad mood comes in the second,
    # after the 0:06:10 recommendation it corrects was answered in the first.
    strict = run(example, tmp_path, inputs, broker, max_batch=5)
    # Processing-time re-joins every hour of Kafka timestamps; the real clock's hourly
    # wake-ups cannot fire within a replay. Retention and horizon long enough to keep all.
    # Recommendations are identified by a field (its text here) instead of key@time.
    inclusive = run(
        pipeline(
            tmp_path,
            left_id='"recommendation"',
            inclusive="true",
            rejoin_on='"processing_time"',
            rejoin_interval='"1h"',
            history_retention='"1d"',
            rejoin_horizon='"1d"',
        ),
        tmp_path,
        inputs,
        broker,
        max_batch=5,
    )
    assert strict.batches == inclusive.batches == 5
    s, by_id = moods_of(strict), moods_of(inclusive)
    # Keyed by left_id; re-keyed as consultant@event_time to compare with the strict run.
    as_key = {
        line["value"]["recommendation"]: f"{line['key']}@{line['value']['event_time']}"
        for line in inputs["left"]
    }
    assert set(by_id) == set(as_key)
    i = {as_key[name]: history for name, history in by_id.items()}

    # Out-of-order moods: an immediate answer, then a correction at the next re-join (stream
    # time crossing a minute) or at the end of input; 0:05:30 never changes, so no revision.
    assert s[ident("late", 5)] == [("calm", 0), ("grumpy", 1)]
    assert s[ident("late", 5.5)] == [("grumpy", 0)]
    assert s[ident("late", 6 + 10 / 60)] == [("grumpy", 0), ("glad", 1)]
    assert i[ident("late", 5)] == s[ident("late", 5)]

    # Equal times: strictly before by default, at-or-before when inclusive; of two moods at
    # the same time the later arrival counts.
    assert s[ident("tie", 0)] == [(None, 0)]
    assert i[ident("tie", 0)] == [("calm", 0)]
    assert s[ident("tie", 2.5)] == i[ident("tie", 2.5)] == [("second", 0)]

    # Eviction: 0:01 left state when stream time reached 0:20, so the late 0:00:30 mood no
    # longer revises it (with a one-day horizon it does); 0:20 is corrected at the end.
    assert s[ident("evict", 1)] == [("calm", 0)]
    assert i[ident("evict", 1)] == [("calm", 0), ("grumpy", 1)]
    assert s[ident("evict", 20)] == [("calm", 0), ("grumpy", 1)]
    assert s[ident("evict", -30)] == [(None, 0)]
    # Beyond the 1h retention behind stream time 0:20: dead letters, with the reason.
    late = sorted(
        (d["headers"]["enrichd.error.class"], d["headers"]["enrichd.source.topic"].split(".")[0])
        for d in strict.dead_letters
    )
    assert late == [("LateRecord", "moods"), ("LateRecord", "recommendations")]
    assert all(
        "history_retention" in d["headers"]["enrichd.error.message"] for d in strict.dead_letters
    )
    assert ident("evict", -50) not in s
    assert inclusive.dead_letters == []

    # Processing time: 0:10 is corrected when a record's Kafka timestamp crosses the hour,
    # caused by that record (a correction at the end of input has no source record).
    assert i[ident("arrival", 10)] == [("calm", 0), ("grumpy", 1)]
    correction = [r for r in inclusive.outputs if r["key"] == "arrival/10"][-1]
    assert correction["headers"]["enrichd.source.topic"].startswith("recommendations")

    # Where nothing was late or evicted, the latest revision is the batch as-of join.
    for result, flag, left_id in ((strict, False, None), (inclusive, True, "recommendation")):
        expected = batch(inputs, inclusive=flag, left_id=left_id)
        got = without_revision(latest_by_key(result.outputs))
        for key in ("late", "tie", "arrival"):
            mine = {k for k in expected if k.startswith((f"{key}@", f"{key}/"))}
            assert mine and {k: got[k] for k in mine} == {k: expected[k] for k in mine}


def test_demo_shows_an_early_answer_and_its_correction(
    broker: Any, spark: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import daemon.replay
    from daemon.demos import DEMOS
    from daemon.demos.asof import show

    # The demo starts its own embedded broker; here it uses the session's.
    monkeypatch.setattr(
        daemon.replay,
        "replay",
        functools.partial(replay, bootstrap_servers=broker.bootstrap_servers),
    )
    out = io.StringIO()
    show(Console(file=out, width=200))

    assert "asof" in DEMOS
    rows = [line for line in out.getvalue().splitlines() if "sell everything" in line]
    assert len(rows) == 3  # two revisions, then the current answer
    assert "calm" in rows[0] and "at once" in rows[0]
    assert "grumpy" in rows[1] and "re-join (recommendations)" in rows[1]
    assert "grumpy" in rows[2]
