"""The lookup joiner and its aggregation stage, rule by rule, in plain Python (no broker).

Kafka Streams documents the same rules for its KStream-KTable join: only stream records
trigger a join, each against the table's current value; a table update emits nothing and does
not update earlier results; a stream record whose key has no table value is dropped by
``join`` and joined with null by ``leftJoin``; a table tombstone deletes the key. Its
KStream-GlobalKTable join looks the table up by a key the stream record maps to, which is
what ``key = "user"`` on a click keyed by click id does here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from daemon.joiners.aggregate import Aggregate, AggregateOptions
from daemon.joiners.lookup import Lookup, LookupOptions
from daemon.plugin.joiner import JoinerContext
from daemon.testing import JoinerHarness, JoinerRun, by_key, run_joiner

SCHEMAS = Path(__file__).resolve().parents[3] / "schemas"
KEYS = {"stream": "user", "table": "user"}
FIELDS = {"stream": "click", "table": "region"}
SUM_CLICKS = {"group_by": "region.region", "op": "sum", "field": "click.clicks"}


def click(cid: str, user: str, clicks: int, t: int) -> dict[str, Any]:
    """A click keyed in Kafka by its own id; its join key is the user (a foreign key)."""
    return {"key": cid, "value": {"id": cid, "user": user, "clicks": clicks}, "timestamp": t}


def region(user: str, name: str | None, t: int) -> dict[str, Any]:
    """A user's region (None: a tombstone), keyed in Kafka by the user."""
    value = None if name is None else {"user": user, "region": name}
    return {"key": user, "value": value, "timestamp": t}


def lookup(clicks: list[dict[str, Any]], regions: list[dict[str, Any]], **kw: Any) -> JoinerRun:
    options = kw.pop("options", {})
    return run_joiner(
        Lookup,
        {"stream": clicks, "table": regions},
        keys=KEYS,
        fields=FIELDS,
        options=options,
        schemas={"stream": SCHEMAS / "click.avsc", "table": SCHEMAS / "user_region.avsc"},
        output_schema=SCHEMAS / "enriched_click.avsc",
        **kw,
    )


def regions_of(run: JoinerRun) -> dict[str, Any]:
    """Each click id's joined region name (None: joined with a null table side)."""
    return {
        str(cid): [None if v["region"] is None else v["region"]["region"] for v in values]
        for cid, values in by_key(run.outputs).items()
    }


def test_inner_mode_drops_a_stream_record_before_any_table_value() -> None:
    run = lookup([click("c1", "ada", 1, 1), click("c2", "ada", 1, 3)], [region("ada", "eu", 2)])
    assert regions_of(run) == {"c2": ["eu"]}
    assert run.dead_letters == [] and run.metrics == {"unmatched": 1, "matched": 1}


def test_left_mode_joins_null_before_any_table_value() -> None:
    run = lookup(
        [click("c1", "ada", 1, 1), click("c2", "ada", 1, 3)],
        [region("ada", "eu", 2)],
        options={"mode": "left"},
    )
    assert regions_of(run) == {"c1": [None], "c2": ["eu"]}


def test_left_mode_uses_the_configured_default_for_an_unknown_key() -> None:
    default = {"user": "", "region": "UNKNOWN"}
    run = lookup([click("c1", "ada", 1, 1)], [], options={"mode": "left", "default": default})
    assert [out.value for out in run.outputs] == [
        {"click": {"id": "c1", "user": "ada", "clicks": 1}, "region": default}
    ]


def test_a_table_update_never_rewrites_earlier_output() -> None:
    run = lookup(
        [click("c1", "ada", 1, 2), click("c2", "ada", 1, 4), click("c3", "ada", 1, 6)],
        [region("ada", "eu", 1), region("ada", "us", 3), region("ada", "apac", 5)],
    )
    # One output per click, each with the region current at its point; none per update.
    assert regions_of(run) == {"c1": ["eu"], "c2": ["us"], "c3": ["apac"]}
    assert len(run.outputs) == 3


