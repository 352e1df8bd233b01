"""The processor Spark pickles: a joiner processor that is loaded by its first call.

At a query's first micro-batch Spark starts a fresh Python process on the driver (PySpark's
``transform_with_state_driver_worker``) only to learn the processor's state variables: it
unpickles the processor and calls its ``init`` with a handle that records declarations.
Unpickling a :class:`~daemon.operator.processor.JoinerProcessor` loads every module of the
operator, the joiner and the sink, pyarrow and pydantic among them: about 1.4 of that
process's 2.6 CPU seconds, paid by every query start (each ``daemon run`` start and restart,
each replay). A :class:`DeferredProcessor` holds the joiner processor pickled; its ``init``
declares the state variables with nothing but PySpark's types (:mod:`.state_vars`), and the
joiner processor is unpickled by the first call that needs it, on an executor.

This module must stay that light: it imports no other module of enrichd's at the top but
:mod:`.state_vars` (``tests/unit/test_worker_imports.py`` checks it).
"""

from __future__ import annotations

import pickle  # noqa: S403 - the pickle is the driver's own processor, sent by Spark
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from pyspark.cloudpickle import dumps
from pyspark.sql.streaming import StatefulProcessor, StatefulProcessorHandle

from daemon.operator.state_vars import StateVariables, declare

if TYPE_CHECKING:
    from daemon.operator.processor import JoinerProcessor


class DeferredProcessor(StatefulProcessor):
    """A :class:`~daemon.operator.processor.JoinerProcessor`, unpickled by its first call."""

    def __init__(self, processor: JoinerProcessor) -> None:
        self._pickled = dumps(processor)

    def init(self, handle: StatefulProcessorHandle) -> None:
        """Declare the state variables; the joiner processor waits for a call."""
        self._handle = handle
        self._variables: StateVariables = declare(handle)
        self._processor: JoinerProcessor | None = None

    def _started(self) -> JoinerProcessor:
        """The joiner processor, unpickled and started on the first call."""
        if self._processor is None:
            self._processor = pickle.loads(self._pickled)  # noqa: S301 - see the import
            self._processor.start(self._handle, self._variables)
        return self._processor

    def handleInputRows(  # noqa: N802
        self,
        key: Any,
        rows: Iterator[Any],
        timerValues: Any,  # noqa: N803
    ) -> Iterator[Any]:
        """The joiner processor's ``handleInputRows``."""
        return self._started().handleInputRows(key, rows, timerValues)

    def handleInitialState(  # noqa: N802
        self,
        key: Any,
        initialState: Any,
        timerValues: Any,  # noqa: N803
    ) -> None:
        """The joiner processor's ``handleInitialState``."""
        self._started().handleInitialState(key, initialState, timerValues)

    def handleExpiredTimer(  # noqa: N802
        self,
        key: Any,
        timerValues: Any,
        expiredTimerInfo: Any,  # noqa: N803
    ) -> Iterator[Any]:
        """The joiner processor's ``handleExpiredTimer``."""
        return self._started().handleExpiredTimer(key, timerValues, expiredTimerInfo)

    def close(self) -> None:
        """Close the joiner processor if a call started it (the driver's run starts none)."""
        if self._processor is not None:
            self._processor.close()
