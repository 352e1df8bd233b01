"""How busy the broker, the load generator and the whole machine were while records were offered.

A latency run shares the machine between the pipeline it measures, the test broker and the
process offering the records (:mod:`bench.offering`). When the broker and the load generator
take much of the machine, a batch's per-record part is slower than it would be on its own; on
a quiet machine they take little. So each latency run says how many cores each used while it
offered records: :class:`CpuClock` reads the broker's process and the whole machine (psutil)
when offering starts and when it ends, and the load generator measures its own process over
the same span.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

import psutil


def process_seconds(process: psutil.Process) -> float:
    """CPU seconds ``process`` has used so far, every thread of it (user + system)."""
    times = process.cpu_times()
    return float(times.user + times.system)


def machine_seconds() -> float:
    """Busy CPU seconds of the whole machine so far, summed over its cores."""
    times = psutil.cpu_times()
    idle = times.idle + getattr(times, "iowait", 0.0)
    # On Linux guest time is already counted in user time (and guest_nice in nice).
    guests = getattr(times, "guest", 0.0) + getattr(times, "guest_nice", 0.0)
    return float(sum(times) - idle - guests)


@dataclass(frozen=True)
class CpuShare:
    """CPU seconds used over ``seconds`` of wall time, by part."""

    seconds: float
    cores: int
    """The machine's cores."""
    broker: float | None
    """The broker's process (None: its process is not known, as on a broker of a cluster)."""
    generator: float
    """The load generator's process."""
    machine: float
    """The whole machine: the pipeline measured, the broker, the load generator, the reader
    of the output, and anything else running."""

    def used(self, cpu_seconds: float) -> float:
        """``cpu_seconds`` as cores kept busy over the span (1.0: one whole core)."""
        return cpu_seconds / self.seconds if self.seconds > 0 else 0.0

    @property
    def rest(self) -> float:
        """CPU seconds of everything but the broker and the load generator."""
        return max(0.0, self.machine - (self.broker or 0.0) - self.generator)


class CpuClock:
    """Started when offering starts; :meth:`share` when it ends."""

    def __init__(self, broker_pid: int | None) -> None:
        self._broker = psutil.Process(broker_pid) if broker_pid else None
        self._began = time.monotonic()
        self._broker_s = self._broker_seconds()
        self._machine_s = machine_seconds()

    def _broker_seconds(self) -> float | None:
        if self._broker is None:
            return None
        try:
            return process_seconds(self._broker)
        except psutil.Error:
            return None

    def share(self, generator_seconds: float) -> CpuShare:
        """The span's shares, the load generator having measured ``generator_seconds``."""
        broker = self._broker_seconds()
        return CpuShare(
            seconds=time.monotonic() - self._began,
            cores=os.cpu_count() or 1,
            broker=None if broker is None or self._broker_s is None else broker - self._broker_s,
            generator=generator_seconds,
            machine=machine_seconds() - self._machine_s,
        )
