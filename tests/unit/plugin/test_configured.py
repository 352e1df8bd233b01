"""The one place a joiner is made: its options, its context, and what a start refuses."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from daemon.errors import ConfigError, UnknownJoinerError
from daemon.joiners.comap import CoMap, CoMapOptions
from daemon.joiners.lookup import Lookup
from daemon.model.config import PipelineConfig, parse_pipeline_file
from daemon.plugin.configured import configure, pipeline_joiner
from daemon.plugin.host import JoinerRegistry, Plugin

SCHEMAS = Path(__file__).resolve().parents[3] / "schemas"


class Sketch(CoMap):
    """A joiner registered before its logic is written."""

    name = "sketch"
    implemented = False


def joiners() -> JoinerRegistry:
    registry = JoinerRegistry()
    for cls in (CoMap, Lookup, Sketch):
        registry.add(cls, Plugin(cls.name, "test-dist", "0"))
    return registry


def pipe(tmp_path: Path, joiner: str, inputs: dict[str, Any], **more: Any) -> PipelineConfig:
    table = {
        "name": "p",
        "joiner": joiner,
        "checkpoint": str(tmp_path / "checkpoint"),
        "inputs": {
            role: {"topic": role, "schema": str(SCHEMAS / "user.avsc"), "key": "id", **spec}
            for role, spec in inputs.items()
        },
        "output": {"topic": "out", "schema": str(SCHEMAS / "tweet_view.avsc")},
        **more,
    }
    return parse_pipeline_file(tmp_path / "p.toml", {"pipeline": [table]}).pipeline[0]


def test_configure_validates_the_options_and_gives_every_role_a_field() -> None:
    joiner = configure(
        CoMap, {"many_id": "tid"}, pipeline="p", fields={"many": "tweet"}, output_fields=["a"]
    )
    assert isinstance(joiner, CoMap)
    assert joiner.options == CoMapOptions(many_id="tid")
    assert joiner.context.pipeline == "p"
    assert joiner.context.fields == {"one": "one", "many": "tweet"}
    assert joiner.context.output_fields == ("a",)
    with pytest.raises(ValidationError):
        configure(CoMap, {"no_such_option": 1}, pipeline="p")


def test_configure_takes_options_already_made_as_they_are() -> None:
    made = CoMapOptions.model_construct(None, many_id="<many_id>")
    assert configure(CoMap, made, pipeline="p").options is made


def test_a_pipelines_joiner_has_its_options_and_its_inputs_fields(tmp_path: Path) -> None:
    config = pipe(
        tmp_path, "comap", {"one": {"field": "author"}, "many": {}}, options={"many_id": "tid"}
    )
    joiner = pipeline_joiner(config, ("tweet", "author"), joiners())
    assert isinstance(joiner, CoMap)
    assert joiner.options.many_id == "tid"
    assert joiner.context.fields == {"one": "author", "many": "many"}
    assert joiner.context.output_fields == ("tweet", "author")


@pytest.mark.parametrize(
    ("joiner", "inputs", "options", "refusal"),
    [
        ("nope", ["one", "many"], {}, "unknown joiner 'nope'; installed joiners: comap, lookup"),
        ("sketch", ["one", "many"], {}, "pipeline 'p': joiner 'sketch' is not implemented yet"),
        (
            "comap",
            ["one", "other"],
            {},
            "pipeline 'p': joiner 'comap' needs inputs ['many', 'one'], got ['one', 'other']",
        ),
        ("comap", ["one", "many"], {"many_id": 5}, "pipeline 'p': options.many_id: Input should"),
        (
            "lookup",
            ["stream", "table"],
            {"versioned": True, "revisions": True},
            "pipeline 'p': revisions = true numbers each answer in a `revision` field",
        ),
    ],
)
def test_a_start_refuses_a_pipeline_its_joiner_cannot_run_in_one_line(
    tmp_path: Path, joiner: str, inputs: list[str], options: dict[str, Any], refusal: str
) -> None:
    config = pipe(tmp_path, joiner, dict.fromkeys(inputs, {}), options=options)
    with pytest.raises(ConfigError) as refused:
        pipeline_joiner(config, ("stream", "table"), joiners())
    assert str(refused.value).startswith(refusal)
    assert "\n" not in str(refused.value)
    assert isinstance(refused.value, UnknownJoinerError) == (joiner == "nope")
