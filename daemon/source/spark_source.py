"""A Spark streaming source over confluent-kafka: ``assign()``, offsets in Spark's checkpoint.

Spark's data source API puts two jobs in one class; here each has a module of its own, and
this one only connects them to Spark: the driver plans each micro-batch as offset ranges
(:mod:`daemon.source.planning`), and executors read those ranges into packs of routed records
(:mod:`daemon.source.reading`), rows of :data:`daemon.model.wire.SOURCE`. What to read comes
in a :class:`~daemon.source.spec.SourceSpec`, pickled into the source's options.

With the spec's ``read_on_driver`` (``ENRICHD_SOURCE_READER=driver``,
:mod:`daemon.pipeline.switches`), the process that plans also reads
(:class:`DriverStreamReader`, Spark's ``SimpleDataSourceStreamReader``): Spark's long-lived
Python runner on the driver reads the batch as it plans it and hands the packs to the JVM,
which keeps them for the batch's one task, so no Python worker starts to read. That saves a
Python task per read task, which a small batch pays for; a large one is read by one process
instead of one per core. Either way a batch's packs are the same, each carrying the range it
was read over, so the batch markers' digests (:mod:`daemon.sink.markers`) do not depend on
which reader read a batch, or read it again.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import pyarrow as pa
from pyspark.errors import PySparkNotImplementedError
from pyspark.sql.datasource import (
    DataSource,
    DataSourceStreamReader,
    InputPartition,
    SimpleDataSourceStreamReader,
)
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
        """The driver-side planner and executor-side reader.

        Raises:
            PySparkNotImplementedError: the spec reads on the driver; Spark then asks for
                :meth:`simpleStreamReader` instead (PySpark's ``_streamReader``).
        """
        spec = SourceSpec.decode(self.options["spec"])
        if spec.read_on_driver:
            raise PySparkNotImplementedError(
                errorClass="NOT_IMPLEMENTED", messageParameters={"feature": "streamReader"}
            )
        return KafkaStreamReader(spec)

    def simpleStreamReader(self, schema: StructType) -> SimpleDataSourceStreamReader:
        """The planner that reads each batch as it plans it (the spec's ``read_on_driver``)."""
        return DriverStreamReader(SourceSpec.decode(self.options["spec"]))


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


class DriverStreamReader(SimpleDataSourceStreamReader):
    """Plans and reads each micro-batch in Spark's Python runner on the driver.

    Spark keeps what :meth:`read` returns for the batch it plans and hands it to the batch's
    task itself. A batch Spark runs again after a restart (its offsets in the checkpoint's
    offset log, not in its commit log) has no such copy, which lived in the runner's memory:
    Spark reads it by :meth:`readBetweenOffsets`, in a Python task, from its planned offsets.
    Both read the ranges :meth:`SourcePlanner.partitions` gives, as the executors' reader
    does, so each pack carries the same range name whoever read it.

    The batch cap is the planner's, as Spark gives a simple reader no read limit. Spark does
    not pass a query's stop on to a simple reader: the planner's clients close with the
    runner process, which Spark ends then.
    """

    def __init__(self, spec: SourceSpec) -> None:
        self.spec = spec
        self.planner = SourcePlanner(spec)

    def initialOffset(self) -> Offsets:  # noqa: N802 - Spark's name
        """Where a query without a checkpoint starts (:meth:`SourcePlanner.initial_offsets`)."""
        return self.planner.initial_offsets()

    def read(self, start: Offsets) -> tuple[Iterator[pa.RecordBatch], Offsets]:
        """The next micro-batch's packs and its end; ``start`` itself when there is none.

        Spark copies the iterator (``copy.copy``) to hand the packs on, so it is over a
        list, not a generator, which would not copy.
        """
        end = self.planner.latest_offsets(start, ReadMaxRows(self.spec.max_records_per_batch))
        if end == start:
            return iter(()), start
        return iter(self._packs(start, end)), end

    def readBetweenOffsets(self, start: Offsets, end: Offsets) -> Iterator[pa.RecordBatch]:  # noqa: N802
        """A planned batch's packs again, read in a Python task (after a restart).

        The planner checks the batch's ranges again for offsets the broker no longer has,
        as the executors' reader's planner does for such a batch. The task's reader plans
        nothing else: its clients close once the batch is read.
        """
        freeze_loaded()
        try:
            return iter(self._packs(start, end))
        finally:
            self.planner.stop()

    def _packs(self, start: Offsets, end: Offsets) -> list[pa.RecordBatch]:
        """The packs of the batch from ``start`` to ``end``, all its ranges in one list."""
        ranges = [
            kafka_range
            for task in self.planner.partitions(start, end)
            for kafka_range in task.ranges
        ]
        return list(read_ranges(self.spec, ranges))

    def commit(self, end: Offsets) -> None:
        """Nothing to do: the offsets live in Spark's checkpoint, not in a consumer group."""

    def stop(self) -> None:
        """Close the planner's clients (for callers other than Spark, which never calls it)."""
        self.planner.stop()
