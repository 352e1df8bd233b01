"""``lookup`` with ``versioned``, ``grace``, ``revisions`` and ``bootstrap``, in plain Python.

Clicks carry when they happened (``at``) and region changes when they take effect
(``since``); the Kafka timestamp is when a record arrived, so a test can deliver a region
change after the clicks it concerns. The rules are Kafka Streams' for a stream-table join
against a versioned table (KIP-889, KIP-914: the version valid at the stream record's time, a
tombstone ends a version) with its stream-side grace period (KIP-923), plus revisions as
``asof`` makes them. The hypothesis tests check the final answer per click against a batch
as-of join written here independently of the joiner.
"""

from __future__ import annotations

import doctest
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

import daemon.joiners.lookup as lookup_module
from daemon.errors import ConfigError
from daemon.joiners.aggregate import RETRACTIONS, Aggregate
from daemon.joiners.lookup import Lookup, LookupOptions, VersionedState
from daemon.plugin.joiner import JoinerContext
from daemon.testing import JoinerHarness, JoinerRun, by_key, run_joiner

SCHEMAS = Path(__file__).resolve().parents[3] / "schemas"
KEYS = {"stream": "user", "table": "user"}
TIMES = {"stream": "at", "table": "since"}
FIELDS = {"stream": "click", "table": "region"}
INPUT_SCHEMAS = {"stream": SCHEMAS / "timed_click.avsc", "table": SCHEMAS / "region_change.avsc"}
VERSIONED = {"versioned": True, "revisions": True}
ABSENT = "absent"
"""A click's answer in inner mode when nothing (or a tombstone) is its latest output."""


def click(cid: str, user: str, at: int, arrival: int, clicks: int = 1) -> dict[str, Any]:
    """A click keyed in Kafka by its id, made at ``at``, reaching Kafka at ``arrival``."""
    value = {"id": cid, "user": user, "clicks": clicks, "at": at}
    return {"key": cid, "value": value, "timestamp": arrival}


def change(user: str, region: str | None, since: int, arrival: int) -> dict[str, Any]:
    """A region valid from ``since``, reaching Kafka at ``arrival``; None: a tombstone, whose
    event time is its Kafka timestamp (it has no fields)."""
    value = None if region is None else {"user": user, "region": region, "since": since}
    return {"key": user, "value": value, "timestamp": arrival}


def lookup(clicks: list[dict[str, Any]], changes: list[dict[str, Any]], **kw: Any) -> JoinerRun:
    """Run the lookup; its output schema has ``revision`` when the options revise."""
    options = kw.pop("options", VERSIONED)
    return run_joiner(
        Lookup,
        {"stream": clicks, "table": changes},
        keys=KEYS,
        times=TIMES,
        fields=FIELDS,
        options=options,
        schemas=INPUT_SCHEMAS,
        output_schema=SCHEMAS / "revised_click.avsc" if options.get("revisions") else None,
        **kw,
    )


def regions(run: JoinerRun) -> dict[str, str | None]:
    """Each click id's region (None: a null table side), for runs without revisions."""
    found = {}
    for out in run.outputs:
        assert isinstance(out.key, bytes) and out.value is not None
        found[out.key.decode()] = (out.value["region"] or {}).get("region")
    return found


def answers(run: JoinerRun) -> dict[str, list[tuple[str | None, int | None]]]:
    """Per click id, each main-output record as (region, revision); (None, None): tombstone."""
    return {
        key: [
            (None, None)
            if value is None
            else ((value["region"] or {}).get("region"), value["revision"])
            for value in values
        ]
        for key, values in by_key(o for o in run.outputs if o.output is None).items()
    }


def harness(**options: Any) -> JoinerHarness:
    return JoinerHarness(
        Lookup,
        keys=KEYS,
        times=TIMES,
        fields=FIELDS,
        options={"versioned": True, **options},
        schemas=INPUT_SCHEMAS,
    )


def test_docstring_example_runs() -> None:
    assert doctest.testmod(lookup_module).failed == 0


