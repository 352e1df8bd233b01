"""Throughput benchmarks: enrichd pipelines against a raw confluent-kafka + fastavro ceiling.

Run ``python -m bench comap --help``. Results go to ``BENCHMARKS.md`` at the repository top.
"""
