"""A pipeline file in continuous mode: what ``daemon validate`` accepts and refuses.

Each refusal is one line naming ``mode``: what continuous mode cannot run yet.
"""

from __future__ import annotations

from pathlib import Path

from daemon.pipeline.validation import validate_pipeline_file

EXAMPLES = Path(__file__).parents[3] / "examples"


def _continuous(tmp_path: Path, example: str, *edits: tuple[str, str]) -> list[str]:
    """What validate says of ``example`` in continuous mode, with ``edits`` made to it."""
    text = (EXAMPLES / example).read_text()
    text = text.replace("[[pipeline]]\n", '[[pipeline]]\nmode = "continuous"\n', 1)
    for old, new in edits:
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    schemas = (EXAMPLES.parent / "schemas").as_posix()
    path = tmp_path / "pipeline.toml"
    path.write_text(text.replace("../schemas", schemas))
    return validate_pipeline_file(path, check_registry=False)[1]


def test_a_comap_in_continuous_mode_is_valid(tmp_path: Path) -> None:
    assert _continuous(tmp_path, "tweet-views.toml") == []


def test_what_continuous_mode_cannot_run_yet_is_one_line_each(tmp_path: Path) -> None:
    (chain,) = _continuous(tmp_path, "orders-three-tables.toml")
    assert chain.endswith(
        'mode: mode = "continuous" runs one joiner operator; a lookup of several tables runs '
        'its tables in a chain of them: run it in mode = "micro_batch" for now'
    )
    (stage,) = _continuous(tmp_path, "clicks-per-region.toml")
    assert "writes output 'totals' in a second stage" in stage
    # The lookup without its running totals, its table bootstrapped.
    text = (EXAMPLES / "clicks-per-region.toml").read_text()
    totals = text[text.index("# Every change") : text.index("[pipeline.options]")]
    aggregate = text[text.index("[pipeline.options.aggregate]") :]
    (bootstrap,) = _continuous(
        tmp_path,
        "clicks-per-region.toml",
        (totals, ""),
        (aggregate, ""),
        ('mode = "left"\n', 'mode = "left"\nbootstrap = true\n'),
    )
    assert "`bootstrap` (table) reads a table to its end first" in bootstrap
