"""A Spark streaming source over confluent-kafka: ``assign()``, offsets in Spark's checkpoint.

Spark's data source API puts two jobs in one class; here each has a module of its own, and
this one only connects them to Spark: the driver plans each micro-batch as offset ranges
(:mod:`daemon.source.planning`), and executors read those ranges into packs of routed records
(:mod:`daemon.source.reading`), rows of :data:`daemon.model.wire.SOURCE`. What to read comes
in a :class:`~daemon.source.spec.SourceSpec`, pickled into the source's options.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadLimit, ReadMaxRows
from pyspark.sql.types import StructType

from daemon.model.wire import SOURCE, Offsets
from daemon.source.planning import KafkaPartition, SourcePlanner
from daemon.source.reading import read_ranges
from daemon.source.spec import SourceSpec
from daemon.spark.worker_gc import freeze_loaded


class KafkaSource(DataSource):
    """``spark.readStream.format("enrichd-kafka").option("spec", SourceSpec(...).encode())``."""

    @classmethod
    def name(cls) -> str:
        """The format name."""
        return "enrichd-kafka"

    def schema(self) -> str:
        """The fixed row shape: packs (:data:`daemon.model.wire.SOURCE`)."""
        return SOURCE.ddl

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        """The driver-side planner and executor-side reader."""
        return KafkaStreamReader(SourceSpec.decode(self.options["spec"]))


class KafkaStreamReader(DataSourceStreamReader):
    """Spark's calls on the driver go to a :class:`SourcePlanner`; ``read`` runs on executors."""

    def __init__(self, spec: SourceSpec) -> None:
        self.spec = spec
        self.planner = SourcePlanner(spec)

    def initialOffset(self) -> Offsets:  # noqa: N802 - Spark's name
        """Where a query without a checkpoint starts (:meth:`SourcePlanner.initial_offsets`)."""
        return self.planner.initial_offsets()

    def latestOffset(self, start: Offsets, limit: ReadLimit) -> Offsets:  # noqa: N802
        """The end of the next micro-batch (:meth:`SourcePlanner.latest_offsets`)."""
        return self.planner.latest_offsets(start, limit)

    def getDefaultReadLimit(self) -> ReadLimit:  # noqa: N802 - Spark's name
        """The pipeline's cap on records per micro-batch."""
        return ReadMaxRows(self.spec.max_records_per_batch)

    def partitions(self, start: Offsets, end: Offsets) -> Sequence[InputPartition]:
        """The micro-batch's ranges, dealt out to Spark tasks (:meth:`SourcePlanner.partitions`)."""
        return self.planner.partitions(start, end)

    def commit(self, end: Offsets) -> None:
        """Nothing to do: the offsets live in Spark's checkpoint, not in a consumer group."""

    def stop(self) -> None:
        """Close the planner's clients."""
        self.planner.stop()

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """Read one task's ranges as batches of packs (:mod:`daemon.source.reading`)."""
        assert isinstance(partition, KafkaPartition)  # noqa: S101 - Spark gives back our own
        freeze_loaded()
        yield from read_ranges(self.spec, partition.ranges)