def test_a_click_joins_the_version_valid_when_it_happened_not_the_latest() -> None:
    # Both changes are in, each in a micro-batch of its own, before the click arrives; the
    # click happened between them.
    clicks = [click("c1", "ada", 20, 3)]
    changes = [change("ada", "eu", 10, 1), change("ada", "us", 30, 2)]
    assert regions(lookup(clicks, changes, options={"versioned": True}, batch_size=1)) == {
        "c1": "eu"
    }
    # Without versioned, the table is its latest value: us, which applied a batch earlier.
    assert regions(lookup(clicks, changes, options={}, batch_size=1)) == {"c1": "us"}


def test_a_version_at_the_clicks_own_time_counts_and_of_two_the_last_to_arrive() -> None:
    run = lookup(
        [click("c1", "ada", 20, 4)],
        [change("ada", "eu", 20, 1), change("ada", "us", 20, 2), change("ada", "apac", 21, 3)],
        options={"versioned": True},
    )
    assert regions(run) == {"c1": "us"}


def test_a_tombstone_ends_a_version() -> None:
    # ada is in eu from 10; a tombstone arriving at 15 (its event time) forgets her; us from 30.
    changes = [change("ada", "eu", 10, 1), change("ada", None, 15, 15), change("ada", "us", 30, 30)]
    clicks = [click("c1", "ada", 12, 20), click("c2", "ada", 16, 21), click("c3", "ada", 31, 32)]
    inner = lookup(clicks, changes, options={"versioned": True})
    assert regions(inner) == {"c1": "eu", "c3": "us"}
    default = {"user": "", "region": "UNKNOWN", "since": 0}
    left = lookup(clicks, changes, options={"versioned": True, "mode": "left", "default": default})
    assert regions(left) == {"c1": "eu", "c2": "UNKNOWN", "c3": "us"}
    assert left.metrics == {"matched": 2, "unmatched": 1}


def test_a_row_late_within_the_grace_is_joined_at_once() -> None:
    # The us change (valid from 10) arrives at 14, after the click of 12 that needs it.
    clicks = [click("c1", "ada", 12, 12), click("c2", "ada", 18, 18)]
    changes = [change("ada", "eu", 1, 1), change("ada", "us", 10, 14)]
    without = lookup(clicks, changes, options={"versioned": True})
    assert regions(without) == {"c1": "eu", "c2": "us"}  # c1 answered before the row came
    # With a grace of 5 ms, c1 waits until ada's stream time reaches 17 (the click at 18).
    graced = lookup(clicks, changes, options={**VERSIONED, "grace": "5ms"})
    assert answers(graced) == {"c1": [("us", 0)], "c2": [("us", 0)]}
    assert graced.metrics == {"matched": 2}  # no revision: the first answer was right


def test_held_clicks_go_out_when_the_key_is_quiet_and_at_the_end() -> None:
    run = harness(grace="1s", idle_timeout="10s")
    run.feed({"stream": [click("c1", "ada", 1000, 1000)], "table": [change("ada", "eu", 1, 1)]})
    assert run.run.outputs == []  # held: ada's stream time is 1000, not yet 2000
    run.wait(9_999)
    assert run.run.outputs == []
    run.wait(1)  # quiet for the idle timeout: stream time moves on by it
    assert [o.key for o in run.run.outputs] == [b"c1"]
    run.feed({"stream": [click("c2", "ada", 20_000, 20_001)]})
    run.end()  # the end of input lets every held click out
    assert [o.key for o in run.run.outputs] == [b"c1", b"c2"]
    state = run.run.states["ada"]
    assert isinstance(state, VersionedState) and state.held == [] and state.kept == []


def test_a_row_after_the_grace_revises_the_first_answer() -> None:
    clicks = [click("c1", "ada", 12, 12), click("c2", "ada", 30, 30)]
    changes = [change("ada", "eu", 1, 1), change("ada", "us", 10, 31)]
    run = lookup(clicks, changes, options={**VERSIONED, "grace": "5ms"})
    assert answers(run) == {"c1": [("eu", 0), ("us", 1)], "c2": [("us", 0)]}
    revision = [o for o in run.outputs if o.key == b"c1"][-1]
    # A revision carries the provenance and timestamp of the row that caused it.
    assert revision.source is not None and revision.source.role == "table"
    assert revision.source.timestamp == 31
    assert run.metrics == {"matched": 2, "revisions": 1}
    # Without an aggregation stage, nothing is retracted.
    assert all(o.output is None for o in run.outputs)


