"""validate's field checks ask only what a joiner declares: one that declares nothing runs
unchecked, as before the declarations existed. The built-ins' checks: tests/commands."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from daemon.model.config import parse_pipeline_file
from daemon.pipeline.field_checks import field_problems
from daemon.plugin import DeadLetter, Emit, InputRecord, Joiner, JoinerContext, JoinerOptions

SCHEMAS = Path(__file__).resolve().parents[3] / "schemas"


class Quiet(Joiner):
    """Declares neither option fields nor its output."""

    name = "quiet"
    description = "Writes whatever it likes."
    roles = ("left", "right")

    def initial_state(self) -> None:
        return None

    def process(
        self, key: str, state: Any, records: Sequence[InputRecord], ctx: JoinerContext
    ) -> Iterator[Emit | DeadLetter]:
        yield from ()


def test_a_joiner_that_declares_nothing_gets_no_field_checks(tmp_path: Path) -> None:
    file = parse_pipeline_file(
        tmp_path / "pipeline.toml",
        {
            "pipeline": [
                {
                    "name": "quiet",
                    "joiner": "quiet",
                    "checkpoint": str(tmp_path / "checkpoint"),
                    "inputs": {
                        "left": {"topic": "a", "schema": str(SCHEMAS / "user.avsc"), "key": "id"},
                        "right": {"topic": "b", "schema": str(SCHEMAS / "tweet.avsc"), "key": "id"},
                    },
                    # An output it could not fill, were it checked.
                    "output": {"topic": "c", "schema": str(SCHEMAS / "region_clicks.avsc")},
                }
            ]
        },
    )
    pipe = file.pipeline[0]
    joiner = Quiet(JoinerOptions(), JoinerContext(pipeline="quiet", fields={}))
    assert list(joiner.writes()) == []
    assert field_problems(pipe, "here", joiner) == []
