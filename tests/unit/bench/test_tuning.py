"""The settings a benchmark run tries (bench.tuning): parsed once, given to every enrichd run,
handed on by ``all``, and shown on each section's Command line."""

from __future__ import annotations

import argparse
import os
from collections.abc import Iterator

import pytest

from bench import tuning
from bench.wording import run_header
from daemon.model.config import PipelineConfig, SparkConfig


@pytest.fixture(autouse=True)
def _untuned(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for switch in tuning.SWITCHES.values():
        monkeypatch.setenv(switch.variable, "")  # so that it is restored afterwards
        monkeypatch.delenv(switch.variable)
    yield
    tuning.apply(tuning.Tuning())


def parsed(*argv: str) -> tuning.Tuning:
    parser = argparse.ArgumentParser()
    tuning.add_arguments(parser)
    return tuning.from_args(parser.parse_args(argv))


def test_the_options_become_spark_settings_buckets_and_switches() -> None:
    chosen = parsed(
        "--shuffle-partitions",
        "1",
        "--unix-sockets",
        "--spark-conf",
        "spark.python.factory.idleWorkerMaxPoolSize=2",
        "--state-buckets",
        "8",
        "--counts-sink",
        "data-source",
        "--source-reader",
        "driver",
    )
    assert chosen.spark_conf == {
        "spark.python.factory.idleWorkerMaxPoolSize": "2",
        "spark.sql.shuffle.partitions": "1",
        "spark.python.unix.domain.socket.enabled": "true",
    }
    assert (chosen.state_buckets, chosen.switches) == (
        8,
        {"counts_sink": "data-source", "source_reader": "driver"},
    )
    assert parsed(*chosen.options()) == chosen  # as `all` hands them on to each workload


def test_a_spark_setting_without_a_value_is_refused() -> None:
    with pytest.raises(ValueError, match="expected KEY=VALUE"):
        parsed("--spark-conf", "spark.sql.shuffle.partitions")


def test_every_enrichd_run_gets_the_tuning_and_the_command_line_says_so() -> None:
    spark = SparkConfig(conf={"spark.sql.shuffle.partitions": "2", "spark.ui.enabled": "false"})
    assert tuning.spark(spark) is spark  # untuned: as the workload made it
    tuning.apply(
        parsed("--shuffle-partitions", "1", "--state-buckets", "4", "--source-reader", "driver")
    )
    assert tuning.spark(spark).conf == {
        "spark.sql.shuffle.partitions": "1",
        "spark.ui.enabled": "false",
    }
    pipe = PipelineConfig.model_validate(
        {
            "name": "views",
            "joiner": "comap",
            "checkpoint": "checkpoints/views",
            "inputs": {"one": {"topic": "users", "key": "id"}},
            "output": {"topic": "views"},
        }
    )
    assert tuning.pipeline(pipe).state_buckets == 4
    assert os.environ["ENRICHD_SOURCE_READER"] == "driver"
    assert "ENRICHD_COUNTS_SINK" not in os.environ  # not chosen: enrichd's default
    command = run_header("python -m bench comap", "a machine")[0]
    assert command == (
        "Command: `python -m bench comap --spark-conf spark.sql.shuffle.partitions=1 "
        "--state-buckets 4 --source-reader driver`  "
    )