def test_a_table_tombstone_deletes_the_key() -> None:
    clicks = [click("c1", "ada", 1, 2), click("c2", "ada", 1, 4)]
    regions = [region("ada", "eu", 1), region("ada", None, 3)]
    inner = lookup(clicks, regions)
    assert regions_of(inner) == {"c1": ["eu"]}
    assert inner.states == {}  # the deleted key's state is dropped
    left = lookup(clicks, regions, options={"mode": "left"})
    assert regions_of(left) == {"c1": ["eu"], "c2": [None]}


def test_at_equal_event_time_the_stream_record_sees_the_value_before_the_update() -> None:
    run = lookup([click("c1", "ada", 1, 5)], [region("ada", "eu", 1), region("ada", "us", 5)])
    assert regions_of(run) == {"c1": ["eu"]}


def test_event_time_orders_a_key_within_a_micro_batch() -> None:
    # With a `time` field, the click of event time 30 applies after the region of 20, though
    # it arrived first; both arrive in one micro-batch.
    run = run_joiner(
        Lookup,
        {
            "stream": [{"key": "c1", "value": {"user": "ada", "at": 30}, "timestamp": 1}],
            "table": [
                {"key": "ada", "value": {"user": "ada", "region": "eu", "at": 20}, "timestamp": 2}
            ],
        },
        keys=KEYS,
        times={"stream": "at", "table": "at"},
        fields=FIELDS,
    )
    assert [out.value["region"] for out in run.outputs] == [
        {"user": "ada", "region": "eu", "at": 20}
    ]


def test_foreign_key_output_is_keyed_by_the_stream_records_kafka_key() -> None:
    run = lookup(
        [click("c1", "ada", 1, 2), click("c2", "bob", 1, 3), click("c3", "ada", 1, 4)],
        [region("ada", "eu", 1), region("bob", "us", 1)],
    )
    # Within a micro-batch outputs come key by key (join key), so compare as a set.
    assert sorted(out.key for out in run.outputs) == [b"c1", b"c2", b"c3"]  # type: ignore[type-var]
    assert regions_of(run) == {"c1": ["eu"], "c2": ["us"], "c3": ["eu"]}
    assert sorted(run.states) == ["ada", "bob"]  # state is per join key: the table only


def test_bad_stream_records_go_to_dead_letters() -> None:
    run = run_joiner(
        Lookup,
        {
            "stream": [
                {"key": "c1", "value": {"id": "c1", "clicks": 1}, "timestamp": 2},  # no user
                {"key": "c2", "value": None, "timestamp": 3},  # a stream tombstone
            ],
            "table": [region("ada", "eu", 1)],
        },
        keys=KEYS,
        fields=FIELDS,
    )
    assert run.outputs == []
    assert [(d.record.kafka_key, d.kind) for d in run.dead_letters] == [
        (b"c1", "MissingKey"),
        (b"c2", "UnroutableTombstone"),
    ]


def reference_join(
    clicks: list[dict[str, Any]], regions: list[dict[str, Any]]
) -> dict[str, list[Any]]:
    """Left join by hand: each click with its user's last region strictly before the click (a
    click applies before a region update with the same timestamp)."""
    out: dict[str, list[Any]] = {}
    for c in clicks:
        user = c["value"]["user"]
        before = [r for r in regions if r["key"] == user and r["timestamp"] < c["timestamp"]]
        current = before[-1]["value"] if before else None
        out[c["key"]] = [None if current is None else current["region"]]
    return out


