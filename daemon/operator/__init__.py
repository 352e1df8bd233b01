"""The joiner operator: a bucket's packs in, the joiner applied, its records written out.

:mod:`~daemon.operator.spec` says what the operator runs with (made on the driver);
:mod:`~daemon.operator.processor` is the ``transformWithState`` processor Spark runs per state
bucket, which keeps its buckets in Spark's state store through
:mod:`~daemon.operator.bucket_store`; :mod:`~daemon.operator.core` is the engine core, the
per-key apply loop without Spark, which :mod:`daemon.testing` runs too;
:mod:`~daemon.operator.state_format` is what the state store holds, compressed by
:mod:`~daemon.operator.state_compression`, with the values of a joiner's stashes in
:mod:`~daemon.operator.stash_log` (docs/architecture.md, 3. State bucket and joiner operator).
"""