def test_key_form_revises_each_stream_record_of_a_shared_kafka_key() -> None:
    # Clicks keyed in Kafka by their user, the join key: the two clicks share an output key,
    # and each is still revised on its own (a compacted topic would keep only the last).
    clicks = [
        {**click("c1", "ada", 12, 12), "key": "ada"},
        {**click("c2", "ada", 14, 14), "key": "ada"},
        {**click("c3", "ada", 30, 30), "key": "ada"},
    ]
    changes = [change("ada", "eu", 1, 1), change("ada", "us", 13, 31)]
    run = lookup(clicks, changes)
    assert [
        (o.key, o.value["click"]["id"], o.value["region"]["region"], o.value["revision"])  # type: ignore[index]
        for o in run.outputs
    ] == [
        (b"ada", "c1", "eu", 0),
        (b"ada", "c2", "eu", 0),
        (b"ada", "c3", "eu", 0),
        # us is valid from 13, and arrives last: c2 (14) and c3 (30) are revised, c1 not.
        (b"ada", "c2", "us", 1),
        (b"ada", "c3", "us", 1),
    ]


def test_an_unchanged_answer_is_not_revised() -> None:
    # The same row again, late: the version it makes equals the one the click joined.
    clicks = [click("c1", "ada", 12, 12)]
    changes = [change("ada", "eu", 1, 1), change("ada", "eu", 1, 20)]
    run = lookup(clicks, changes)
    assert answers(run) == {"c1": [("eu", 0)]}
    assert "revisions" not in run.metrics


def test_past_the_retention_rows_and_clicks_are_late_and_kept_clicks_are_not_revised() -> None:
    clicks = [
        click("c1", "ada", 100, 100),
        click("c2", "ada", 1200, 1200),  # stream time 1200: the retention begins at 200
        click("c0", "ada", 150, 1201),  # too old to join: its history is gone
    ]
    changes = [
        change("ada", "eu", 1, 1),
        change("ada", "us", 50, 1300),  # would change c1, which is past the retention
        change("ada", "apac", 900, 1301),  # within it: revises c2
    ]
    for batch_size in (None, 1):
        run = lookup(
            clicks, changes, options={**VERSIONED, "history_retention": "1s"}, batch_size=batch_size
        )
        assert answers(run) == {"c1": [("eu", 0)], "c2": [("eu", 0), ("apac", 1)]}
        late = sorted((d.record.role, d.kind) for d in run.dead_letters)
        assert late == [("stream", "LateRecord"), ("table", "LateRecord")]
        assert all("history_retention 1000 ms" in d.reason for d in run.dead_letters)
        assert run.metrics["late_stream"] == run.metrics["late_table"] == 1


def test_history_is_bounded_by_the_retention() -> None:
    changes = [change("ada", f"r{n}", n * 100, n * 100) for n in range(1, 40)]
    clicks = [click(f"c{n}", "ada", n * 100 + 1, n * 100 + 1) for n in range(1, 40)]
    run = lookup(clicks, changes, options={**VERSIONED, "history_retention": "500ms"})
    state = run.states["ada"]
    # Versions of the last 500 ms of stream time (3901), and the one current at its start.
    assert state.times == [3400, 3500, 3600, 3700, 3800, 3900]
    assert state.kept == []  # cleared at the end of input
    assert answers(run) == {f"c{n}": [(f"r{n}", 0)] for n in range(1, 40)}


def test_inner_mode_answers_late_and_withdraws_with_a_tombstone() -> None:
    # c1 had no region when it came: nothing out. Its region, valid from 10, arrives at 20:
    # its first answer, numbered 0, comes out of that revision.
    late = lookup([click("c1", "ada", 12, 12)], [change("ada", "eu", 10, 20)])
    assert answers(late) == {"c1": [("eu", 0)]}
    # A tombstone of c2's own time, arriving right after it (at equal timestamps a click
    # goes first), ends ada's region at 14: c2's answer is withdrawn with a tombstone.
    changes = [change("ada", "eu", 10, 10), change("ada", None, 14, 14)]
    withdrawn = lookup([click("c2", "ada", 14, 14)], changes)
    assert answers(withdrawn) == {"c2": [("eu", 0), (None, None)]}
    assert withdrawn.metrics == {"matched": 1, "revisions": 1}
    # Left mode shows the withdrawal as a null region instead.
    left = lookup([click("c2", "ada", 14, 14)], changes, options={**VERSIONED, "mode": "left"})
    assert answers(left) == {"c2": [("eu", 0), (None, 1)]}


