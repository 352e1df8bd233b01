"""The source: Kafka input topics read into packs of records, one per state bucket.

:mod:`~daemon.source.spec` says what a pipeline's source reads and how (made on the driver);
:mod:`~daemon.source.planning` plans each micro-batch as offset ranges on the driver;
:mod:`~daemon.source.reading` reads a task's ranges on an executor and packs the records by
bucket, routing records of composite or Kafka-key join keys and envelopes with
:mod:`~daemon.source.key_router`; :mod:`~daemon.source.spark_source` is the Spark data source
that ties them together (docs/architecture.md, 1. Source).
"""
