"""The one line `daemon verify` ends with when SIGTERM or SIGINT stops it, or a bad --prefix."""

from __future__ import annotations

import pytest

from daemon.errors import EnrichdError
from daemon.verify.facts import BrokerFacts
from daemon.verify.kills import Interrupted
from daemon.verify.plan import VerifyOptions
from daemon.verify.run import VerifyReport, _interrupted_line, verify


def report(kept: str | None = None, notes: list[str] | None = None) -> VerifyReport:
    return VerifyReport(
        "r1",
        "enrichd-verify",
        BrokerFacts("127.0.0.1:9092"),
        VerifyOptions(),
        kept=kept,
        notes=notes or [],
    )


def test_the_line_says_where_it_stopped_and_what_became_of_the_topics() -> None:
    stopped = Interrupted("every input record committed")
    assert _interrupted_line(stopped, report(), 12) == (
        "daemon verify was stopped (SIGTERM or SIGINT) before every input record committed: "
        "no child daemon run left running, its 12 topic(s) under enrichd-verify.r1 deleted; "
        "nothing was checked"
    )
    kept = _interrupted_line(stopped, report(kept="/srv/verify-files"), 12)
    assert "its topics under enrichd-verify.r1 and files in /srv/verify-files kept" in kept
    refused = _interrupted_line(stopped, report(notes=["could not delete topic t: no"]), 1)
    assert "could not delete topic t: no; nothing was checked" in refused


def test_a_prefix_with_a_dot_is_one_line_before_anything_starts() -> None:
    """Its pipelines are named PREFIX-RUN-JOINER, and a pipeline's name holds no dot."""
    with pytest.raises(EnrichdError) as refused:
        verify(None, "127.0.0.1:1", VerifyOptions(prefix="team.verify"))
    assert str(refused.value).startswith(
        "--prefix 'team.verify' may hold only letters, digits, '_' and '-'"
    )
