"""Running a raw confluent-kafka + fastavro loop in one process or several, on one clock.

A workload's ceiling is a module-level loop function ``loop(*args, go=None) -> LoopResult``
that reads its share of the input with ``assign()``, does the workload's work and produces
its outputs. :func:`run_processes` runs one share in this process, or each share in a
spawned process (librdkafka's threads do not survive ``fork``) that waits for a common start
signal once its clients are built (:class:`StartSignal`); the time runs from the first record
any process consumed to the last output any process had delivered.
"""

from __future__ import annotations

import multiprocessing
import queue
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar


@dataclass(frozen=True)
class LoopResult:
    """What one loop did, on the shared monotonic clock (``time.monotonic``)."""

    first_consumed: float
    done: float
    consumed: int
    emitted: int


@dataclass(frozen=True)
class RawResult:
    """A ceiling measurement over all its processes."""

    processes: int
    input_records: int
    seconds: float
    emitted: int

    @property
    def rate(self) -> float:
        """Input records per second."""
        return self.input_records / self.seconds


Result = TypeVar("Result", bound=LoopResult)


READY_TIMEOUT_S = 300.0
"""The longest a spawned loop may take to import and build its clients: a bound on a hang."""


class StartSignal:
    """The ``go`` a spawned loop waits on once its clients are built.

    A loop calls ``go.wait()`` when it is ready to consume; this one first tells the parent so,
    and the parent gives the start signal as soon as every loop is ready (a spawned process
    imports its modules first: about a second on a quiet machine, more under load), not after
    a fixed wait that is too long when the machine is quiet and too short when it is busy.
    """

    def __init__(self, context: Any) -> None:
        self._ready = context.Semaphore(0)
        self._go = context.Event()

    def wait(self) -> None:
        """In a loop's process: say it is ready, then wait for the start signal."""
        self._ready.release()
        self._go.wait()

    def give_once_ready(self, workers: list[Any], timeout_s: float = READY_TIMEOUT_S) -> None:
        """In the parent: wait until every one of ``workers`` is ready, then give the signal.

        Raises:
            RuntimeError: a process failed, or was not ready within ``timeout_s``.
        """
        deadline = time.monotonic() + timeout_s
        for _ in workers:
            while not self._ready.acquire(timeout=0.2):
                _raise_if_failed(workers)
                if time.monotonic() > deadline:
                    raise RuntimeError(f"a ceiling process was not ready in {timeout_s:.0f}s")
        self._go.set()


def _raise_if_failed(workers: list[Any]) -> None:
    failed = [w.exitcode for w in workers if w.exitcode not in (None, 0)]
    if failed:
        raise RuntimeError(f"a ceiling process exited with code {failed[0]}")


def _worker(loop: Callable[..., Any], args: tuple[Any, ...], go: StartSignal, results: Any) -> None:
    results.put(loop(*args, go=go))


def run_processes(
    loop: Callable[..., LoopResult], shares: list[tuple[Any, ...]], input_records: int
) -> RawResult:
    """Run ``loop(*share)`` for every share: in this process when there is one, else spawned.

    Raises:
        RuntimeError: a process failed.
    """
    return measure(run_loops(loop, shares), input_records)


def measure(loops: list[Result], input_records: int) -> RawResult:
    """The loops' figures on one clock: first record any consumed to last output any delivered."""
    seconds = max(r.done for r in loops) - min(r.first_consumed for r in loops)
    return RawResult(len(loops), input_records, seconds, sum(r.emitted for r in loops))


def run_loops(loop: Callable[..., Result], shares: list[tuple[Any, ...]]) -> list[Result]:
    """Each share's ``loop(*share)`` result: in this process when there is one, else spawned.

    Raises:
        RuntimeError: a process failed.
    """
    if len(shares) == 1:
        return [loop(*shares[0])]
    context = multiprocessing.get_context("spawn")  # librdkafka's threads do not survive fork
    go, results = StartSignal(context), context.Queue()
    workers = [context.Process(target=_worker, args=(loop, share, go, results)) for share in shares]
    for worker in workers:
        worker.start()
    go.give_once_ready(workers)
    loops: list[Result] = []
    while len(loops) < len(workers):
        try:
            loops.append(results.get(timeout=1.0))
        except queue.Empty:
            _raise_if_failed(workers)
    for worker in workers:
        worker.join(timeout=30)
    return loops


def partitions_of(ends: dict[str, int], topic: str) -> list[tuple[str, int]]:
    """``(topic, partition)`` of every partition of ``topic`` that has records, in order."""
    found = []
    for name, end in ends.items():
        name_topic, _, partition = name.rpartition("/")
        if name_topic == topic and end > 0:
            found.append((topic, int(partition)))
    return sorted(found)


def consumer(conf: dict[str, str]) -> Any:
    """A consumer for ``assign()`` only (the group id is required but never joined)."""
    from confluent_kafka import Consumer

    return Consumer(
        {
            **conf,
            "group.id": "enrichd-bench-raw",
            "enable.auto.commit": False,
            "enable.partition.eof": False,
        }
    )


def producer(conf: dict[str, str]) -> Any:
    """A batching producer, as a throughput-minded raw client would configure one."""
    from confluent_kafka import Producer

    return Producer(
        {
            **conf,
            "linger.ms": 20,
            "batch.num.messages": 100_000,
            "queue.buffering.max.messages": 1_000_000,
        }
    )


def send(producer: Any, topic: str, value: bytes, key: bytes | None, headers: Any = None) -> None:
    """Produce one record, serving delivery reports while the local queue is full."""
    while True:
        try:
            producer.produce(topic, value, key, headers=headers)
            return
        except BufferError:
            producer.poll(0.01)


def provenance(message: Any) -> list[tuple[str, bytes]]:
    """The ``enrichd.source.*`` headers enrichd gives an output of ``message``: its topic,
    partition and offset."""
    return [
        ("enrichd.source.topic", message.topic().encode()),
        ("enrichd.source.partition", str(message.partition()).encode()),
        ("enrichd.source.offset", str(message.offset()).encode()),
    ]


def delivered(producer: Any) -> float:
    """Wait until ``producer`` delivered everything; then the time (``time.monotonic``).

    Raises:
        RuntimeError: something was still undelivered after two minutes.
    """
    if producer.flush(120) != 0:
        raise RuntimeError("the ceiling's producer did not deliver everything")
    return time.monotonic()


def read_to_ends(
    consumer: Any, partitions: list[tuple[str, int]], ends: dict[str, int], batch: int = 10_000
) -> Any:
    """Yield lists of records of ``partitions`` (read together from offset 0) up to ``ends``."""
    from confluent_kafka import TopicPartition

    remaining = {tp: ends[f"{tp[0]}/{tp[1]}"] for tp in partitions}
    consumer.assign([TopicPartition(t, p, 0) for t, p in partitions])
    while remaining:
        messages = consumer.consume(num_messages=batch, timeout=0.5)
        good = [m for m in messages if m.error() is None]
        for message in good:
            where = (message.topic(), message.partition())
            end = remaining.get(where)
            if end is not None and message.offset() + 1 >= end:
                del remaining[where]
        if good:
            yield good