def test_options_are_checked() -> None:
    with pytest.raises(ValidationError, match="`grace` needs the table's history"):
        LookupOptions.model_validate({"grace": "1s"})
    with pytest.raises(ValidationError, match="`revisions` needs the table's history"):
        LookupOptions.model_validate({"revisions": True})
    with pytest.raises(ValidationError, match="`history_retention` needs the table's history"):
        LookupOptions.model_validate({"history_retention": "1h"})
    with pytest.raises(ValidationError, match="must not exceed history_retention"):
        LookupOptions.model_validate({"versioned": True, "grace": "2h"})
    LookupOptions.model_validate({"bootstrap": True})  # works with and without versioned
    context = JoinerContext(pipeline="p", fields=FIELDS, output_fields=("click", "region"))
    with pytest.raises(ConfigError, match="field `revision`"):
        Lookup(LookupOptions.model_validate(VERSIONED), context)


def test_the_apply_order_wake_ups_and_bootstrap_follow_the_options() -> None:
    context = JoinerContext(pipeline="p", fields=FIELDS)
    plain = Lookup(LookupOptions(), context)
    assert (plain.order, plain.wakes_up(), plain.bootstrap_roles()) == (
        "event_time",
        False,
        frozenset(),
    )
    versioned = Lookup(LookupOptions.model_validate({"versioned": True}), context)
    assert (versioned.order, versioned.wakes_up()) == ("arrival", False)
    graced = Lookup(LookupOptions.model_validate({"versioned": True, "grace": "1s"}), context)
    assert graced.wakes_up()
    booted = Lookup(LookupOptions.model_validate({"bootstrap": True}), context)
    assert booted.bootstrap_roles() == frozenset({"table"})


def test_bootstrap_reads_the_table_first_in_the_test_kit() -> None:
    # Every region reached Kafka after every click; bootstrap reads them first anyway.
    clicks = [click("c1", "ada", 5, 1), click("c2", "bob", 6, 2)]
    changes = [change("ada", "eu", 1, 10), change("bob", "us", 2, 11)]
    plain = lookup(clicks, changes, options={}, batch_size=1)
    assert plain.outputs == []  # inner: no region known when the clicks were applied
    for options in ({"bootstrap": True}, {"bootstrap": True, "versioned": True}):
        booted = lookup(clicks, changes, options=options, batch_size=1)
        assert regions(booted) == {"c1": "eu", "c2": "us"}, options
        assert booted.batches == 4  # the two regions first, then the two clicks


# -- the aggregation stage fed by revisions --------------------------------------------------

SUM_CLICKS = {"group_by": "region.region", "op": "sum", "field": "click.clicks"}


def totals_of(enriched: JoinerRun) -> JoinerRun:
    """Run the aggregation over a lookup run's outputs and retractions, as the engine does:
    each record with its Kafka timestamp (its source's), retractions as role retracted."""
    inputs: dict[str, list[dict[str, Any]]] = {"joined": [], "retracted": []}
    for out in enriched.outputs:
        role = "retracted" if out.output == RETRACTIONS else "joined"
        assert out.source is not None and isinstance(out.key, bytes)
        line = {"key": out.key.decode(), "value": out.value, "timestamp": out.source.timestamp}
        inputs[role].append(line)
    return run_joiner(
        Aggregate,
        inputs,
        keys={"joined": "region.region", "retracted": "region.region"},
        options=SUM_CLICKS,
    )


