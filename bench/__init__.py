"""Benchmarks: enrichd pipelines against a raw confluent-kafka + fastavro ceiling and yardstick.

Run ``python -m bench all`` (every workload at the issues' sizes) or ``python -m bench NAME
--help`` for one workload. Throughput is measured against raw loops doing the same work
(the ceiling); the joiners' end-to-end latency against a raw exactly-once loop doing the same
join (the yardstick, :mod:`bench.yardstick`). Results go to ``BENCHMARKS.md`` at the
repository top, one section per workload (see :mod:`bench.report`).
"""
