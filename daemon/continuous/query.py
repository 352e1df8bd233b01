"""A continuous pipeline's query: long batches of leases, each a task's sub-batch loop."""

from __future__ import annotations

from collections.abc import Sequence
from functools import reduce
from typing import Any, NamedTuple

from pyspark.sql import DataFrame
from pyspark.sql import functions as F  # noqa: N812

from daemon.continuous.lease_processor import LeaseProcessor
from daemon.continuous.lease_source import LeaseSource, LongBatches
from daemon.model.wire import BOOTSTRAP, OUTPUT, is_partition_name
from daemon.operator.chain_step import ChainStep, operator_id
from daemon.operator.spec import OperatorPlan
from daemon.sink.spark_sink import BatchCounter
from daemon.sink.spec import OutputSpec
from daemon.source.planning import SourcePlanner
from daemon.source.spec import SourceSpec


def start_long_batches(
    spark: Any,
    name: str,
    checkpoint: str,
    operator: OperatorPlan,
    output: OutputSpec,
    source: SourceSpec,
    starts: dict[str, int],
    batches: LongBatches,
    seeded: Sequence[Any] = (),
    chain: tuple[tuple[OperatorPlan, ChainStep], ...] = (),
) -> Any:
    """Start the query of a continuous pipeline; its ``StreamingQuery``.

    ``starts``: where a lease without state starts reading, by partition name. ``seeded``:
    a seed's state of each operator in query order (``daemon.state.seed``: a row per bucket),
    which the leases take in in the checkpoint's first long batch; empty: none. ``chain``:
    with a joiner that runs as a chain, its operators' plans and places (a lease runs them
    one after another, :mod:`daemon.continuous.operators`).
    """
    registered = spark._jsparkSession.sessionState().dataSourceManager()
    if not registered.dataSourceExists(LeaseSource.name()):
        spark.dataSource.register(LeaseSource)
    # The checkpoint's count once it has one; a count changed since leaves leases sharing a
    # task, which then run one after the other: slower, never wrong.
    partitions = int(spark.conf.get("spark.sql.shuffle.partitions"))
    leases = (
        spark.readStream.format(LeaseSource.name())
        .option("spec", batches.encode())
        .option("partitions", str(partitions))
        .load()
    )
    labels = batches.labels(partitions)
    processor = LeaseProcessor(operator, output, source, starts, labels, batches, chain)
    initial = None
    if seeded:  # each bucket to the lease that joins it, named by its operator
        owners = batches.owners(partitions, source.state_buckets)
        leased = spark.createDataFrame(list(owners.items()), "bucket int, lease int")
        frames = [
            frame.withColumn("operator", F.lit(operator_id(place, len(seeded))))
            for place, frame in enumerate(seeded)
        ]
        initial = reduce(DataFrame.unionByName, frames).join(leased, "bucket").groupBy("lease")
    counts = leases.groupBy("lease").transformWithState(
        statefulProcessor=processor,
        outputStructType=OUTPUT.ddl,
        outputMode="Append",
        timeMode="None",
        initialState=initial,
    )
    return (
        counts.writeStream.option("checkpointLocation", checkpoint)
        .foreachBatch(BatchCounter(output))
        .queryName(name)
        .start()
    )


class FirstPositions(NamedTuple):
    """Where a lease without state starts, and how far it bootstraps first."""

    starts: dict[str, int]
    """Every input partition's earliest offset, by partition name."""
    bootstrap: dict[str, int]
    """The ends the bootstrapped inputs' partitions have now (``{}``: none bootstraps)."""


def first_positions(source: SourceSpec) -> FirstPositions:
    """Where a lease without state starts: every input partition's earliest offset.

    As a micro-batch query without a checkpoint starts (:meth:`SourcePlanner.initial_offsets`),
    bootstrap included: the checkpoint's first long batch reads the bootstrapped inputs to the
    ends they have now before anything else.
    """
    planner = SourcePlanner(source)
    try:
        offsets = planner.initial_offsets()
    finally:
        planner.stop()
    starts = {name: int(at) for name, at in offsets.items() if is_partition_name(name)}
    bootstrap = offsets.get(BOOTSTRAP, {})
    assert isinstance(bootstrap, dict)  # noqa: S101 - the planner's entry
    return FirstPositions(starts, {name: int(end) for name, end in bootstrap.items()})
