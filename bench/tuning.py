"""Settings a run can try, the same for every workload: ``--spark-conf``, ``--state-buckets``...

Issue 63 measures what a setting or a small change saves on a micro-batch. Each is tried by
running a workload twice, with and without it, one after the other on a quiet machine, e.g.

    python -m bench comap --no-quix --no-write
    python -m bench comap --no-quix --no-write --shuffle-partitions 1 --state-buckets 8

A workload's options are its sizes; these are the engine's settings, given to every enrichd
run of the workload: Spark settings to its Spark session (``--spark-conf``,
``--shuffle-partitions``, ``--unix-sockets``), ``state_buckets`` to its pipelines, and the
switches of enrichd's cheaper paths, which enrichd reads from its environment
(:data:`SWITCHES`). ``all`` hands them on to each workload, and a section's Command line
shows them, so that its figures say what they were measured with.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass, field
from typing import Any

from daemon.pipeline import switches

SWITCHES = {
    switch.variable.removeprefix("ENRICHD_").lower(): switch for switch in switches.SWITCHES
}
"""enrichd's switches (:mod:`daemon.pipeline.switches`) by the name of their option:
``ENRICHD_COUNTS_SINK`` is ``--counts-sink``."""


def _option(name: str) -> str:
    return "--" + name.replace("_", "-")


@dataclass(frozen=True)
class Tuning:
    """The settings every enrichd run of this process is given."""

    spark_conf: dict[str, str] = field(default_factory=dict)
    state_buckets: int | None = None
    switches: dict[str, str] = field(default_factory=dict)
    """Switch name -> the value chosen (absent: enrichd's default)."""

    def options(self) -> list[str]:
        """The command-line options that give this tuning (for ``all``'s children)."""
        found: list[str] = []
        for key, value in self.spark_conf.items():
            found += ["--spark-conf", f"{key}={value}"]
        if self.state_buckets is not None:
            found += ["--state-buckets", str(self.state_buckets)]
        for name, value in self.switches.items():
            found += [_option(name), value]
        return found


_current = Tuning()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The tuning options every workload (and ``all``) takes."""
    parser.add_argument(
        "--spark-conf",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a Spark setting for every enrichd run (repeatable), e.g. "
        "spark.python.factory.idleWorkerMaxPoolSize=2",
    )
    parser.add_argument(
        "--shuffle-partitions",
        type=int,
        metavar="N",
        help="spark.sql.shuffle.partitions for every enrichd run (enrichd's default: 2)",
    )
    parser.add_argument(
        "--unix-sockets",
        action="store_true",
        help="spark.python.unix.domain.socket.enabled: Spark talks to its Python workers "
        "over unix domain sockets instead of TCP on loopback",
    )
    parser.add_argument(
        "--state-buckets",
        type=int,
        metavar="N",
        help="state_buckets of every enrichd pipeline (enrichd's default: 32)",
    )
    for name, switch in SWITCHES.items():
        parser.add_argument(
            _option(name),
            dest=name,
            choices=switch.values,
            help=f"{switch.what}: sets {switch.variable} (enrichd's default: {switch.default})",
        )


def from_args(args: argparse.Namespace) -> Tuning:
    """The tuning the parsed options ask for.

    Raises:
        ValueError: a ``--spark-conf`` without ``=``.
    """
    conf: dict[str, str] = {}
    for setting in getattr(args, "spark_conf", None) or []:
        key, sep, value = setting.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"--spark-conf {setting!r}: expected KEY=VALUE")
        conf[key.strip()] = value.strip()
    if getattr(args, "shuffle_partitions", None) is not None:
        conf["spark.sql.shuffle.partitions"] = str(args.shuffle_partitions)
    if getattr(args, "unix_sockets", False):
        conf["spark.python.unix.domain.socket.enabled"] = "true"
    switches = {
        name: getattr(args, name) for name in SWITCHES if getattr(args, name, None) is not None
    }
    return Tuning(conf, getattr(args, "state_buckets", None), switches)


def apply(tuning: Tuning) -> None:
    """Make ``tuning`` the one every enrichd run of this process gets; set its switches."""
    global _current  # noqa: PLW0603 - one tuning per process, as one command line
    _current = tuning
    for name, value in tuning.switches.items():
        os.environ[SWITCHES[name].variable] = value


def current() -> Tuning:
    """The tuning of this process."""
    return _current


def spark(config: Any) -> Any:
    """A ``SparkConfig`` with the tuning's Spark settings over its own."""
    if not _current.spark_conf:
        return config
    return config.model_copy(update={"conf": {**config.conf, **_current.spark_conf}})


def pipeline(pipe: Any) -> Any:
    """A ``PipelineConfig`` with the tuning's ``state_buckets``."""
    if _current.state_buckets is None:
        return pipe
    return pipe.model_copy(update={"state_buckets": _current.state_buckets})


def command_suffix() -> str:
    """The tuning as it reads on a section's Command line ("" when there is none)."""
    options = _current.options()
    return "".join(f" {option}" for option in options)