def test_a_revision_moves_its_click_between_totals_without_counting_it_twice() -> None:
    clicks = [click("c1", "ada", 12, 12, clicks=3), click("c2", "ada", 30, 30, clicks=4)]
    changes = [change("ada", "eu", 1, 1), change("ada", "us", 10, 31)]
    run = lookup(clicks, changes, options={**VERSIONED, "aggregate": SUM_CLICKS})
    retractions = [o for o in run.outputs if o.output == RETRACTIONS]
    assert [(o.key, o.value["region"]["region"], o.value["revision"]) for o in retractions] == [  # type: ignore[index]
        (b"c1", "eu", 0),
        (b"c2", "eu", 0),
    ]
    totals = totals_of(run)
    # Both clicks were joined in eu; the us row, valid from 10, moves both: each eu answer
    # is taken back from eu as its revision adds it to us.
    assert {k: [v["clicks"] for v in vs] for k, vs in by_key(totals.outputs).items()} == {
        "eu": [3, 7, 4, 0],
        "us": [3, 7],
    }


def test_a_retraction_of_a_refused_answer_is_refused_alike() -> None:
    # Left mode without a default: the first answer has no region, so the totals stage has
    # no group for it (MissingKey); its retraction has none either, and the totals stay even.
    clicks = [click("c1", "ada", 12, 12, clicks=3)]
    changes = [change("ada", "us", 10, 31)]
    run = lookup(clicks, changes, options={**VERSIONED, "mode": "left", "aggregate": SUM_CLICKS})
    totals = totals_of(run)
    assert [d.kind for d in totals.dead_letters] == ["MissingKey", "MissingKey"]
    assert [o.value for o in totals.outputs] == [{"region": "us", "clicks": 3}]


# -- against a batch as-of join ---------------------------------------------------------------


def batch_asof(
    clicks: list[dict[str, Any]], changes: list[dict[str, Any]], mode: str
) -> dict[str, Any]:
    """Each click's region by the batch as-of join over all input, written independently.

    Per click: of its user's changes at or before the click's time (a change's time is
    ``since``, a tombstone's its Kafka timestamp), the latest, of equal times the last to
    arrive (Kafka timestamp, then list order); a tombstone means no region. Inner mode: no
    region, no answer (:data:`ABSENT`); left mode: None.
    """
    arrived = [
        row for _, row in sorted(enumerate(changes), key=lambda p: (p[1]["timestamp"], p[0]))
    ]
    expected: dict[str, Any] = {}
    for line in clicks:
        at, user = line["value"]["at"], line["value"]["user"]
        best: tuple[int, int] | None = None
        region: str | None = None
        for position, row in enumerate(arrived):
            since = row["timestamp"] if row["value"] is None else row["value"]["since"]
            if row["key"] != user or since > at:
                continue
            if best is None or (since, position) > best:
                best = (since, position)
                region = None if row["value"] is None else row["value"]["region"]
        expected[line["key"]] = ABSENT if region is None and mode == "inner" else region
    return expected


def final_answers(run: JoinerRun) -> dict[str, Any]:
    """Each click's latest main-output answer (a tombstone: ABSENT)."""
    latest: dict[str, Any] = {}
    for out in run.outputs:
        if out.output is None:
            assert isinstance(out.key, bytes)
            latest[out.key.decode()] = (
                ABSENT if out.value is None else (out.value["region"] or {}).get("region")
            )
    return latest


def per_click(run: JoinerRun) -> dict[Any, list[tuple[str | None, Any]]]:
    """Every output per click id in order, with the output it went to."""
    seen: dict[Any, list[tuple[str | None, Any]]] = {}
    for out in run.outputs:
        seen.setdefault(out.key, []).append((out.output, out.value))
    return seen


@st.composite
def histories(draw: st.DrawFn, max_lateness: int) -> tuple[list[dict[str, Any]], ...]:
    """Clicks and region changes of two users, in a few milliseconds so that times tie
    often, each arriving on time or up to ``max_lateness`` after its event time, with
    tombstones among the changes."""
    clicks: list[dict[str, Any]] = []
    changes: list[dict[str, Any]] = []
    lateness = st.one_of(st.just(0), st.integers(0, max_lateness))
    for n in range(draw(st.integers(1, 16))):
        user = draw(st.sampled_from(["ada", "bob"]))
        at = draw(st.integers(1, 12))
        arrival = at + draw(lateness)
        if draw(st.booleans()):
            clicks.append(click(f"c{n}", user, at, arrival))
        elif draw(st.integers(0, 3)) == 0:
            changes.append(change(user, None, arrival, arrival))
        else:
            region = draw(st.sampled_from(["eu", "us", "apac"]))
            changes.append(change(user, region, at, arrival))
    return clicks, changes


