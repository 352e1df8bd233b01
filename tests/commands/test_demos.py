"""`daemon demo [NAME]`: the comap, lookup and versioned demos end to end (asof's is in
test_asof.py), on the session's broker and Spark. `daemon demo` as a process of its own, with
its own broker and Spark and nothing on stderr, runs from a wheel in a fresh virtualenv
(tests/commands/test_install.py)."""

from __future__ import annotations

import functools
import io
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from typer.testing import CliRunner

from daemon.cli import app
from daemon.replay import replay

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def shown(name: str, broker: Any, monkeypatch: pytest.MonkeyPatch) -> str:
    """What ``daemon demo NAME`` prints, run on the session's broker instead of its own."""
    import importlib

    import daemon.replay

    monkeypatch.setattr(
        daemon.replay,
        "replay",
        functools.partial(replay, bootstrap_servers=broker.bootstrap_servers),
    )
    out = io.StringIO()
    importlib.import_module(f"daemon.demos.{name}").show(Console(file=out, width=200))
    return out.getvalue()


def rows_with(text: str, *cells: str) -> list[str]:
    """The table rows of ``text`` that hold every one of ``cells``."""
    return [
        line
        for line in text.splitlines()
        if "│" in line and all(f" {cell} " in line for cell in cells)
    ]


def test_comap_demo_shows_views_and_the_rename_fanning_out(
    broker: Any, spark: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    text = shown("comap", broker, monkeypatch)
    latest = text[text.index("Latest view per tweet") :]
    # Tweets 100 and 102 are Ada's: their latest views carry her new name.
    assert rows_with(latest, "100", "Ada L.") and rows_with(latest, "102", "Ada L.")
    assert rows_with(latest, "101", "Grace")
    assert not rows_with(latest, "103")  # its author never arrived
    assert "0 dead letters" in text


def test_lookup_demo_keeps_earlier_clicks_in_the_old_region(
    broker: Any, spark: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    text = shown("lookup", broker, monkeypatch)
    changes = text[text.index("Every change") : text.rindex("┃ region")]
    now = text[text.rindex("┃ region") :]
    # Totals change in click-time order (outputs carry their click's timestamp).
    assert [line.split("│")[2].strip() for line in rows_with(changes, "us")] == ["1", "6", "8"]
    # Ada's 3 + 2 clicks before her move stay in eu; after it, her 5 count in us with
    # bob's 1 + 2; eve's 4 have no region.
    assert rows_with(now, "eu", "5")
    assert rows_with(now, "us", "8")
    assert rows_with(now, "UNKNOWN", "4")
    assert "0 dead letters" in text


def test_versioned_demo_shows_a_late_row_repairing_a_click(
    broker: Any, spark: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    text = shown("versioned", broker, monkeypatch)
    answers = text[: text.index("Every change")]
    region_then = 5  # the column of the region in the answers' table
    # c7 was answered us, and revised to eu when bob's late move reached Kafka.
    assert [row.split("│")[region_then].strip() for row in rows_with(answers, "c7")] == [
        "us",
        "eu",
    ]
    # Ada's move was late within the grace: c5 waited and needed no revision.
    assert [row.split("│")[region_then].strip() for row in rows_with(answers, "c5")] == ["us"]
    now = text[text.rindex("┃ region") :]
    assert rows_with(now, "eu", "8") and rows_with(now, "us", "7")
    assert rows_with(now, "UNKNOWN", "4")
    assert "0 dead letters" in text


def test_an_unknown_demo_lists_the_demos() -> None:
    result = CliRunner().invoke(app, ["demo", "nope"])
    assert "no demo 'nope'" in str(result.exception)
    for name in ("comap", "asof", "lookup", "versioned"):
        assert name in str(result.exception)


def test_verbose_shows_sparks_own_output(tmp_path: Path) -> None:
    """``--verbose`` lets Spark's and its workers' lines through, as Spark prints them."""
    users, tweets = tmp_path / "users.jsonl", tmp_path / "tweets.jsonl"
    users.write_text(
        '{"key": 1, "value": {"id": 1, "name": "ada", "avatar": null, "updated_at": 1}, '
        '"timestamp": 1}\n'
    )
    tweets.write_text(
        '{"key": 7, "value": {"id": 7, "author_id": 1, "content": "hi"}, "timestamp": 2}\n'
    )
    spark_log = tmp_path / "spark.log"
    done = subprocess.run(
        [
            *(sys.executable, "-m", "daemon", "replay", str(EXAMPLES / "tweet-views.toml")),
            *("--input", f"one={users}", "--input", f"many={tweets}", "--verbose"),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PYSPARK_PYTHON": sys.executable, "ENRICHD_SPARK_LOG": str(spark_log)},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert '"content": "hi"' in done.stdout
    assert "Streaming TransformWithStateInPandas Python worker" in done.stderr
    assert not spark_log.exists()
