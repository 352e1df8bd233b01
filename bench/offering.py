"""The load generator of a latency run: records offered at a fixed rate, in a process of its own.

:func:`offer` spawns a process (:class:`bench.spawned.Child`) that builds a producer, then,
on the parent's word, offers ``rate`` records a second for ``seconds``: every
:data:`PACE_S` it tops the producer up to the records due by then, each stamped with the
wall-clock time it was handed to the producer (its Kafka CreateTime), which the delivery
reports give back with the record's topic, partition and offset. Its own process keeps the
bench's reader of the output and a pipeline's driver, in the benchmark's process, from
slowing it down (and it from slowing them), and lets :mod:`bench.cpu` say what it cost.

The records come from ``record(i, rng)``, which must be picklable (a module-level class's
instance, not a closure): it is handed to the spawned process.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import psutil

from bench.cpu import CpuClock, CpuShare, process_seconds
from bench.spawned import Child
from daemon.kafka import clients

PACE_S = 0.005
"""How often the offering loop tops the producer up to the records due by then."""

Record = Callable[[int, random.Random], tuple[str, bytes, bytes]]
"""Offered record ``i``: its topic, Kafka key and Avro value (picklable)."""


@dataclass(frozen=True)
class Offered:
    """What was offered: each record's timestamp, the partitions' ends, when, and the CPU."""

    stamps: dict[tuple[str, int, int], int]
    """(topic, partition, offset) -> CreateTime (epoch ms) of every record offered."""
    ends: dict[str, int]
    """``"topic/partition"`` -> the offset after the last record offered there."""
    started: float
    """Epoch seconds when offering began."""
    ended: float
    """Epoch seconds when the last record was handed to the producer."""
    cpu: CpuShare
    """How busy the broker, the load generator and the machine were meanwhile."""


class _Stamps(clients.Deliveries):
    """Delivery callback keeping each partition's end, the failures, and each delivered
    record's timestamp by (topic, partition, offset)."""

    def __init__(self) -> None:
        super().__init__()
        self.stamps: dict[tuple[str, int, int], int] = {}

    def __call__(self, err: Any, msg: Any) -> None:
        super().__call__(err, msg)
        if err is None:
            self.stamps[(msg.topic(), msg.partition(), msg.offset())] = msg.timestamp()[1]


def _generate(
    conf: dict[str, str],
    record: Record,
    rate: int,
    seconds: float,
    seed: int,
    orders: Any,
    reports: Any,
) -> None:
    """The load generator's process: ready, then on ``go`` offer, then report."""
    # Late, as the bench's other clients: importing this module loads no librdkafka.
    from confluent_kafka import Producer

    producer = Producer({**conf, "linger.ms": 5, "partitioner": "murmur2_random"})
    producer.list_topics(timeout=10)  # connected before the clock starts
    stamps = _Stamps()
    rng = random.Random(seed)
    total = int(rate * seconds)
    me = psutil.Process()
    reports.put(("ready",))
    orders.get()  # go
    cpu_before = process_seconds(me)
    sent = 0
    started = time.time()
    began = time.monotonic()
    while sent < total:
        due = min(total, int(rate * (time.monotonic() - began)))
        while sent < due:
            topic, key, value = record(sent, rng)
            clients.produce(
                producer,
                topic,
                value=value,
                key=key,
                timestamp=int(time.time() * 1000),
                on_delivery=stamps,
            )
            sent += 1
        producer.poll(0)
        time.sleep(PACE_S)
    ended = time.time()
    unflushed = producer.flush(60)
    reports.put(("offered", started, ended, process_seconds(me) - cpu_before))
    reports.put(("stamps", stamps.stamps, stamps.ends, stamps.failures[:1], unflushed))


def offer(
    conf: dict[str, str],
    record: Record,
    rate: int,
    seconds: float,
    seed: int,
    broker_pid: int | None,
    timeout_s: float = 120.0,
) -> Offered:
    """Offer ``rate`` records/s of ``record`` for ``seconds`` from a process of its own.

    ``broker_pid`` is the broker's process, whose CPU is measured meanwhile (None: unknown).

    Raises:
        RuntimeError: the load generator failed, or a record could not be delivered.
    """
    child = Child(_generate, (conf, record, rate, seconds, seed), "load generator")
    try:
        child.expect("ready", timeout_s)
        clock = CpuClock(broker_pid)
        child.orders.put("go")
        started, ended, generator_s = child.expect("offered", seconds + timeout_s)
        cpu = clock.share(generator_s)
        stamps, ends, failures, unflushed = child.expect("stamps", timeout_s)
    finally:
        child.stop()
    if unflushed or failures:
        raise RuntimeError(f"could not offer the records: {failures[:1] or 'flush timed out'}")
    return Offered(stamps, ends, started, ended, cpu)