@settings(max_examples=60, deadline=None)
@given(
    events=st.lists(
        st.tuples(
            st.booleans(),
            st.sampled_from(["ada", "bob"]),
            st.sampled_from(["eu", "us", None]),
            st.integers(min_value=1, max_value=6),
        ),
        max_size=20,
    ),
    batch_size=st.integers(min_value=1, max_value=5),
)
def test_every_click_joins_the_region_current_at_its_time_in_any_batching(
    events: list[tuple[bool, str, str | None, int]], batch_size: int
) -> None:
    clicks, regions = [], []
    t = 0
    for is_click, user, name, step in events:
        t += step
        if is_click:
            clicks.append(click(f"c{len(clicks)}", user, 1, t))
        else:
            regions.append(region(user, name, t))
    expected = reference_join(clicks, regions)
    whole = lookup(clicks, regions, options={"mode": "left"})
    batched = lookup(clicks, regions, options={"mode": "left"}, batch_size=batch_size)
    assert regions_of(whole) == regions_of(batched) == expected


def test_options_are_checked() -> None:
    with pytest.raises(ValidationError, match='mode = "left"'):
        LookupOptions.model_validate({"default": {"region": "UNKNOWN"}})
    with pytest.raises(ValidationError, match="'inner' or 'left'"):
        LookupOptions.model_validate({"mode": "outer"})
    with pytest.raises(ValidationError, match="needs `field`"):
        AggregateOptions.model_validate({"group_by": "region.region", "op": "sum"})
    with pytest.raises(ValidationError, match="takes no `field`"):
        AggregateOptions.model_validate({"group_by": "r", "op": "count", "field": "x"})
    with pytest.raises(ValidationError, match="extra"):
        AggregateOptions.model_validate({"group_by": "r", "window": "5m"})


def test_downstream_is_the_aggregation_keyed_by_group_by() -> None:
    context = JoinerContext(pipeline="p", fields=FIELDS)
    assert Lookup(LookupOptions(), context).downstream() is None
    stage = Lookup(LookupOptions.model_validate({"aggregate": SUM_CLICKS}), context).downstream()
    assert stage is not None
    assert (stage.key, stage.output) == ("region.region", "totals")
    assert isinstance(stage.joiner, Aggregate)
    assert stage.joiner.options == AggregateOptions.model_validate(SUM_CLICKS)


def joined(cid: str, name: str | None, clicks: Any, t: int) -> dict[str, Any]:
    """A lookup output record as the aggregation stage reads it."""
    value = {
        "click": {"id": cid, "user": "u", "clicks": clicks},
        "region": None if name is None else {"user": "u", "region": name},
    }
    return {"key": cid, "value": value, "timestamp": t}


def aggregate(records: list[dict[str, Any]], options: dict[str, Any], **kw: Any) -> JoinerRun:
    return run_joiner(
        Aggregate, {"joined": records}, keys={"joined": options["group_by"]}, options=options, **kw
    )


def test_count_per_group_emits_every_new_total_keyed_by_group() -> None:
    run = aggregate(
        [joined("c1", "eu", 5, 1), joined("c2", "us", 5, 2), joined("c3", "eu", 5, 3)],
        {"group_by": "region.region"},
    )
    assert by_key(run.outputs) == {
        "eu": [{"region": "eu", "count": 1}, {"region": "eu", "count": 2}],
        "us": [{"region": "us", "count": 1}],
    }
    assert {o.output for o in run.outputs} == {"totals"}
    assert run.states == {"eu": {"total": 2}, "us": {"total": 1}}


def test_sum_per_group_fits_the_totals_schema_and_emits_only_on_change() -> None:
    run = aggregate(
        [joined("c1", "eu", 2, 1), joined("c2", "eu", 0, 2), joined("c3", "eu", 3, 3)],
        SUM_CLICKS,
        output_schemas={"totals": SCHEMAS / "region_clicks.avsc"},
    )
    assert [o.value for o in run.outputs] == [
        {"region": "eu", "clicks": 2},
        {"region": "eu", "clicks": 5},  # adding 0 clicks changed nothing, so emitted nothing
    ]
    assert run.dead_letters == []


