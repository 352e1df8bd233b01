"""``daemon replay``'s printing: every output by name, one file each with --output-dir, and
each output's count in the summary. The real run: tests/joins/test_lookup_versioned.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from daemon.cli import app
from daemon.cli.replay import summary, write_outputs
from daemon.replay import ReplayResult


def result() -> ReplayResult:
    def record(key: str, **value: Any) -> dict[str, Any]:
        return {"key": key, "value": value, "timestamp": 1, "headers": {}}

    return ReplayResult(
        outputs=[record("c1", region="eu"), record("c2", region="us")],
        dead_letters=[record("bad")],
        input_records=5,
        batches=2,
        extra={"totals": [record("eu", clicks=1)], "retractions": []},
    )


def names(text: str) -> list[tuple[str, str]]:
    return [(line["output"], line["key"]) for line in map(json.loads, text.splitlines())]


def test_every_output_is_printed_with_its_name_the_main_one_first(
    capsys: pytest.CaptureFixture[str],
) -> None:
    write_outputs(result(), None, None)
    assert names(capsys.readouterr().out) == [("output", "c1"), ("output", "c2"), ("totals", "eu")]


def test_output_dir_has_one_file_per_output_even_an_empty_one(tmp_path: Path) -> None:
    write_outputs(result(), None, tmp_path / "out")
    files = {path.name: path.read_text() for path in (tmp_path / "out").iterdir()}
    assert set(files) == {"output.jsonl", "totals.jsonl", "retractions.jsonl"}
    assert names(files["totals.jsonl"]) == [("totals", "eu")]
    assert files["retractions.jsonl"] == ""


def test_the_summary_counts_each_output_by_name() -> None:
    assert summary(result()) == (
        "replayed 5 records in 2 micro-batches: output 2, totals 1, retractions 0; "
        "1 dead letters"
    )


def test_the_command_writes_the_outputs_and_says_the_summary(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import daemon.replay

    monkeypatch.setattr(daemon.replay, "replay", lambda *args, **kwargs: result())
    pipeline = Path(__file__).resolve().parents[2] / "fixtures" / "pipelines" / "tweet_views.toml"
    out, dead = tmp_path / "all.jsonl", tmp_path / "dead.jsonl"
    done = CliRunner().invoke(
        app,
        [
            "replay", str(pipeline), "--input", "one=u.jsonl", "--output", str(out),
            "--output-dir", str(tmp_path / "each"), "--dead-letters", str(dead),
        ],
    )  # fmt: skip
    assert done.exit_code == 0, done.output
    assert names(out.read_text()) == [("output", "c1"), ("output", "c2"), ("totals", "eu")]
    assert (tmp_path / "each" / "totals.jsonl").exists()
    assert [json.loads(line)["key"] for line in dead.read_text().splitlines()] == ["bad"]
    assert "output 2, totals 1, retractions 0; 1 dead letters" in done.stderr
