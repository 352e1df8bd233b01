"""The sink: each task's output written to Kafka exactly once, and each batch's counts.

:mod:`~daemon.sink.spec` says where and how a pipeline writes (made on the driver);
:mod:`~daemon.sink.task_output` writes one Spark task's share of a micro-batch, each record
held back, sent or dead-lettered, through :mod:`~daemon.sink.task_producer`'s producer, in one
Kafka transaction with its committed-batch marker; :mod:`~daemon.sink.commit_turn` lets the
transactions of one machine end one at a time; :mod:`~daemon.sink.spark_sink` is the Spark
sink that adds up the operator's counts once the batch committed and sends them to the
daemon's report socket (:mod:`daemon.report_socket`; docs/architecture.md, 4. and 5.).
"""
