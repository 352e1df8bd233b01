"""``daemon verify``: prove exactly-once output on a cluster, with kill -9s and a known answer."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Literal

import typer

from daemon.cli.options import Verbose, show_spark_output

JoinerChoice = Literal["comap", "lookup", "window", "asof", "all"]
ModeChoice = Literal["micro_batch", "continuous"]


def verify(
    pipeline_file: Annotated[
        Path | None,
        typer.Argument(
            help="A pipeline file whose Kafka (and registry) settings to connect "
            "with; its pipelines are not run.",
            show_default=False,
        ),
    ] = None,
    bootstrap: Annotated[
        str | None,
        typer.Option(
            "--bootstrap",
            metavar="SERVERS",
            help="The cluster's bootstrap servers (over the file's). Neither: the embedded broker.",
            show_default=False,
        ),
    ] = None,
    joiner: Annotated[
        JoinerChoice, typer.Option("--joiner", help="Which built-in joiner's pipeline, or all.")
    ] = "all",
    records: Annotated[
        int, typer.Option("--records", min=20, help="Input records per joiner.")
    ] = 2000,
    kills: Annotated[
        int, typer.Option("--kills", min=0, help="kill -9s of the running daemon, spread out.")
    ] = 3,
    mode: Annotated[
        ModeChoice,
        typer.Option(
            "--mode",
            help="The pipelines' mode: continuous runs them in long batches of 4 s that commit "
            "every 100 ms, and kills them right after a commit, inside long batches and as "
            "long batches end.",
        ),
    ] = "micro_batch",
    zombie: Annotated[
        bool,
        typer.Option(
            "--zombie/--no-zombie",
            help="Also stop the run with SIGSTOP, start a new one, and resume the old one: "
            "it must be fenced and write nothing twice.",
        ),
    ] = True,
    partitions: Annotated[
        int, typer.Option("--partitions", min=1, help="Partitions of every topic it creates.")
    ] = 2,
    replication: Annotated[
        int,
        typer.Option(
            "--replication", help="Replication factor of its topics; -1: the broker's default."
        ),
    ] = -1,
    prefix: Annotated[
        str,
        typer.Option(
            "--prefix",
            help="Its topics are PREFIX.RUN.*, its transactional ids and groups start "
            "with enrichd.PREFIX: the prefix to grant ACLs on (letters, digits, '_', '-').",
        ),
    ] = "enrichd-verify",
    json_file: Annotated[
        Path | None,
        typer.Option("--json", metavar="FILE", help="Also write the report as JSON there."),
    ] = None,
    keep: Annotated[
        bool, typer.Option("--keep", help="Keep its topics and files for a look afterwards.")
    ] = False,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the workloads.")] = 1,
    timeout: Annotated[
        float,
        typer.Option("--timeout", min=10.0, help="Seconds the whole run may take before it fails."),
    ] = 900.0,
    verbose: Verbose = False,
) -> None:
    """Prove exactly-once output on a cluster: a known answer, kill -9s, a strict check."""
    show_spark_output(verbose)
    # When the command runs: other commands load neither rich's console nor verify's clients.
    from rich.console import Console

    # When the command runs: other commands load neither rich's console nor verify's clients.
    from daemon.verify.plan import JOINERS, VerifyOptions
    from daemon.verify.report import as_json, show
    from daemon.verify.run import verify as run_verify

    options = VerifyOptions(
        joiners=JOINERS if joiner == "all" else (joiner,),
        records=records,
        kills=kills,
        zombie=zombie,
        partitions=partitions,
        replication=replication,
        keep=keep,
        prefix=prefix,
        seed=seed,
        timeout_s=timeout,
        mode=mode,
    )
    status = Console(stderr=True)
    with status.status("daemon verify") as spinner:
        report = run_verify(
            pipeline_file,
            bootstrap,
            options,
            progress=lambda line: spinner.update(f"daemon verify: {line}"),
        )
    show(report, Console())
    if json_file is not None:
        json_file.write_text(json.dumps(as_json(report), indent=2) + "\n", encoding="utf-8")
    sys.exit(report.exit_code)
