"""The vocabulary every stage shares; it imports no other package of enrichd.

The pipeline file's model (:mod:`~daemon.model.config`, with its durations, environment
expansion, key formats and envelopes), the rows that travel between the stages and the
markers that ride in them (:mod:`~daemon.model.wire`), where a record goes: its join key,
event time and state bucket (:mod:`~daemon.model.record_route`), the latency stamps the operator
hands to the metrics (:mod:`~daemon.model.latency`), and the constants the driver and Spark's
workers share (:mod:`~daemon.model.constants`).

Spark's short-lived Python workers import the wire rows and routing but never the pipeline
file's pydantic models: this package's ``__init__`` imports nothing, so importing one module
of it loads only that module.
"""
