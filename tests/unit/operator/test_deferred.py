"""The processor Spark pickles declares its state cheaply and starts the joiner on a call.

Spark's driver-side run of ``init`` (a fresh Python process at each query's first batch) is
played here by a fresh interpreter that unpickles the processor as Spark pickled it and calls
``init`` with a handle that records declarations. Every replay and ``daemon run`` in the
suite goes through the real one.
"""

from __future__ import annotations

import pickle  # noqa: S403 - our own pickle, as Spark sends it
import subprocess
import sys
from pathlib import Path

from pyspark.cloudpickle import dumps

from daemon.operator.deferred import DeferredProcessor
from daemon.operator.processor import JoinerProcessor
from daemon.sink.spec import OutputSpec
from tests.unit.operator.processor_calls import Handle, lookup_plan

DRIVER_RUN = """
import pickle, sys
class Recording:
    def __init__(self): self.declared = []
    def getValueState(self, name, schema): self.declared.append(name)
    def getListState(self, name, schema): self.declared.append(name)
processor = pickle.load(open(sys.argv[1], "rb"))
handle = Recording()
processor.init(handle)
processor.close()
print(handle.declared)
print(sorted(m for m in ("pyarrow", "pydantic", "daemon.operator.processor") if m in sys.modules))
"""


def deferred() -> DeferredProcessor:
    output = OutputSpec("p", {}, "exactly_once", "out")
    return DeferredProcessor(JoinerProcessor(lookup_plan(), output))


def test_the_driver_side_init_declares_the_variables_without_loading_the_joiner(
    tmp_path: Path,
) -> None:
    pickled = tmp_path / "processor.pickle"
    pickled.write_bytes(dumps(deferred()))
    done = subprocess.run(
        [sys.executable, "-c", DRIVER_RUN, str(pickled)], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    declared, loaded = done.stdout.splitlines()
    assert declared == "['state_bucket', 'stash_chunks', 'bucket_stamp', 'bucket_delta']"
    assert loaded == "[]"


def test_the_first_call_starts_the_joiner_processor_on_the_declared_variables() -> None:
    processor = pickle.loads(dumps(deferred()))  # noqa: S301 - our own pickle
    handle = Handle()
    processor.init(handle)  # type: ignore[arg-type]
    started = processor._started()
    assert isinstance(started, JoinerProcessor)
    assert started.buckets.state is handle.values["state_bucket"]
    assert started.buckets.deltas is handle.lists["bucket_delta"]
    assert processor._started() is started
