"""The kit's view of the installed enrichd: a joiner as the host loads it, a file as validate
sees it. Running a joiner through the engine (``replay_joiner``): tests/joins and the example
plugin's tests."""

from __future__ import annotations

from pathlib import Path

import pytest

import daemon
from daemon.errors import UnknownJoinerError
from daemon.joiners.comap import CoMap
from daemon.testing import installed, validate

EXAMPLE = Path(daemon.__file__).parent / "examples" / "tweet-views.toml"


def test_installed_gives_a_joiner_with_the_distribution_that_registered_it() -> None:
    registered = installed("comap")
    assert registered.cls is CoMap
    assert (registered.plugin.name, registered.plugin.distribution) == ("comap", "enrichd")
    with pytest.raises(UnknownJoinerError, match="unknown joiner 'no-such'; installed joiners"):
        installed("no-such")


def test_validate_gives_one_line_per_problem_and_none_for_a_valid_file(tmp_path: Path) -> None:
    assert validate(EXAMPLE) == []
    schemas = EXAMPLE.parent.parent / "schemas"
    text = EXAMPLE.read_text(encoding="utf-8").replace('"../schemas/', f'"{schemas}/')
    broken = tmp_path / "broken.toml"
    broken.write_text(text.replace('joiner = "comap"', 'joiner = "no-such"'), encoding="utf-8")
    (problem,) = validate(broken)
    assert problem.startswith(f"{broken}: pipeline[0] (tweet-views).joiner: unknown joiner")