def test_sum_without_a_number_goes_to_dead_letters() -> None:
    run = aggregate([joined("c1", "eu", None, 1), joined("c2", "eu", 4, 2)], SUM_CLICKS)
    assert [d.kind for d in run.dead_letters] == ["MissingAggregateField"]
    assert [o.value for o in run.outputs] == [{"region": "eu", "clicks": 4}]


def test_totals_field_names_can_be_set() -> None:
    options = {**SUM_CLICKS, "group_field": "area", "total_field": "total_clicks"}
    run = aggregate([joined("c1", "eu", 2, 1)], options)
    assert [o.value for o in run.outputs] == [{"area": "eu", "total_clicks": 2}]


def test_a_region_change_moves_later_clicks_and_leaves_earlier_totals() -> None:
    """The two stages in sequence, as the engine runs them: lookup, then aggregation."""
    enriched = lookup(
        [
            click("c1", "ada", 2, 2),
            click("c2", "bob", 1, 3),
            click("c3", "ada", 4, 5),  # after ada moved to us
            click("c4", "eve", 7, 6),  # eve has no region
        ],
        [region("ada", "eu", 1), region("bob", "eu", 1), region("ada", "us", 4)],
        options={"mode": "left", "default": {"user": "", "region": "UNKNOWN"}},
    )
    records = [
        {"key": o.key.decode(), "value": o.value, "timestamp": n}  # type: ignore[union-attr]
        for n, o in enumerate(enriched.outputs, start=1)
    ]
    totals = aggregate(records, SUM_CLICKS)
    assert by_key(totals.outputs) == {
        "eu": [{"region": "eu", "clicks": 2}, {"region": "eu", "clicks": 3}],
        "us": [{"region": "us", "clicks": 4}],
        "UNKNOWN": [{"region": "UNKNOWN", "clicks": 7}],
    }


def test_a_joined_record_without_a_group_cannot_be_grouped() -> None:
    # Left mode without a default joins a null region: the second stage has no key for it.
    run = aggregate([joined("c1", None, 2, 1), joined("c2", "eu", 3, 2)], SUM_CLICKS)
    assert [(d.record.kafka_key, d.kind) for d in run.dead_letters] == [(b"c1", "MissingKey")]
    assert [o.value for o in run.outputs] == [{"region": "eu", "clicks": 3}]


def test_an_expired_table_row_is_a_tombstone_to_later_stream_records() -> None:
    """A row whose key has not changed for ``state_ttl`` is forgotten; the clicks that read
    it meanwhile did not renew it (only a change does)."""
    for mode, after in (("inner", {}), ("left", {"c2": [None]})):
        kit = JoinerHarness(
            Lookup, keys=KEYS, fields=FIELDS, options={"mode": mode, "state_ttl": "1s"}
        )
        kit.feed({"table": [region("ada", "eu", 1)]})
        kit.wait(600)
        kit.feed({"stream": [click("c1", "ada", 1, 2)]})  # reads the row: no renewal
        kit.wait(400)  # a second since the row was written: expired, and dropped by its timer
        assert kit.run.states == {} and kit.run.metrics["expired"] == 1
        kit.feed({"stream": [click("c2", "ada", 1, 3)]})
        assert regions_of(kit.run) == {"c1": ["eu"], **after}
        kit.feed({"table": [region("ada", "us", 4)]})  # a new row starts the key afresh
        kit.feed({"stream": [click("c3", "ada", 1, 5)]})
        assert regions_of(kit.run)["c3"] == ["us"]


def test_a_changed_row_renews_its_ttl() -> None:
    kit = JoinerHarness(Lookup, keys=KEYS, fields=FIELDS, options={"state_ttl": "1s"})
    kit.feed({"table": [region("ada", "eu", 1)]})
    kit.wait(900)
    kit.feed({"table": [region("ada", "us", 2)]})
    kit.wait(900)
    kit.feed({"stream": [click("c1", "ada", 1, 3)]})
    assert regions_of(kit.run) == {"c1": ["us"]} and "expired" not in kit.run.metrics
