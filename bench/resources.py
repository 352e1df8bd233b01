"""Peak memory of a run (the Spark JVM and its Python workers) and the size of its state.

:class:`PeakMemory` samples the memory of a process and all its descendants in a background
thread, every ``interval_s``, while a run is in progress: for enrichd that is this
benchmark process (the PySpark driver), the JVM it launched (driver and ``local[2]``
executors in one), and the Python workers the JVM forks for the source, the joiner and the
sink. Each sample sorts the processes into the JVM, the Python workers and the rest (the
bench's own Python process), so the report can say which part holds the memory. The parts are
measured as PSS (proportional set size: a page shared by N processes counts 1/N in each),
because ``pyspark.daemon`` forks its workers and plain RSS would count their shared pages
once per worker; the plain RSS sum is kept too, as the pessimistic figure. Peaks are
per part and of the sum; the parts peak at different moments, so the sum's peak is the one
to compare with a memory budget. A sample misses anything that grows and shrinks between two
samples: the figures are lower bounds. A sample costs CPU in proportion to the memory it
measures (the kernel walks every page table to count PSS: about 50 ms for a run's JVM and
workers), so sampling every 250 ms took a tenth of the 2-core machine from the run it
measured; once a second takes a fortieth.

:func:`state_bytes` measures a checkpoint's ``state`` folder after a run: the RocksDB files
of every state store version Spark keeps (by default the last 100 batches' changes), which is
what a restart needs, so it overstates the live state by the versions kept.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

import psutil

from daemon.checkpoint.layout import state_folder

MIB = 1024 * 1024
SAMPLE_INTERVAL_S = 1.0
"""How often :class:`PeakMemory` samples (see the module docstring for why not more often)."""


@dataclass(frozen=True)
class Peaks:
    """Peak memory in bytes: PSS by part and in all, and the plain RSS sum."""

    jvm: int = 0
    python_workers: int = 0
    other: int = 0
    """The root process (the benchmark's driver-side Python) and any other descendants."""
    broker: int = 0
    """The embedded test broker, which keeps every topic in memory: it is not the service's
    and grows with every record a benchmark writes, so it is not in ``total``."""
    total: int = 0
    rss_total: int = 0
    """Peak of the plain RSS sum (shared pages counted once per process)."""
    samples: int = 0

    @property
    def spark(self) -> int:
        """JVM plus Python workers at their separate peaks (an upper bound of their sum)."""
        return self.jvm + self.python_workers

    def describe(self) -> str:
        """One line for a report."""
        return (
            f"peak PSS {self.total / MIB:,.0f} MiB in all ({self.samples} samples; the plain "
            f"RSS sum peaked at {self.rss_total / MIB:,.0f} MiB): JVM {self.jvm / MIB:,.0f} "
            f"MiB, Python workers {self.python_workers / MIB:,.0f} MiB, bench driver process "
            f"{self.other / MIB:,.0f} MiB (not counted: the test broker, which keeps every "
            f"topic in memory, {self.broker / MIB:,.0f} MiB)"
        )


def _part(process: psutil.Process) -> str:
    """Which part a process belongs to: "jvm", "python_workers", "broker" or "other"."""
    try:
        name = process.name()
        cmdline = " ".join(process.cmdline())
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return "gone"
    if "tansu" in name or "tansu" in cmdline:
        return "broker"
    if name == "java" or "org.apache.spark" in cmdline:
        return "jvm"
    if "pyspark.daemon" in cmdline or "pyspark.worker" in cmdline:
        return "python_workers"
    if "python" in name and _under_jvm(process):
        return "python_workers"  # any other Python the JVM started is Spark's too
    return "other"


def _under_jvm(process: psutil.Process) -> bool:
    try:
        return any(p.name() == "java" for p in process.parents())
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return False


class PeakMemory:
    """``with PeakMemory() as peak: ...`` then ``peak.result``: peak RSS of a process tree."""

    def __init__(self, root: int | None = None, interval_s: float = SAMPLE_INTERVAL_S) -> None:
        self.root = psutil.Process(root or os.getpid())
        self.interval_s = interval_s
        self._parts: dict[int, str] = {}
        self._peak = dict.fromkeys(
            ("jvm", "python_workers", "other", "broker", "total", "rss_total"), 0
        )
        self._samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="peak-memory", daemon=True)

    def __enter__(self) -> PeakMemory:
        self._thread.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self.sample()  # one last look, in case the run was shorter than an interval

    @property
    def result(self) -> Peaks:
        """The peaks so far."""
        return Peaks(**self._peak, samples=self._samples)

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.sample()

    def sample(self) -> None:
        """Measure the tree once and raise the peaks."""
        sums = {"jvm": 0, "python_workers": 0, "other": 0}
        broker = rss = 0
        try:
            processes = [self.root, *self.root.children(recursive=True)]
        except psutil.NoSuchProcess:
            return
        for process in processes:
            part = self._parts.get(process.pid)
            if part is None:
                part = self._parts[process.pid] = _part(process)
            if part == "gone":
                continue
            try:
                memory = process.memory_full_info()
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                continue
            if part == "broker":
                broker += memory.rss
                continue
            sums[part] += getattr(memory, "pss", memory.rss)  # PSS is Linux-only
            rss += memory.rss
        totals = (("total", sum(sums.values())), ("rss_total", rss), ("broker", broker))
        for part, value in (*sums.items(), *totals):
            self._peak[part] = max(self._peak[part], value)
        self._samples += 1


def dir_bytes(path: Path) -> int:
    """Bytes of every file under ``path`` (0 when it does not exist)."""
    total = 0
    for folder, _, files in os.walk(path):
        for name in files:
            try:
                total += (Path(folder) / name).stat().st_size
            except OSError:
                continue  # removed while walking
    return total


def state_bytes(checkpoint: Path) -> int:
    """Bytes of the checkpoint's ``state`` folder (every stage's stores, every version kept)."""
    return dir_bytes(state_folder(checkpoint))


def state_line(checkpoint_bytes: int, keys: int) -> str:
    """One line for a report: the state folder's size, in all and per key."""
    per_key = checkpoint_bytes / keys if keys else 0.0
    return (
        f"state folder {checkpoint_bytes / MIB:,.1f} MiB after the run ({per_key:,.0f} B per "
        f"key over {keys:,} keys; RocksDB files of every state version Spark keeps, so more "
        "than the live state)"
    )
