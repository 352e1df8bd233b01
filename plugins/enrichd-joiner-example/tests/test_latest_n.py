"""``latest-n``: its logic with ``daemon.testing.run_joiner``, then once through the engine."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from enrichd_joiner_example import LatestN
from pydantic import ValidationError

from daemon.testing import by_key, installed, replay_joiner, run_joiner, validate

SCHEMAS = Path(__file__).resolve().parent.parent / "example" / "schemas"
# The same pipeline shape as example/clicks-with-views.toml, for both the kit and the engine.
PIPELINE: dict[str, Any] = {
    "keys": {"left": "user", "right": "user"},
    "times": {"left": "ts", "right": "ts"},
    "fields": {"left": "click", "right": "recent_views"},
    "schemas": {
        "left": SCHEMAS / "click.avsc",
        "right": SCHEMAS / "page_view.avsc",
    },
    "output_schema": SCHEMAS / "click_with_views.avsc",
}


def view(user: str, url: str, ts: int) -> dict[str, Any]:
    return {"key": user, "value": {"user": user, "url": url, "ts": ts}, "timestamp": ts}


def forget(user: str, ts: int) -> dict[str, Any]:
    """A page-view tombstone: keyed by the user, it clears that user's history."""
    return {"key": user, "value": None, "timestamp": ts}


def click(click_id: int, user: str, ts: int) -> dict[str, Any]:
    body = {"id": click_id, "user": user, "target": "buy", "ts": ts}
    return {"key": str(click_id), "value": body, "timestamp": ts}


def urls(run_outputs: list[Any]) -> dict[str, list[str]]:
    """Per click id, the urls of the views it was enriched with."""
    return {
        str(out.value["id"]): [v["url"] for v in out.value["recent_views"]] for out in run_outputs
    }


def run(clicks: list[dict], views: list[dict], **kw: Any) -> Any:
    return run_joiner(LatestN, {"left": clicks, "right": views}, **PIPELINE, **kw)


def test_a_click_gets_the_last_n_views_of_its_user_oldest_first() -> None:
    views = [view("ada", f"/{i}", 10 * i) for i in range(1, 6)] + [view("bob", "/b", 15)]
    result = run([click(1, "ada", 45), click(2, "ada", 100)], views, options={"n": 3})

    assert urls(result.outputs) == {"1": ["/2", "/3", "/4"], "2": ["/3", "/4", "/5"]}
    first = result.outputs[0]
    assert first.key == "1"
    assert first.value["click"] == click(1, "ada", 45)["value"]
    assert result.dead_letters == []
    assert result.metrics == {"matched": 2}


def test_a_click_without_views_gets_an_empty_list() -> None:
    result = run([click(1, "cyd", 5)], [view("ada", "/a", 1)])
    assert urls(result.outputs) == {"1": []}
    assert result.metrics == {"unmatched": 1}


def test_a_view_in_the_same_millisecond_comes_after_the_click() -> None:
    result = run([click(1, "ada", 20)], [view("ada", "/before", 10), view("ada", "/same", 20)])
    assert urls(result.outputs) == {"1": ["/before"]}


def test_a_view_tombstone_clears_the_history_of_its_user_only() -> None:
    views = [view("ada", "/a", 1), view("bob", "/b", 2), forget("ada", 3), view("ada", "/c", 4)]
    result = run([click(1, "ada", 5), click(2, "bob", 6)], views)
    assert urls(result.outputs) == {"1": ["/c"], "2": ["/b"]}


def test_state_holds_n_views_and_is_dropped_when_cleared() -> None:
    result = run([], [view("ada", f"/{i}", i) for i in range(1, 5)], options={"n": 2})
    assert [v["url"] for v in result.states["ada"]] == ["/3", "/4"]

    cleared = run([], [view("ada", "/a", 1), forget("ada", 2)])
    assert cleared.states == {}


def test_unroutable_records_go_to_dead_letters() -> None:
    no_id = {"key": "x", "value": {"user": "ada", "target": "t", "ts": 2}, "timestamp": 2}
    left_tombstone = {"key": "1", "value": None, "timestamp": 3}
    result = run_joiner(
        LatestN, {"left": [no_id, left_tombstone]}, keys={"left": "user", "right": "user"}
    )
    assert sorted((d.record.offset, d.kind) for d in result.dead_letters) == [
        (0, "MissingId"),
        (1, "UnroutableTombstone"),
    ]
    assert result.outputs == []


def test_n_must_be_positive() -> None:
    with pytest.raises(ValidationError):
        run([], [], options={"n": 0})


def interleaved(count: int = 60) -> tuple[list[dict], list[dict]]:
    """Three users' clicks and views, with tombstones, interleaved in time."""
    clicks, views = [], []
    for t in range(1, count + 1):
        user = ["ada", "bob", "cyd"][t % 3]
        if t % 4 == 0:
            clicks.append(click(t, user, t))
        elif t % 13 == 0:
            views.append(forget(user, t))
        else:
            views.append(view(user, f"/{user}/{t}", t))
    return clicks, views


