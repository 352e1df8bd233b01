"""Throughput benchmarks: enrichd pipelines against a raw confluent-kafka + fastavro ceiling.

Run ``python -m bench all`` (every workload at the issues' sizes) or ``python -m bench NAME
--help`` for one workload. Results go to ``BENCHMARKS.md`` at the repository top, one section
per workload (see :mod:`bench.report`).
"""
