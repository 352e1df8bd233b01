"""The cores a latency run's parts kept busy (``bench/cpu.py``)."""

from __future__ import annotations

import os

import psutil
import pytest

from bench.cpu import CpuClock, CpuShare, process_seconds


def test_cpu_seconds_over_the_span_are_cores_and_the_rest_is_what_the_two_parts_left() -> None:
    share = CpuShare(seconds=20.0, cores=2, broker=6.0, generator=2.0, machine=30.0)

    assert share.used(share.broker or 0.0) == pytest.approx(0.3)
    assert share.used(share.generator) == pytest.approx(0.1)
    assert share.rest == pytest.approx(22.0)
    assert CpuShare(0.0, 2, None, 1.0, 1.0).used(1.0) == 0.0
    assert CpuShare(10.0, 2, None, 1.0, 4.0).rest == pytest.approx(3.0)  # broker unknown


def test_the_clock_reads_a_process_and_the_machine() -> None:
    me = psutil.Process()
    clock = CpuClock(me.pid)  # this process stands in for the broker
    began = process_seconds(me)
    while process_seconds(me) - began < 0.05:  # CPU of its own, past the clock's tick
        sum(i * i for i in range(10_000))

    share = clock.share(generator_seconds=0.0)

    assert share.broker is not None and share.broker >= 0.05
    assert share.machine >= 0 and share.seconds > 0
    assert share.cores == os.cpu_count()
    assert CpuClock(None).share(0.0).broker is None