@pytest.mark.parametrize("batch_size", [1, 2, 3, 7, 50])
def test_outputs_do_not_depend_on_the_micro_batch_size(batch_size: int) -> None:
    clicks, views = interleaved()
    whole = run(clicks, views)
    batched = run(clicks, views, batch_size=batch_size)

    assert whole.batches == 1
    assert batched.batches == -(-(len(clicks) + len(views)) // batch_size)
    assert by_key(batched.outputs) == by_key(whole.outputs)
    assert len(whole.outputs) == len(clicks)


def test_the_plugin_is_installed_under_its_entry_point() -> None:
    registered = installed("latest-n")
    assert registered.cls is LatestN
    assert registered.plugin.distribution == "enrichd-joiner-example"


def test_the_engine_gives_what_run_joiner_gives(broker: Any, spark: Any) -> None:
    clicks, views = interleaved(30)  # every micro-batch costs Spark about a second: few
    options = {"n": 2}

    engine = replay_joiner(
        "latest-n",
        {"left": clicks, "right": views},
        options=options,
        max_batch=12,
        bootstrap_servers=broker.bootstrap_servers,
        **PIPELINE,
    )

    assert engine.batches > 1
    assert engine.dead_letters == []
    expected = run(clicks, views, options=options)
    assert by_key(engine.outputs) == by_key(expected.outputs)
    assert all(
        o["headers"]["enrichd.source.topic"].startswith("latest-n.left") for o in engine.outputs
    )


def test_validate_checks_left_id_and_the_output_schema_against_what_latest_n_declares(
    tmp_path: Path,
) -> None:
    """``FieldOf("left")`` and ``writes`` let `daemon validate` catch what would dead-letter."""
    example = SCHEMAS.parent / "clicks-with-views.toml"
    text = example.read_text(encoding="utf-8").replace('"schemas/', f'"{SCHEMAS}/')
    assert validate(example) == []
    path = tmp_path / "clicks.toml"
    path.write_text(text.replace("n = 2", 'n = 2\nleft_id = "click_id"'), encoding="utf-8")
    (problem,) = validate(path)
    assert problem.startswith(
        f"{path}: pipeline[0] (clicks-with-views).options.left_id: field 'click_id' is not in "
        "the 'left' input's schema"
    )


def test_a_select_reads_latest_ns_own_fields_and_validate_checks_its_paths(
    tmp_path: Path,
) -> None:
    """A pipeline's ``select`` over what ``writes`` declares: latest-n's own ``id``, a field of
    the click and the list of views, each checked against the schemas, one line a mistake."""
    flat = {
        "type": "record",
        "name": "FlatClick",
        "fields": [
            {"name": "id", "type": "long"},
            {"name": "target", "type": "string"},
            {"name": "views", "type": {"type": "array", "items": {
                "type": "record", "name": "View", "fields": [
                    {"name": "user", "type": "string"},
                    {"name": "url", "type": "string"},
                    {"name": "ts", "type": "long"},
                ]}}},
        ],
    }  # fmt: skip
    output = tmp_path / "flat_click.avsc"
    output.write_text(json.dumps(flat), encoding="utf-8")
    text = (SCHEMAS.parent / "clicks-with-views.toml").read_text(encoding="utf-8")
    text = text.replace('"schemas/click_with_views.avsc"', f'"{output}"')
    text = text.replace('"schemas/', f'"{SCHEMAS}/')
    select = '\n[pipeline.select]\nid = "id"\ntarget = "click.{}"\nviews = "recent_views"\n'
    path = tmp_path / "flat.toml"
    path.write_text(text + select.format("target"), encoding="utf-8")
    assert validate(path) == []
    path.write_text(text + select.format("targt"), encoding="utf-8")
    assert validate(path) == [
        f"{path}: pipeline[0] (clicks-with-views).select.target: 'click.targt': field 'targt' "
        "is not in the record at 'click' (the 'left' input's record); its fields: id, user, "
        "target, ts"
    ]


def test_validate_refuses_every_inputs_headers_of_a_joiner_that_carries_one_records(
    tmp_path: Path,
) -> None:
    """latest-n gives its outputs its click's headers only (it leaves ``merges_headers``
    unset): ``headers_from = "inputs"`` is refused in one line, not carried half."""
    text = (SCHEMAS.parent / "clicks-with-views.toml").read_text(encoding="utf-8")
    text = text.replace('"schemas/', f'"{SCHEMAS}/')
    path = tmp_path / "inputs.toml"
    path.write_text(
        text.replace('joiner = "latest-n"', 'joiner = "latest-n"\nheaders_from = "inputs"')
    )
    assert validate(path) == [
        f"{path}: pipeline[0] (clicks-with-views).headers_from: pipeline 'clicks-with-views': "
        "joiner 'latest-n' carries the headers of one record per output, not of every input: "
        'use headers_from = "record"'
    ]