@settings(max_examples=150, deadline=None)
@given(
    inputs=histories(max_lateness=10),
    mode=st.sampled_from(["inner", "left"]),
    grace=st.sampled_from(["0ms", "3ms", "10ms"]),
    batch_size=st.integers(1, 6),
)
def test_with_revisions_the_final_answer_is_the_batch_asof_join(
    inputs: tuple[list[dict[str, Any]], ...], mode: str, grace: str, batch_size: int
) -> None:
    clicks, changes = inputs
    options = {**VERSIONED, "mode": mode, "grace": grace, "aggregate": SUM_CLICKS}
    whole = lookup(clicks, changes, options=options)
    batched = lookup(clicks, changes, options=options, batch_size=batch_size)
    # Every output, revisions and retractions included, is the same however the input is cut.
    assert per_click(batched) == per_click(whole)
    expected = batch_asof(clicks, changes, mode)
    got = final_answers(whole)
    assert {cid: got.get(cid, ABSENT) for cid in expected} == expected
    assert whole.dead_letters == []
    # Revisions count up from 0 (in inner mode, a first answer out of a revision is 0).
    for values in by_key(o for o in whole.outputs if o.output is None).values():
        numbers = [v["revision"] for v in values if v is not None]
        assert numbers == sorted(set(numbers)) and (not numbers or numbers[0] == 0)
    # The totals count each click once, in the region of its latest answer.
    totals = totals_of(whole)
    final: dict[str, int] = {}
    for out in totals.outputs:
        assert out.value is not None
        final[out.value["region"]] = out.value["clicks"]
    counted: dict[str, int] = {}
    for region in expected.values():
        if region not in (None, ABSENT):
            counted[region] = counted.get(region, 0) + 1
    assert {r: n for r, n in final.items() if n} == counted


@settings(max_examples=100, deadline=None)
@given(inputs=histories(max_lateness=4), batch_size=st.integers(1, 6))
def test_a_grace_longer_than_the_lateness_gives_the_batch_answer_at_once(
    inputs: tuple[list[dict[str, Any]], ...], batch_size: int
) -> None:
    """KIP-923's promise: rows less late than the grace are joined as if on time.

    (Strictly less: a record that moves the key's stream time to the click's time plus the
    grace, arriving together with a row as late as the grace, can go first and let the
    click out.)
    """
    clicks, changes = inputs
    # No tombstones here: a tombstone's event time is its arrival, never late.
    changes = [line for line in changes if line["value"] is not None]
    options = {**VERSIONED, "mode": "left", "grace": "5ms"}
    run = lookup(clicks, changes, options=options, batch_size=batch_size)
    assert run.metrics.get("revisions", 0) == 0
    assert final_answers(run) == batch_asof(clicks, changes, "left")


def test_an_expired_key_lets_its_held_clicks_out_first_and_starts_afresh() -> None:
    """Expiry flushes what the grace holds (nothing is lost), drops the kept answers (a late
    row no longer revises them) and the history: later clicks see no row, as after a
    tombstone, and nothing is late against the stream time the key had."""
    run = harness(grace="1h", idle_timeout="1h", revisions=True, mode="left", state_ttl="1s")
    run.feed({"table": [change("ada", "eu", 1, 1)], "stream": [click("c1", "ada", 1000, 1000)]})
    assert run.run.outputs == []  # held: the grace is an hour
    run.wait(1_000)  # the key has not changed for its TTL: expired, its held click let out
    assert [(o.key, o.value["region"]["region"]) for o in run.run.outputs] == [(b"c1", "eu")]
    assert run.run.states == {} and run.run.metrics["expired"] == 1
    run.feed({"table": [change("ada", "us", 1, 2)]})  # would revise c1 had it been kept
    run.feed({"stream": [click("c2", "ada", 5, 3)]})  # older than c1: not late, afresh
    run.end()
    assert [(o.key, o.value["region"]["region"], o.value["revision"]) for o in run.run.outputs] == [
        (b"c1", "eu", 0),
        (b"c2", "us", 0),
    ]
