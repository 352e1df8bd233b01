"""Continuous mode: a long micro-batch's task reads its lease itself and commits sub-batches.

docs/architecture.md ("Continuous mode") has the design: a task of a long batch reads its
lease's partitions with a consumer of its own, joins what arrived every commit interval
through the operator's own calls, and commits each such sub-batch in a transaction with a
sub-batch marker; an attempt that finds it died inside the long batch replays the committed
sub-batches, output suppressed, and goes on. State stays in the worker for the long batch.
"""
