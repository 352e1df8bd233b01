"""Constants the driver and Spark's Python workers share, in a module that imports nothing.

Spark starts a fresh Python process for each step of a query's first micro-batch (the
source's schema, its planning, the writer, the commit, ...), and each one imports the source
or the sink module: whatever those import, every start pays again in every such process.
So the modules Spark's workers load take their constants from here rather than from
:mod:`daemon.model.config` or :mod:`daemon.plugin.joiner`, which need pydantic (a third of a
second to import on these machines).
"""

from __future__ import annotations

from typing import Final

END_OF_TIME: Final = 2**62
"""The event time :meth:`Joiner.advance` receives at the end of input: past every window."""

DEFAULT_STATE_BUCKETS: Final = 32
"""Buckets of join keys per pipeline (``state_buckets``): the operator groups rows, keeps state
and sets timers per bucket (see :mod:`daemon.operator.processor`). A checkpoint keeps its
count for life.

Fewer buckets, less fixed cost: every bucket a micro-batch touches costs a few milliseconds
of PySpark and state-store calls, and a batch of a few thousand keys touches all of them.
More buckets, less state rewritten: a touched bucket's blob is read and written whole. With
128 buckets the comap latency run spent its batches on the calls, and its p99 was twice
that with 32 (``BENCHMARKS.md``, "Measurements behind the defaults")."""

DEFAULT_ID_PREFIX: Final = "enrichd"
"""What every transactional id and consumer group of enrichd starts with, unless
``[kafka] id_prefix`` says otherwise (:mod:`daemon.kafka.names`)."""

DEFAULT_TRANSACTION_TIMEOUT_MS: Final = 15 * 60 * 1000
"""``[kafka] transaction_timeout`` unless set: the producers' ``transaction.timeout.ms``, after
which the broker aborts a transaction still open. It is the brokers' default
``transaction.max.timeout.ms``, the most they allow unless raised; librdkafka's own default
is 60 s. A task's transaction opens only once its records are ready
(:mod:`daemon.sink.task_producer`), so this bounds writing them, not computing the batch;
Flink's Kafka sink asks for an hour and the brokers raised to match, and Kafka Streams, whose
transactions span its processing, lowers it to 10 s to fence a dead instance sooner."""
