"""The switches between a path enrichd replaced and its cheaper one (daemon.pipeline.switches)."""

from __future__ import annotations

import pytest

from daemon.pipeline.switches import COUNTS_SINK, SOURCE_READER, SWITCHES


def test_a_switch_is_its_default_unless_the_environment_names_another_of_its_values(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(COUNTS_SINK.variable, raising=False)
    assert COUNTS_SINK.value() == "foreach-batch"
    monkeypatch.setenv(COUNTS_SINK.variable, "Data-Source")
    assert COUNTS_SINK.value() == "data-source"
    monkeypatch.setenv(COUNTS_SINK.variable, "")
    assert COUNTS_SINK.value() == "foreach-batch"
    monkeypatch.delenv(SOURCE_READER.variable, raising=False)
    assert SOURCE_READER.value() == "executors"  # the driver's reader is off by default
    monkeypatch.setenv(SOURCE_READER.variable, " Driver ")
    assert SOURCE_READER.value() == "driver"


def test_a_value_it_does_not_have_is_refused_with_its_choices(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(COUNTS_SINK.variable, "socket")
    with pytest.raises(
        ValueError, match="ENRICHD_COUNTS_SINK='socket': expected one of foreach-batch, data-source"
    ):
        COUNTS_SINK.value()


def test_the_source_reader_is_refused_with_its_choices_and_every_switch_is_listed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(SOURCE_READER.variable, "socket")
    with pytest.raises(
        ValueError, match="ENRICHD_SOURCE_READER='socket': expected one of executors, driver"
    ):
        SOURCE_READER.value()
    assert SWITCHES == (COUNTS_SINK, SOURCE_READER)  # the benchmark offers each
